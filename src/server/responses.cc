// POST /v1/responses: the Response object and its SSE events (responses.h). The event shapes
// follow the openai npm client's types (resources/responses/responses.d.ts):
//   response.created, response.in_progress
//   per output item: response.output_item.added, then
//     reasoning:      reasoning_summary_part.added, reasoning_summary_text.delta...,
//                     reasoning_summary_text.done, reasoning_summary_part.done
//     message:        content_part.added, output_text.delta..., output_text.done,
//                     content_part.done
//     function_call:  function_call_arguments.delta, function_call_arguments.done
//     custom_tool_call: custom_tool_call_input.delta, custom_tool_call_input.done
//   response.output_item.done
//   response.completed (or response.incomplete when max_output_tokens cut the answer)
// Every event's data carries its "type" and a "sequence_number" counting from 0.
#include "server/responses.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "server/answer_blocks.h"

namespace qwen35::server {
namespace {

// A float setting as the decimal it was written as (0.7f, not 0.699999988).
double decimal(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", double(v));
  return std::strtod(b, nullptr);
}

class ResponsesFormatter : public Formatter {
 public:
  ResponsesOptions opt;

  void start(const CompletionRequest& req) {
    blocks_.emplace(req.in_reasoning, opt.parallel_tool_calls ? -1 : 1, req.think_end);
  }

  void open(Job& job, std::string* out) override {
    Json r = response(job, "in_progress");
    event(out, "response.created", {{"response", r}});
    event(out, "response.in_progress", {{"response", std::move(r)}});
  }
  void delta(Job&, const ChoiceRunner&, const Delta& d, std::string* out) override { take(d, out); }
  void close(Job& job, std::string* out) override {
    if (finish_reason_ == "abort") {  // cancelled by a shutdown: no answer to complete
      event(out, "response.failed", {{"response", response(job, "failed")}});
      return;
    }
    const bool cut = finish_reason_ == "length";
    event(out, cut ? "response.incomplete" : "response.completed",
          {{"response", response(job, cut ? "incomplete" : "completed")}});
  }
  void fail(Job&, const ApiError& e, std::string* out) override {
    event(out, "error",
          {{"code", openai_error_type(e.kind)}, {"message", e.message}, {"param", nullptr}});
  }
  void collect(Job&, size_t, const Delta& d) override { take(d, nullptr); }
  Json body(Job& job) override {
    return response(job, finish_reason_ == "length" ? "incomplete" : "completed");
  }

 private:
  // Feeds a delta to the blocks; *out (null when not streaming) gets the events.
  void take(const Delta& d, std::string* out) {
    std::vector<BlockEvent> ev;
    blocks_->push(d, &ev);
    if (!d.finish_reason.empty()) {
      finish_reason_ = d.finish_reason;
      blocks_->finish(&ev);
    }
    for (const auto& e : ev) on_event(e, out);
  }

  void event(std::string* out, const char* type, Json data) {
    if (!out) return;
    Json j = {{"type", type}, {"sequence_number", seq_++}};
    for (auto& [k, v] : data.items()) j[k] = std::move(v);
    append_named_event(out, type, j);
  }

  const AnswerBlock& block(size_t i) const { return blocks_->blocks()[i]; }

  // The output item of block i: "in_progress" while it streams, then its final status.
  Json item(size_t i, bool done) const {
    const AnswerBlock& b = block(i);
    const std::string status = done ? status_[i] : "in_progress";
    if (b.kind == AnswerBlock::kReasoning) {
      Json summary = Json::array();
      if (done) summary.push_back({{"type", "summary_text"}, {"text", b.text}});
      return {{"type", "reasoning"}, {"id", ids_[i]}, {"summary", std::move(summary)}};
    }
    if (b.kind == AnswerBlock::kText) {
      Json content = Json::array();
      if (done) content.push_back(text_part(b.text));
      return {{"type", "message"},
              {"id", ids_[i]},
              {"status", status},
              {"role", "assistant"},
              {"content", std::move(content)}};
    }
    const ToolOrigin* o = opt.agent_tools.origin(b.call.name);
    Json call = {{"type", o && o->custom ? "custom_tool_call" : "function_call"},
                 {"id", ids_[i]},
                 {"call_id", call_ids_[i]},
                 {"name", o ? o->name : b.call.name}};
    if (o && !o->ns.empty()) call["namespace"] = o->ns;
    if (o && o->custom)
      call["input"] = done ? custom_input(b) : "";
    else
      call["arguments"] = done ? arguments(b) : "";
    call["status"] = status;
    return call;
  }
  bool custom(const AnswerBlock& b) const {
    const ToolOrigin* o = opt.agent_tools.origin(b.call.name);
    return o && o->custom;
  }
  // A custom tool's input: the text of its one parameter (agent_tools.h).
  static std::string custom_input(const AnswerBlock& b) {
    const auto& a = b.call.arguments;
    auto it = a.find(kCustomInput);
    if (it == a.end()) return "";
    return it->is_string() ? it->get<std::string>() : dump(*it);
  }
  static Json text_part(const std::string& text) {
    return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}};
  }
  static std::string arguments(const AnswerBlock& b) { return dump(b.call.arguments); }

  void on_event(const BlockEvent& e, std::string* out) {
    const size_t i = e.index;
    const AnswerBlock& b = block(i);
    auto at = [&](Json extra) {
      Json j = {{"item_id", ids_[i]}, {"output_index", i}};
      for (auto& [k, v] : extra.items()) j[k] = std::move(v);
      return j;
    };
    if (e.op == BlockEvent::kOpen) {
      const char* prefix = b.kind == AnswerBlock::kReasoning ? "rs_"
                           : b.kind == AnswerBlock::kText    ? "msg_"
                           : custom(b)                       ? "ctc_"
                                                             : "fc_";
      ids_.push_back(random_id(prefix));
      call_ids_.push_back(b.kind == AnswerBlock::kCall ? random_id("call_") : "");
      status_.push_back("in_progress");
      event(out, "response.output_item.added", {{"output_index", i}, {"item", item(i, false)}});
      if (b.kind == AnswerBlock::kReasoning)
        event(out, "response.reasoning_summary_part.added",
              at({{"summary_index", 0}, {"part", {{"type", "summary_text"}, {"text", ""}}}}));
      else if (b.kind == AnswerBlock::kText)
        event(out, "response.content_part.added",
              at({{"content_index", 0}, {"part", text_part("")}}));
      else if (custom(b))
        event(out, "response.custom_tool_call_input.delta", at({{"delta", custom_input(b)}}));
      else
        event(out, "response.function_call_arguments.delta", at({{"delta", arguments(b)}}));
      return;
    }
    if (e.op == BlockEvent::kAppend) {
      if (b.kind == AnswerBlock::kReasoning)
        event(out, "response.reasoning_summary_text.delta",
              at({{"summary_index", 0}, {"delta", e.text}}));
      else
        event(out, "response.output_text.delta",
              at({{"content_index", 0}, {"delta", e.text}, {"logprobs", Json::array()}}));
      return;
    }
    // kClose: the block is final. The one still open when max_output_tokens cut the answer is
    // incomplete; a tool call is whole when it is closed.
    const bool cut = blocks_->finished() && finish_reason_ == "length" &&
                     b.kind != AnswerBlock::kCall && i + 1 == blocks_->blocks().size();
    status_[i] = cut ? "incomplete" : "completed";
    if (b.kind == AnswerBlock::kReasoning) {
      event(out, "response.reasoning_summary_text.done",
            at({{"summary_index", 0}, {"text", b.text}}));
      event(out, "response.reasoning_summary_part.done",
            at({{"summary_index", 0}, {"part", {{"type", "summary_text"}, {"text", b.text}}}}));
    } else if (b.kind == AnswerBlock::kText) {
      event(out, "response.output_text.done",
            at({{"content_index", 0}, {"text", b.text}, {"logprobs", Json::array()}}));
      event(out, "response.content_part.done",
            at({{"content_index", 0}, {"part", text_part(b.text)}}));
    } else if (custom(b)) {
      event(out, "response.custom_tool_call_input.done", at({{"input", custom_input(b)}}));
    } else {
      event(out, "response.function_call_arguments.done", at({{"arguments", arguments(b)}}));
    }
    event(out, "response.output_item.done", {{"output_index", i}, {"item", item(i, true)}});
  }

  Json response(const Job& job, const std::string& status) const {
    Json r = {{"id", job.id},     {"object", "response"}, {"created_at", job.created},
              {"status", status}, {"background", false},  {"error", nullptr}};
    if (status == "failed")
      r["error"] = {{"code", "server_error"},
                    {"message", "the request was cancelled (the server is shutting down)"}};
    r["incomplete_details"] =
        status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json(nullptr);
    r["instructions"] = opt.instructions;
    r["max_output_tokens"] = opt.max_output_tokens;
    r["model"] = job.req.model;
    Json output = Json::array();
    if (status != "in_progress")
      for (size_t i = 0; i < blocks_->blocks().size(); ++i) output.push_back(item(i, true));
    r["output"] = std::move(output);
    r["parallel_tool_calls"] = opt.parallel_tool_calls;
    r["previous_response_id"] = nullptr;
    r["reasoning"] = {{"effort", opt.reasoning_effort}, {"summary", nullptr}};
    r["store"] = opt.store;
    r["temperature"] = decimal(job.req.sampling.temperature);
    r["text"] = opt.text;
    r["tool_choice"] = opt.tool_choice;
    r["tools"] = opt.tools;
    r["top_p"] = decimal(job.req.sampling.top_p);
    r["truncation"] = "disabled";
    if (status == "in_progress" || status == "failed") {
      r["usage"] = nullptr;
    } else {
      const int64_t in = job.prompt_tokens(), gen = job.completion_tokens();
      r["usage"] = {{"input_tokens", in},
                    {"input_tokens_details", {{"cached_tokens", job.cached_tokens()}}},
                    {"output_tokens", gen},
                    {"output_tokens_details", {{"reasoning_tokens", blocks_->reasoning_tokens()}}},
                    {"total_tokens", in + gen}};
    }
    r["user"] = opt.user;
    r["metadata"] = opt.metadata;
    if (!opt.agent_tools.warnings.empty()) r["warnings"] = opt.agent_tools.warnings;
    return r;
  }

  std::optional<AnswerBlocks> blocks_;
  std::string finish_reason_;
  std::vector<std::string> ids_, call_ids_, status_;  // per block
  int64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Formatter> make_responses_formatter(ResponsesOptions opt,
                                                    const CompletionRequest& req) {
  auto f = std::make_unique<ResponsesFormatter>();
  f->opt = std::move(opt);
  f->start(req);
  return f;
}

void handle_responses(Context& ctx, const Json& body, std::shared_ptr<Responder> r) {
  const char* endpoint = "/v1/responses";
  auto fmt = std::make_unique<ResponsesFormatter>();
  auto fail = [&](const ApiError& e) { fail_request(ctx, endpoint, *fmt, e, *r); };
  auto job = std::make_shared<Job>();
  if (auto e = parse_responses_request(body, ctx.mi, &job->req, &fmt->opt)) return fail(*e);
  fmt->start(job->req);
  job->ctx = &ctx;
  job->fmt = std::move(fmt);
  job->t0 = Clock::now();
  job->endpoint = endpoint;
  job->id = random_id("resp_");
  job->created = int64_t(std::time(nullptr));
  run_job(job, r);
}

}  // namespace qwen35::server
