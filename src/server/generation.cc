// The shared driver of generation requests (generation.h). Moved here from completions.cc so
// that the Responses and Messages APIs run the same submission and draining code; the bytes the
// chat and completions endpoints write are those they wrote before (their formatter is in
// completions.cc).
//
// The answer is produced without a thread per request: a driver on the connection's strand
// drains whatever the engine has produced (non-blocking polls of the RequestStreams), writes it,
// and parks when there is nothing new, until the engine's next push or the client's hang-up
// wakes it (Wake, generation.h). A client that hangs up (the Responder's posted read or a write
// fails) has its choices cancelled by the pass that wakes.
#include "server/generation.h"

#include "server/agent_tools.h"

#include "server/affinity.h"

namespace qwen35::server {

void Wake::notify() {
  dirty_.store(true);
  if (parked_.exchange(false)) resume_();
}

void Wake::park() {
  parked_.store(true);
  // A notify since this pass began found the driver running: take the wake-up back and run.
  if (dirty_.load() && parked_.exchange(false)) resume_();
}

int64_t Job::completion_tokens() const {
  int64_t n = 0;
  for (const auto& c : choices) n += c->generated();
  return n;
}

int64_t Job::prompt_tokens() const {
  int64_t n = 0;
  for (const auto& b : req.batch) n += int64_t(b.ids.size());
  return n;
}

int64_t Job::cached_tokens() const {
  int64_t cached = 0;
  for (const auto& ch : choices)
    if (ch->index() % req.n == 0) cached += ch->cached_tokens();
  return cached;
}

void Job::observe() {
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

namespace {

// Queues every choice at once (Engine::submit_group: all or nothing). A request that can never
// be served (more choices than the engine holds, a prompt over the context) is a 400 that says
// why; only a queue that is full now is a retryable 429 (with Retry-After).
std::optional<ApiError> submit_all(Job& job) {
  auto& engine = *job.ctx->engine;
  const int n_prompts = int(job.req.batch.size());
  // A prompt the context cannot hold, in each API's own wording (api_error.h).
  const int64_t limit = engine.context() - 1;
  for (const auto& p : job.req.batch)
    if (int64_t(p.ids.size()) > limit)
      return context_length(job.req.prompt_param, int64_t(p.ids.size()), limit);
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
    g.images = job.req.images;  // shared rows: n choices hold one copy
    g.image_token = job.req.image_token;
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
    if (err == runtime::SubmitError::kQueueFull) {
      ApiError e = api_error(ErrorKind::kRateLimited, msg);
      e.retry_after_s = 1;  // a slot frees within a few decode steps of the running requests
      return e;
    }
    if (err == runtime::SubmitError::kShuttingDown) return api_error(ErrorKind::kUnavailable, msg);
    if (wanted > engine.capacity())
      return invalid("n",
                     msg + (n_prompts > 1 ? "; lower 'n' or send fewer prompts" : "; lower 'n'"));
    return invalid(job.req.prompt_param, msg);
  }
  for (int k = 0; k < int(streams.size()); ++k) {
    job.choices.push_back(
        std::make_unique<ChoiceRunner>(k, job.req, *job.ctx->mi.tok, streams[size_t(k)]));
    job.choices.back()->prompt = k / job.req.n;
  }
  return std::nullopt;
}

ApiError engine_error(const std::string& message) { return api_error(ErrorKind::kServer, message); }

enum class Pump { kMore, kDone, kFailed };

// One step of the SSE answer: appends to *out the events of everything the engine has produced
// so far (the opening events first), without waiting. kDone once the closing events are in
// *out; kFailed after an error event.
Pump stream_pump(Job& job, std::string* out) {
  if (!job.opened) {
    job.opened = true;
    job.fmt->open(job, out);
  }
  if (std::string why = job.ctx->abandoned(); !why.empty()) {
    job.fmt->fail(job, engine_error(why), out);
    return Pump::kFailed;
  }
  bool all_done = true;
  for (auto& c : job.choices) {
    for (int k = 0; k < 256 && !c->done(); ++k) {  // bounded: other choices get their turn
      Delta d;
      if (!c->poll(std::chrono::milliseconds(0), &d)) break;
      if (!c->error().empty()) {
        job.fmt->fail(job, engine_error(c->error()), out);
        return Pump::kFailed;
      }
      job.fmt->delta(job, *c, d, out);
    }
    if (!c->done()) all_done = false;
  }
  if (!all_done) return Pump::kMore;
  job.fmt->close(job, out);
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
      job.fmt->collect(job, i, d);
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

// The choices' failures, first by index: an engine error (500) or a cancelled request (503).
std::optional<ApiError> choice_failure(const Job& job) {
  for (size_t ci = 0; ci < job.choices.size(); ++ci) {
    if (!job.choices[ci]->error().empty()) return engine_error(job.choices[ci]->error());
    if (job.acc[ci].finish_reason == "abort") {
      return api_error(ErrorKind::kUnavailable,
                       "the request was cancelled (the server is shutting down)");
    }
  }
  return std::nullopt;
}

void finish_job(Job& job, int status) {
  for (auto& c : job.choices) c->cancel();  // frees the slots of a client that left
  job.observe();
  job.ctx->metrics.count_request(job.endpoint, status);
}

// The SSE driver, on the connection's strand: write what there is, then come back (at once after
// a write, else when woken).
void drive_stream(std::shared_ptr<Job> job, std::shared_ptr<Responder> r) {
  if (r->closed()) return finish_job(*job, 499);
  job->wake->begin_pass();
  std::string out;
  const Pump st = stream_pump(*job, &out);
  if (out.empty() && st == Pump::kMore) return job->wake->park();  // nothing new
  r->write(std::move(out), [job, r, st](bool ok) {
    if (!ok) return finish_job(*job, 499);
    if (st == Pump::kMore) return drive_stream(job, r);
    r->end_stream();
    finish_job(*job, st == Pump::kDone ? 200 : 500);
  });
}

// The non-streaming driver, on the connection's strand. After progress it looks again at once (a
// pass takes a bounded number of events per choice); otherwise it parks until woken.
void drive_collect(std::shared_ptr<Job> job, std::shared_ptr<Responder> r) {
  if (r->closed()) return finish_job(*job, 499);  // the client hung up: cancelled
  job->wake->begin_pass();
  if (std::string why = job->ctx->abandoned(); !why.empty()) {  // Server::abandon_jobs
    for (auto& c : job->choices) c->cancel();
    job->ctx->metrics.count_request(job->endpoint, 500);
    return r->send(job->fmt->error(engine_error(why)));
  }
  bool progress = false;
  if (!collect_pump(*job, &progress)) {
    if (progress) return r->post([job, r] { drive_collect(job, r); });
    return job->wake->park();
  }
  if (auto e = choice_failure(*job)) {
    job->ctx->metrics.count_request(job->endpoint, e->status());
    return r->send(job->fmt->error(*e));
  }
  const Json out = job->fmt->body(*job);
  job->observe();
  job->ctx->metrics.count_request(job->endpoint, 200);
  HttpResponse res;
  res.set_content(dump(out), "application/json");
  r->send(std::move(res));
}

}  // namespace

void fail_request(Context& ctx, const char* endpoint, const Formatter& fmt, const ApiError& e,
                  Responder& r) {
  ctx.metrics.count_request(endpoint, e.status());
  r.send(fmt.error(e));
}

void run_job(std::shared_ptr<Job> job, std::shared_ptr<Responder> r) {
  // The key a balancer can route the conversation's next turns by, unless the client named one
  // (server.cc added it first, and the first value of a header is kept).
  if (!job->req.batch.empty())
    r->add_header(kAffinityHeader,
                  prefix_affinity_key(job->req.batch[0].ids, job->req.snapshot_hints));
  if (!job->req.warnings.empty())
    r->add_header(kWarningsHeader, warnings_header(job->req.warnings));
  if (auto e = submit_all(*job)) return fail_request(*job->ctx, job->endpoint, *job->fmt, *e, *r);
  drive_job(std::move(job), std::move(r));
}

void drive_job(std::shared_ptr<Job> job, std::shared_ptr<Responder> r) {
  const bool stream = job->req.stream;
  job->wake = std::make_shared<Wake>([wj = std::weak_ptr<Job>(job),
                                      wr = std::weak_ptr<Responder>(r), stream] {
    auto j = wj.lock();
    auto rr = wr.lock();
    if (!j || !rr) return;  // the connection is gone, and with it the job
    if (stream)
      rr->post([j, rr] { drive_stream(j, rr); });
    else
      rr->post([j, rr] { drive_collect(j, rr); });
  });
  for (auto& c : job->choices) c->set_waker([w = job->wake] { w->notify(); });
  // The responder's hang-up callback owns the job while it is parked (the exchange holds it until
  // its answer is out; a connection torn down at shutdown frees it, cancelling its choices).
  r->on_close([job] { job->wake->notify(); });
  // Registered before its first pass, which reads Context::abandoned: a job that comes after
  // Server::abandon_jobs answers at that pass, one that comes before is woken by it.
  job->ctx->add_job(job->wake);
  if (stream) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers = {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}};
    r->start_stream(std::move(head));
    r->post([job, r] { drive_stream(job, r); });
  } else {
    r->post([job, r] { drive_collect(job, r); });
  }
}

void append_named_event(std::string* out, const char* name, const Json& data) {
  *out += "event: ";
  *out += name;
  *out += "\ndata: ";
  *out += dump(data);
  *out += "\n\n";
}

}  // namespace qwen35::server
