// POST /v1/chat/completions and /v1/completions: parse, then answer through the shared driver
// (generation.h) with one JSON body or an SSE stream (`data: {chunk}` ... `data: [DONE]`). This
// file is the OpenAI chat/completions formatter: the chunks, the final body and the usage.
#include <chrono>
#include <cmath>
#include <ctime>

#include "server/generation.h"

namespace qwen35::server {
namespace {

Json usage_of(const Job& job) {
  const int64_t p = job.prompt_tokens(), c = job.completion_tokens();
  Json details = {{"cached_tokens", job.cached_tokens()}};
  if (job.req.image_tokens > 0) details["image_tokens"] = job.req.image_tokens;  // in prompt_tokens
  return Json{{"prompt_tokens", p},
              {"completion_tokens", c},
              {"total_tokens", p + c},
              {"prompt_tokens_details", details}};
}

// The first choice's speeds, named as llama-server names them. prompt: the tokens computed
// (not resumed from the prefix cache), from admission to the return of the forward call that
// read the last of them. predicted: the tokens after the first (which that call's logits gave)
// over the time from that return to the last token's arrival here (a few ms late at most, so
// a short answer's speed is slightly low, never high). A browser cannot time this itself:
// chunks that arrive while its page is busy come out of one read.
Json timings_of(const Job& job) {
  const ChoiceRunner* c = nullptr;
  for (const auto& ch : job.choices)
    if (ch->index() == 0) c = ch.get();
  if (!c) return nullptr;
  const runtime::RequestTiming t = c->timing();
  const auto ms = [](Clock::duration d) {
    return std::chrono::duration<double, std::milli>(d).count();
  };
  const auto& tokens = c->token_times;
  Json out = Json::object();
  out["predicted_n"] = int64_t(tokens.size());
  if (!t.prompt_done) return out;  // cancelled during the prompt
  const double prompt_ms = ms(t.prompt_read - t.admitted);
  const int64_t computed = int64_t(job.ids_of(*c).size()) - t.prompt_reused;
  out["prompt_n"] = computed;
  out["prompt_ms"] = prompt_ms;
  if (prompt_ms > 0) out["prompt_per_second"] = double(computed) * 1000 / prompt_ms;
  if (tokens.size() > 1) {
    const double predicted_ms = ms(tokens.back() - t.prompt_read);
    out["predicted_ms"] = predicted_ms;
    if (predicted_ms > 0)
      out["predicted_per_second"] = double(tokens.size() - 1) * 1000 / predicted_ms;
  }
  return out;
}

Json base(const Job& job, const char* object) {
  return Json{
      {"id", job.id}, {"object", object}, {"created", job.created}, {"model", job.req.model}};
}

// A streamed chunk's choice for one delta.
Json chunk_choice(const Job& job, const ChoiceRunner& c, const Delta& d, int* call_index) {
  const auto& tok = *job.ctx->mi.tok;
  Json ch = {{"index", c.index()}};
  const bool want_lp = job.req.sampling.logprobs >= 0 && !d.samples.empty();
  if (job.req.chat) {
    Json delta = Json::object();
    if (!d.text.empty() || (d.reasoning.empty() && d.calls.empty() && d.finish_reason.empty()))
      delta["content"] = d.text;
    if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
    if (!d.calls.empty()) {
      Json calls = Json::array();
      for (const auto& call : d.calls) calls.push_back(tool_call_json(call, (*call_index)++, true));
      delta["tool_calls"] = std::move(calls);
    }
    ch["delta"] = std::move(delta);
    if (want_lp) {
      Json content = Json::array();
      for (const auto& s : d.samples) content.push_back(chat_logprob_entry(tok, s));
      ch["logprobs"] = {{"content", content}};
    } else {
      ch["logprobs"] = nullptr;
    }
  } else {
    ch["text"] = d.text;
    ch["logprobs"] = want_lp ? completion_logprobs(tok, d.samples, 0) : Json(nullptr);
  }
  if (job.req.return_token_ids) {
    Json ids = Json::array();
    for (const auto& s : d.samples) ids.push_back(s.token);
    ch["token_ids"] = std::move(ids);
  }
  ch["finish_reason"] = d.finish_reason.empty() ? Json(nullptr) : Json(d.finish_reason);
  return ch;
}

void append_event(std::string* out, const std::string& data) {
  *out += "data: ";
  *out += data;
  *out += "\n\n";
}

// The single JSON response, once every choice is done (none failed: the driver checked).
Json collect_body(Job& job) {
  Json out;
  const auto& tok = *job.ctx->mi.tok;
  Json choices = Json::array();
  for (size_t ci = 0; ci < job.choices.size(); ++ci) {
    auto& c = job.choices[ci];
    const Delta& acc = job.acc[ci];
    const std::vector<ToolCall>& calls = job.calls[ci];
    Json ch = {{"index", c->index()}};
    const bool want_lp = job.req.sampling.logprobs >= 0;
    if (job.req.chat) {
      Json msg = {{"role", "assistant"}};
      msg["content"] = acc.text.empty() && !calls.empty() ? Json(nullptr) : Json(acc.text);
      msg["reasoning_content"] = acc.reasoning.empty() ? Json(nullptr) : Json(acc.reasoning);
      if (!calls.empty()) {
        Json tc = Json::array();
        for (size_t i = 0; i < calls.size(); ++i)
          tc.push_back(tool_call_json(calls[i], int(i), false));
        msg["tool_calls"] = std::move(tc);
      }
      ch["message"] = std::move(msg);
      if (want_lp) {
        Json content = Json::array();
        for (const auto& s : acc.samples) content.push_back(chat_logprob_entry(tok, s));
        ch["logprobs"] = {{"content", content}};
      } else {
        ch["logprobs"] = nullptr;
      }
    } else {
      const std::string prefix = job.req.echo ? job.text_of(*c) : "";
      ch["text"] = prefix + acc.text;
      if (want_lp && job.req.prompt_logprobs >= 0) {
        // Echo: the prompt tokens first (the first has no logprob), then the completion.
        std::vector<runtime::SampleResult> all(1);
        all[0].token = job.ids_of(*c)[0];
        all[0].logprob = std::nanf("");
        for (const auto& x : c->prompt_samples) all.push_back(x);
        for (const auto& x : acc.samples) all.push_back(x);
        ch["logprobs"] = completion_logprobs(tok, all, 0);
      } else {
        ch["logprobs"] =
            want_lp ? completion_logprobs(tok, acc.samples, prefix.size()) : Json(nullptr);
      }
    }
    ch["finish_reason"] = acc.finish_reason;
    if (job.req.return_token_ids) {
      Json ids = Json::array();
      for (const auto& s : acc.samples) ids.push_back(s.token);
      ch["token_ids"] = std::move(ids);
    }
    choices.push_back(std::move(ch));
  }
  out = base(job, job.req.chat ? "chat.completion" : "text_completion");
  out["choices"] = std::move(choices);
  out["usage"] = usage_of(job);
  if (job.req.return_token_ids) {
    if (job.req.batch.size() > 1) {
      Json all = Json::array();
      for (const auto& b : job.req.batch) all.push_back(b.ids);
      out["prompt_token_ids"] = std::move(all);
    } else {
      out["prompt_token_ids"] = job.req.batch[0].ids;
    }
  }
  return out;
}


// The OpenAI chat/completions answer. Streaming: an opening chunk per choice, a chunk for each
// delta with something to show, the usage chunk when asked, then [DONE].
class ChatFormatter : public Formatter {
 public:
  void open(Job& job, std::string* out) override {
    const char* object = job.req.chat ? "chat.completion.chunk" : "text_completion";
    call_index_.assign(job.choices.size(), 0);
    // Opening chunks: the role (chat), the echoed prompt (completions), prompt ids when asked.
    for (const auto& c : job.choices) {
      Json chunk = base(job, object);
      Json ch = {{"index", c->index()}};
      if (job.req.chat) {
        ch["delta"] = {{"role", "assistant"}, {"content", ""}};
        ch["logprobs"] = nullptr;
      } else {
        ch["text"] = job.req.echo ? job.text_of(*c) : "";
        ch["logprobs"] = nullptr;
      }
      ch["finish_reason"] = nullptr;
      chunk["choices"] = Json::array({ch});
      if (job.req.return_token_ids) chunk["prompt_token_ids"] = job.ids_of(*c);
      append_event(out, dump(chunk));
    }
  }
  void delta(Job& job, const ChoiceRunner& c, const Delta& d, std::string* out) override {
    const bool show =
        !d.text.empty() || !d.reasoning.empty() || !d.calls.empty() || !d.finish_reason.empty() ||
        (!d.samples.empty() && (job.req.sampling.logprobs >= 0 || job.req.return_token_ids));
    if (!show) return;
    Json chunk = base(job, job.req.chat ? "chat.completion.chunk" : "text_completion");
    chunk["choices"] = Json::array({chunk_choice(job, c, d, &call_index_[size_t(c.index())])});
    append_event(out, dump(chunk));
  }
  void close(Job& job, std::string* out) override {
    if (job.req.include_usage) {
      Json chunk = base(job, job.req.chat ? "chat.completion.chunk" : "text_completion");
      chunk["choices"] = Json::array();
      chunk["usage"] = usage_of(job);
      chunk["timings"] = timings_of(job);
      append_event(out, dump(chunk));
    }
    *out += "data: [DONE]\n\n";
  }
  void fail(Job&, const ApiError& e, std::string* out) override {
    append_event(out, dump(error_body(e)));
  }
  Json body(Job& job) override { return collect_body(job); }

 private:
  std::vector<int> call_index_;  // each choice's tool-call counter
};

}  // namespace

void handle_generate(Context& ctx, bool chat, const Json& body, std::shared_ptr<Responder> r) {
  auto job = std::make_shared<Job>();
  job->ctx = &ctx;
  job->fmt = std::make_unique<ChatFormatter>();
  job->t0 = Clock::now();
  job->endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto fail = [&](const ApiError& e) { fail_request(ctx, job->endpoint, *job->fmt, e, *r); };
  auto err = chat ? parse_chat_request(body, ctx.mi, &job->req)
                  : parse_completion_request(body, ctx.mi, &job->req);
  if (err) return fail(*err);
  job->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  job->created = int64_t(std::time(nullptr));
  run_job(job, r);
}

}  // namespace qwen35::server
