// POST /v1/chat/completions and /v1/completions: parse, submit one engine request per choice,
// then answer with one JSON body or an SSE stream (`data: {chunk}` ... `data: [DONE]`).
#include <httplib.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <functional>

#include "server/choice.h"
#include "server/peer.h"
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
    return Json{{"prompt_tokens", p}, {"completion_tokens", c}, {"total_tokens", p + c}};
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

bool write_event(httplib::DataSink& sink, const std::string& data) {
  const std::string ev = "data: " + data + "\n\n";
  return sink.write(ev.data(), ev.size());
}

// The SSE loop: runs inside httplib's content provider until every choice is done.
bool stream_job(Job& job, httplib::DataSink& sink) {
  const char* object = job.req.chat ? "chat.completion.chunk" : "text_completion";
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
    if (!write_event(sink, dump(chunk))) return false;
  }
  std::vector<int> call_index(job.choices.size(), 0);
  const auto wait = std::chrono::milliseconds(job.choices.size() == 1 ? 100 : 5);
  for (;;) {
    bool all_done = true;
    for (auto& c : job.choices) {
      if (c->done()) continue;
      all_done = false;
      Delta d;
      if (!c->poll(wait, &d)) continue;
      if (!c->error().empty()) {
        ApiError e;
        e.status = 500;
        e.type = "server_error";
        e.message = c->error();
        write_event(sink, dump(error_body(e)));
        return false;
      }
      const bool show =
          !d.text.empty() || !d.reasoning.empty() || !d.calls.empty() || !d.finish_reason.empty() ||
          (!d.samples.empty() && (job.req.sampling.logprobs >= 0 || job.req.return_token_ids));
      if (!show) continue;
      Json chunk = job.base(object);
      chunk["choices"] = Json::array({chunk_choice(job, *c, d, &call_index[size_t(c->index())])});
      if (!write_event(sink, dump(chunk))) return false;
    }
    if (all_done) break;
  }
  if (job.req.include_usage) {
    Json chunk = job.base(object);
    chunk["choices"] = Json::array();
    chunk["usage"] = job.usage();
    if (!write_event(sink, dump(chunk))) return false;
  }
  const std::string done = "data: [DONE]\n\n";
  if (!sink.write(done.data(), done.size())) return false;
  sink.done();
  return true;
}

// Waits for every choice and builds the single JSON response. `client_gone` is checked while
// waiting: a client that hung up has its choices cancelled (slots freed at the next step).
std::optional<ApiError> collect_job(Job& job, const std::function<bool()>& client_gone, Json* out) {
  const auto& tok = *job.ctx->mi.tok;
  Json choices = Json::array();
  for (auto& c : job.choices) {
    Delta acc;
    std::vector<ToolCall> calls;
    auto next_check = std::chrono::steady_clock::now();
    while (!c->done()) {
      if (std::chrono::steady_clock::now() >= next_check) {  // every 50 ms, busy or not
        next_check += std::chrono::milliseconds(50);
        if (client_gone()) {
          for (auto& other : job.choices) other->cancel();
          ApiError e;
          e.status = 499;
          e.type = "client_closed_request";
          e.message = "the client closed the connection";
          return e;
        }
      }
      Delta d;
      if (!c->poll(std::chrono::milliseconds(50), &d)) continue;
      acc.text += d.text;
      acc.reasoning += d.reasoning;
      for (auto& x : d.calls) calls.push_back(std::move(x));
      for (auto& s : d.samples) acc.samples.push_back(std::move(s));
      if (!d.finish_reason.empty()) acc.finish_reason = d.finish_reason;
    }
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

}  // namespace

std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(dump(error_body(e)), "application/json");
}

void handle_generate(Context& ctx, bool chat, const httplib::Request& req, httplib::Response& res) {
  auto job = std::make_shared<Job>();
  job->ctx = &ctx;
  job->t0 = Clock::now();
  job->endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
  auto fail = [&](const ApiError& e) {
    ctx.metrics.count_request(job->endpoint, e.status);
    send_error(res, e);
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
    Json out;
    const int fd = find_connection(req.remote_addr, req.remote_port, req.local_port);
    if (auto e = collect_job(*job, [fd] { return peer_closed(fd); }, &out)) return fail(*e);
    job->observe();
    ctx.metrics.count_request(job->endpoint, 200);
    res.set_content(dump(out), "application/json");
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job](size_t, httplib::DataSink& sink) {
        const bool ok = stream_job(*job, sink);
        if (!ok)
          for (auto& c : job->choices) c->cancel();  // the client left: free the slots
        return ok;
      },
      [job](bool success) {
        for (auto& c : job->choices) c->cancel();
        job->observe();
        job->ctx->metrics.count_request(job->endpoint, success ? 200 : 499);
      });
}

}  // namespace qwen35::server
