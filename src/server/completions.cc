// POST /v1/chat/completions and /v1/completions: parse, submit one engine request per choice,
// then answer with one JSON body or an SSE stream (`data: {chunk}` ... `data: [DONE]`).
//
// The answer is produced without a thread per request: a driver on the connection's strand
// drains whatever the engine has produced (non-blocking polls of the RequestStreams), writes it,
// and waits on a short timer when there is nothing new. A client that hangs up (the Responder's
// posted read or a write fails) has its choices cancelled at the next tick.
#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>

#include "server/choice.h"
#include "server/server.h"
#include "tokenizer/utf8.h"

namespace qwen35::server {
namespace {

using Clock = std::chrono::steady_clock;

// Everything one generation request needs; shared with the SSE content provider, which runs
// after the handler returns.
struct Job {
  Context* ctx = nullptr;
  CompletionRequest req;
  std::vector<std::unique_ptr<ChoiceRunner>> choices;
  std::string id;
  int64_t created = 0;
  Clock::time_point t0;
  const char* endpoint = "";
  bool observed = false;
  // Streaming: the opening chunks are out; the tool-call counter of each choice.
  bool opened = false;
  std::vector<int> call_index;
  // Non-streaming: what each choice has produced so far.
  std::vector<Delta> acc;
  std::vector<std::vector<ToolCall>> calls;
  int idle_ticks = 0;

  // The driver's next wait: short after progress, a few ms when the engine is busy elsewhere.
  std::chrono::milliseconds next_delay(bool progress) {
    idle_ticks = progress ? 0 : std::min(idle_ticks + 1, 2);
    return std::chrono::milliseconds(1 << idle_ticks);
  }

  int64_t completion_tokens() const {
    int64_t n = 0;
    for (const auto& c : choices) n += c->generated();
    return n;
  }
  // Prompt tokens, each prompt of a batch counted once.
  int64_t prompt_tokens() const {
    int64_t n = 0;
    for (const auto& b : req.batch) n += int64_t(b.ids.size());
    return n;
  }
  const std::vector<int32_t>& ids_of(const ChoiceRunner& c) const {
    return req.batch[size_t(c.prompt)].ids;
  }
  const std::string& text_of(const ChoiceRunner& c) const {
    return req.batch[size_t(c.prompt)].text;
  }
  Json usage() const {
    const int64_t p = prompt_tokens(), c = completion_tokens();
    // Prompt tokens counted once per prompt (as prompt_tokens): its first choice's.
    int64_t cached = 0;
    for (const auto& ch : choices)
      if (ch->index() % req.n == 0) cached += ch->cached_tokens();
    return Json{{"prompt_tokens", p},
                {"completion_tokens", c},
                {"total_tokens", p + c},
                {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }
  // The first choice's speeds, named as llama-server names them. prompt: the tokens computed
  // (not resumed from the prefix cache), from admission to the return of the forward call that
  // read the last of them. predicted: the tokens after the first (which that call's logits gave)
  // over the time from that return to the last token's arrival here (a few ms late at most, so
  // a short answer's speed is slightly low, never high). A browser cannot time this itself:
  // chunks that arrive while its page is busy come out of one read.
  Json timings() const {
    const ChoiceRunner* c = nullptr;
    for (const auto& ch : choices)
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
    const int64_t computed = int64_t(ids_of(*c).size()) - t.prompt_reused;
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
  // Latency histograms and token counters, once per request.
  void observe() {
    if (observed) return;
    observed = true;
    auto& m = ctx->metrics;
    m.add_tokens(prompt_tokens(), completion_tokens());
    for (const auto& c : choices) {
      const auto& t = c->token_times;
      if (t.empty()) continue;
      if (c->index() == 0) m.ttft.observe(std::chrono::duration<double>(t[0] - t0).count());
      for (size_t i = 1; i < t.size(); ++i)
        m.itl.observe(std::chrono::duration<double>(t[i] - t[i - 1]).count());
    }
    m.e2e.observe(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  Json base(const char* object) const {
    return Json{{"id", id}, {"object", object}, {"created", created}, {"model", req.model}};
  }
};

// Queues every choice at once (Engine::submit_group: all or nothing). A request that can never
// be served (more choices than the engine holds, a prompt over the context) is a 400 that says
// why; only a queue that is full now is a retryable 429 (with Retry-After).
std::optional<ApiError> submit_all(Job& job) {
  auto& engine = *job.ctx->engine;
  const int n_prompts = int(job.req.batch.size());
  std::vector<runtime::GenerationRequest> group;
  for (int k = 0; k < n_prompts * job.req.n; ++k) {
    const int pi = k / job.req.n, i = k % job.req.n;  // prompt, choice of that prompt
    runtime::GenerationRequest g;
    g.prompt = job.req.batch[size_t(pi)].ids;
    g.sampling = job.req.sampling;
    if (g.sampling.seed && i > 0) *g.sampling.seed += uint64_t(i);
    g.max_tokens = job.req.max_tokens;
    g.eos_ids = job.req.eos_ids;
    g.prompt_logprobs = job.req.stream ? -1 : job.req.prompt_logprobs;
    g.snapshot_hints = job.req.snapshot_hints;
    // A prediction asks for prompt lookup unless the request or the server chose a method.
    g.prediction = job.req.prediction;
    const bool lookup_for_prediction = !g.prediction.empty() && !job.req.spec_method &&
                                       engine.options().spec.method == runtime::SpecMethod::kOff;
    if (job.req.spec_method || job.req.spec_draft_tokens || lookup_for_prediction) {
      g.spec = engine.options().spec;
      if (lookup_for_prediction) g.spec->method = runtime::SpecMethod::kLookup;
      if (job.req.spec_method) g.spec->method = *job.req.spec_method;
      if (job.req.spec_draft_tokens) g.spec->draft_tokens = *job.req.spec_draft_tokens;
    }
    group.push_back(std::move(g));
  }
  const int64_t wanted = int64_t(group.size());
  runtime::SubmitError err;
  std::string msg;
  auto streams = engine.submit_group(std::move(group), &err, &msg);
  if (streams.empty()) {
    ApiError e;
    e.message = msg;
    if (err == runtime::SubmitError::kQueueFull) {
      e.status = 429;
      e.type = "rate_limit_error";
      e.retry_after_s = 1;  // a slot frees within a few decode steps of the running requests
    } else if (err == runtime::SubmitError::kShuttingDown) {
      e.status = 503;
      e.type = "service_unavailable";
    } else if (wanted > engine.capacity()) {
      e.param = "n";
      e.message += n_prompts > 1 ? "; lower 'n' or send fewer prompts" : "; lower 'n'";
    } else {
      e.param = job.req.chat ? "messages" : "prompt";
    }
    return e;
  }
  for (int k = 0; k < int(streams.size()); ++k) {
    job.choices.push_back(
        std::make_unique<ChoiceRunner>(k, job.req, *job.ctx->mi.tok, streams[size_t(k)]));
    job.choices.back()->prompt = k / job.req.n;
  }
  return std::nullopt;
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

enum class Pump { kMore, kDone, kFailed };

// One step of the SSE answer: appends to *out the events of everything the engine has produced
// so far (the opening chunks first), without waiting. kDone once the usage chunk and [DONE] are
// in *out; kFailed after an error event.
Pump stream_pump(Job& job, std::string* out) {
  const char* object = job.req.chat ? "chat.completion.chunk" : "text_completion";
  if (!job.opened) {
    job.opened = true;
    job.call_index.assign(job.choices.size(), 0);
    // Opening chunks: the role (chat), the echoed prompt (completions), prompt ids when asked.
    for (const auto& c : job.choices) {
      Json chunk = job.base(object);
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
  bool all_done = true;
  for (auto& c : job.choices) {
    for (int k = 0; k < 256 && !c->done(); ++k) {  // bounded: other choices get their turn
      Delta d;
      if (!c->poll(std::chrono::milliseconds(0), &d)) break;
      if (!c->error().empty()) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = c->error();
        append_event(out, dump(error_body(e)));
        return Pump::kFailed;
      }
      const bool show =
          !d.text.empty() || !d.reasoning.empty() || !d.calls.empty() || !d.finish_reason.empty() ||
          (!d.samples.empty() && (job.req.sampling.logprobs >= 0 || job.req.return_token_ids));
      if (!show) continue;
      Json chunk = job.base(object);
      chunk["choices"] =
          Json::array({chunk_choice(job, *c, d, &job.call_index[size_t(c->index())])});
      append_event(out, dump(chunk));
    }
    if (!c->done()) all_done = false;
  }
  if (!all_done) return Pump::kMore;
  if (job.req.include_usage) {
    Json chunk = job.base(object);
    chunk["choices"] = Json::array();
    chunk["usage"] = job.usage();
    chunk["timings"] = job.timings();
    append_event(out, dump(chunk));
  }
  *out += "data: [DONE]\n\n";
  return Pump::kDone;
}

// One step of a non-streaming answer: accumulates what the engine has produced, without waiting.
// True once every choice is done. Sets *progress when anything came.
bool collect_pump(Job& job, bool* progress) {
  if (job.acc.size() != job.choices.size()) {
    job.acc.assign(job.choices.size(), Delta{});
    job.calls.assign(job.choices.size(), {});
  }
  bool all_done = true;
  for (size_t i = 0; i < job.choices.size(); ++i) {
    auto& c = job.choices[i];
    Delta& acc = job.acc[i];
    for (int k = 0; k < 256 && !c->done(); ++k) {
      Delta d;
      if (!c->poll(std::chrono::milliseconds(0), &d)) break;
      *progress = true;
      acc.text += d.text;
      acc.reasoning += d.reasoning;
      for (auto& x : d.calls) job.calls[i].push_back(std::move(x));
      for (auto& s : d.samples) acc.samples.push_back(std::move(s));
      if (!d.finish_reason.empty()) acc.finish_reason = d.finish_reason;
    }
    if (!c->done()) all_done = false;
  }
  return all_done;
}

// Builds the single JSON response once collect_pump() says every choice is done.
std::optional<ApiError> collect_finish(Job& job, Json* out) {
  const auto& tok = *job.ctx->mi.tok;
  Json choices = Json::array();
  for (size_t ci = 0; ci < job.choices.size(); ++ci) {
    auto& c = job.choices[ci];
    const Delta& acc = job.acc[ci];
    const std::vector<ToolCall>& calls = job.calls[ci];
    if (!c->error().empty()) {
      ApiError e;
      e.status = 500;
      e.type = "server_error";
      e.message = c->error();
      return e;
    }
    if (acc.finish_reason == "abort") {
      ApiError e;
      e.status = 503;
      e.type = "service_unavailable";
      e.message = "the request was cancelled (the server is shutting down)";
      return e;
    }
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
  *out = job.base(job.req.chat ? "chat.completion" : "text_completion");
  (*out)["choices"] = std::move(choices);
  (*out)["usage"] = job.usage();
  if (job.req.return_token_ids) {
    if (job.req.batch.size() > 1) {
      Json all = Json::array();
      for (const auto& b : job.req.batch) all.push_back(b.ids);
      (*out)["prompt_token_ids"] = std::move(all);
    } else {
      (*out)["prompt_token_ids"] = job.req.batch[0].ids;
    }
  }
  return std::nullopt;
}

void finish_job(Job& job, int status) {
  for (auto& c : job.choices) c->cancel();  // frees the slots of a client that left
  job.observe();
  job.ctx->metrics.count_request(job.endpoint, status);
}

// The SSE driver, on the connection's strand: write what there is, then come back.
void drive_stream(std::shared_ptr<Job> job, std::shared_ptr<Responder> r) {
  if (r->closed()) return finish_job(*job, 499);
  std::string out;
  const Pump st = stream_pump(*job, &out);
  if (out.empty()) {  // nothing new (kDone always leaves [DONE] in out)
    r->after(job->next_delay(false), [job, r] { drive_stream(job, r); });
    return;
  }
  job->next_delay(true);
  r->write(std::move(out), [job, r, st](bool ok) {
    if (!ok) return finish_job(*job, 499);
    if (st == Pump::kMore) return drive_stream(job, r);
    r->end_stream();
    finish_job(*job, st == Pump::kDone ? 200 : 500);
  });
}

// The non-streaming driver, on the connection's strand.
void drive_collect(std::shared_ptr<Job> job, std::shared_ptr<Responder> r) {
  if (r->closed()) return finish_job(*job, 499);  // the client hung up: cancelled
  bool progress = false;
  if (!collect_pump(*job, &progress)) {
    r->after(job->next_delay(progress), [job, r] { drive_collect(job, r); });
    return;
  }
  Json out;
  if (auto e = collect_finish(*job, &out)) {
    job->ctx->metrics.count_request(job->endpoint, e->status);
    return r->send(error_response(*e));
  }
  job->observe();
  job->ctx->metrics.count_request(job->endpoint, 200);
  HttpResponse res;
  res.set_content(dump(out), "application/json");
  r->send(std::move(res));
}

}  // namespace

void handle_generate(Context& ctx, bool chat, const HttpRequest& req,
                     std::shared_ptr<Responder> r) {
  auto job = std::make_shared<Job>();
  job->ctx = &ctx;
  job->t0 = Clock::now();
  job->endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto fail = [&](const ApiError& e) {
    ctx.metrics.count_request(job->endpoint, e.status);
    r->send(error_response(e));
  };
  if (ctx.shutting_down.load()) {
    ApiError e;
    e.status = 503;
    e.type = "service_unavailable";
    e.message = "the server is shutting down";
    return fail(e);
  }
  Json body;
  if (auto e = parse_request_body(req.body, ctx.mi, &body)) return fail(*e);
  auto err = chat ? parse_chat_request(body, ctx.mi, &job->req)
                  : parse_completion_request(body, ctx.mi, &job->req);
  if (err) return fail(*err);
  job->id = random_id(chat ? "chatcmpl-" : "cmpl-");
  job->created = int64_t(std::time(nullptr));
  if (auto e = submit_all(*job)) return fail(*e);

  if (!job->req.stream) {
    r->after(std::chrono::milliseconds(0), [job, r] { drive_collect(job, r); });
    return;
  }
  HttpResponse head;
  head.content_type = "text/event-stream";
  head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
  r->start_stream(std::move(head));
  r->after(std::chrono::milliseconds(0), [job, r] { drive_stream(job, r); });
}

}  // namespace qwen35::server
