// POST /v1/messages and /v1/messages/count_tokens (messages.h). The event shapes follow the
// @anthropic-ai/sdk npm package's types (resources/messages/messages.d.ts):
//   message_start {message: {..., content: [], usage}}
//   per content block: content_block_start {index, content_block}, content_block_delta
//     {index, delta: text_delta | thinking_delta | input_json_delta}..., content_block_stop
//   message_delta {delta: {stop_reason, stop_sequence}, usage}
//   message_stop
// Usage as Anthropic counts it: input_tokens are the prompt tokens computed for this request,
// cache_read_input_tokens those resumed from the prefix cache (their sum is the prompt), so
// message_start waits for the first token, when the prefix cache has answered.
#include "server/messages.h"

#include <ctime>

#include "server/agent_tools.h"
#include "server/answer_blocks.h"

namespace qwen35::server {
namespace {

class MessagesFormatter : public Formatter {
 public:
  MessagesOptions opt;

  void start(const CompletionRequest& req) {
    blocks_.emplace(req.in_reasoning, opt.parallel_tool_calls ? -1 : 1, req.think_end);
  }

  void open(Job&, std::string*) override {}  // message_start waits for the first delta
  void delta(Job& job, const ChoiceRunner& c, const Delta& d, std::string* out) override {
    if (!started_ && (d.samples.empty() && d.finish_reason.empty())) return;
    if (!started_) {
      started_ = true;
      Json msg = message(job, /*done=*/false);
      event(out, "message_start", {{"message", std::move(msg)}});
    }
    take(c, d, out);
  }
  void close(Job& job, std::string* out) override {
    if (!started_) {  // nothing came (cannot happen: the last delta has a finish reason)
      started_ = true;
      event(out, "message_start", {{"message", message(job, false)}});
    }
    if (finish_reason_ == "abort") {  // cancelled by a shutdown: an error, not a stop reason
      append_named_event(out, "error",
                         anthropic_error_body(api_error(
                             ErrorKind::kUnavailable,
                             "the request was cancelled (the server is shutting down)")));
      return;
    }
    Json usage = this->usage(job);
    event(out, "message_delta",
          {{"delta", {{"stop_reason", stop_reason()}, {"stop_sequence", stop_sequence()}}},
           {"usage", std::move(usage)}});
    event(out, "message_stop", Json::object());
  }
  void fail(Job&, const ApiError& e, std::string* out) override {
    append_named_event(out, "error", anthropic_error_body(e));
  }
  void collect(Job& job, size_t i, const Delta& d) override { take(*job.choices[i], d, nullptr); }
  Json body(Job& job) override { return message(job, true); }
  HttpResponse error(const ApiError& e) const override { return anthropic_error_response(e); }

 private:
  void take(const ChoiceRunner& c, const Delta& d, std::string* out) {
    std::vector<BlockEvent> ev;
    blocks_->push(d, &ev);
    if (!d.finish_reason.empty()) {
      finish_reason_ = d.finish_reason;
      stop_string_ = c.stop_sequence();
      blocks_->finish(&ev);
    }
    if (!out) return;
    for (const auto& e : ev) on_event(e, out);
  }

  void event(std::string* out, const char* type, Json data) {
    Json j = {{"type", type}};
    for (auto& [k, v] : data.items()) j[k] = std::move(v);
    append_named_event(out, type, j);
  }

  Json block_json(const AnswerBlock& b, bool done) const {
    if (b.kind == AnswerBlock::kReasoning)
      return {{"type", "thinking"}, {"thinking", done ? b.text : ""}, {"signature", ""}};
    if (b.kind == AnswerBlock::kText) return {{"type", "text"}, {"text", done ? b.text : ""}};
    return {{"type", "tool_use"},
            {"id", tool_id(b)},
            {"name", b.call.name},
            {"input", done ? b.call.arguments : Json::object()}};
  }
  // Tool-use ids, one per call block, made when the block opens (or the body is built).
  const std::string& tool_id(const AnswerBlock& b) const {
    const size_t i = size_t(&b - blocks_->blocks().data());
    if (tool_ids_.size() <= i) tool_ids_.resize(i + 1);
    if (tool_ids_[i].empty()) tool_ids_[i] = random_id("toolu_");
    return tool_ids_[i];
  }

  void on_event(const BlockEvent& e, std::string* out) {
    const AnswerBlock& b = blocks_->blocks()[e.index];
    const int64_t index = int64_t(e.index);
    if (e.op == BlockEvent::kOpen) {
      event(out, "content_block_start",
            {{"index", index}, {"content_block", block_json(b, false)}});
      if (b.kind == AnswerBlock::kCall)
        event(
            out, "content_block_delta",
            {{"index", index},
             {"delta", {{"type", "input_json_delta"}, {"partial_json", dump(b.call.arguments)}}}});
    } else if (e.op == BlockEvent::kAppend) {
      Json delta = b.kind == AnswerBlock::kReasoning
                       ? Json{{"type", "thinking_delta"}, {"thinking", e.text}}
                       : Json{{"type", "text_delta"}, {"text", e.text}};
      event(out, "content_block_delta", {{"index", index}, {"delta", std::move(delta)}});
    } else {
      if (b.kind == AnswerBlock::kReasoning)  // the SDK's accumulator expects one
        event(out, "content_block_delta",
              {{"index", index}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
      event(out, "content_block_stop", {{"index", index}});
    }
  }

  bool has_calls() const {
    for (const auto& b : blocks_->blocks())
      if (b.kind == AnswerBlock::kCall) return true;
    return false;
  }
  Json stop_reason() const {
    if (finish_reason_ == "length") return "max_tokens";
    if (has_calls()) return "tool_use";
    if (!stop_string_.empty()) return "stop_sequence";
    return "end_turn";
  }
  Json stop_sequence() const {
    return stop_reason() == "stop_sequence" ? Json(stop_string_) : Json(nullptr);
  }
  Json usage(const Job& job) const {
    const int64_t cached = job.cached_tokens();
    return {{"input_tokens", job.prompt_tokens() - cached},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", cached},
            {"output_tokens", job.completion_tokens()}};
  }

  Json message(const Job& job, bool done) const {
    Json content = Json::array();
    if (done)
      for (const auto& b : blocks_->blocks()) content.push_back(block_json(b, true));
    Json usage = this->usage(job);
    if (!done) usage["output_tokens"] = 0;
    Json m = {{"id", job.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", job.req.model},
              {"content", std::move(content)},
              {"stop_reason", done ? stop_reason() : Json(nullptr)},
              {"stop_sequence", done ? stop_sequence() : Json(nullptr)},
              {"usage", std::move(usage)}};
    if (!job.req.warnings.empty()) m["warnings"] = job.req.warnings;  // agent_tools.h
    return m;
  }

  std::optional<AnswerBlocks> blocks_;
  std::string finish_reason_, stop_string_;
  mutable std::vector<std::string> tool_ids_;
  bool started_ = false;
};

}  // namespace

std::unique_ptr<Formatter> make_messages_formatter(MessagesOptions opt,
                                                   const CompletionRequest& req) {
  auto f = std::make_unique<MessagesFormatter>();
  f->opt = std::move(opt);
  f->start(req);
  return f;
}

void handle_messages(Context& ctx, bool count_tokens, const Json& body,
                     std::shared_ptr<Responder> r) {
  const char* endpoint = count_tokens ? "/v1/messages/count_tokens" : "/v1/messages";
  auto fmt = std::make_unique<MessagesFormatter>();
  auto fail = [&](const ApiError& e) { fail_request(ctx, endpoint, *fmt, e, *r); };
  auto job = std::make_shared<Job>();
  if (auto e = parse_messages_request(body, count_tokens, ctx.mi, &job->req, &fmt->opt))
    return fail(*e);
  if (count_tokens) {
    // The rendered prompt's length, as the generation would see it; nothing is generated.
    ctx.metrics.count_request(endpoint, 200);
    HttpResponse res;
    if (!job->req.warnings.empty())
      res.headers.emplace_back(kWarningsHeader, warnings_header(job->req.warnings));
    res.set_content(dump(Json{{"input_tokens", int64_t(job->req.batch[0].ids.size())}}),
                    "application/json");
    return r->send(std::move(res));
  }
  fmt->start(job->req);
  job->ctx = &ctx;
  job->fmt = std::move(fmt);
  job->t0 = Clock::now();
  job->endpoint = endpoint;
  job->id = random_id("msg_");
  job->created = int64_t(std::time(nullptr));
  run_job(job, r);
}

}  // namespace qwen35::server
