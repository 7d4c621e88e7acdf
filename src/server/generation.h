// The one generation path every API shares: a validated CompletionRequest (request.h) is
// submitted to the engine (one RequestStream per choice, all or nothing), and a driver on the
// connection's strand drains the streams without a thread per request and without timers: it
// runs when the engine has pushed to one of the job's streams or the client has hung up (Wake),
// and parks when there is nothing to do. What the client reads is
// the business of a Formatter: OpenAI chat/completions chunks (completions.cc), Responses events
// (responses.cc), Anthropic Messages events (messages.cc). The driver decides when; the
// formatter decides the bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/choice.h"
#include "server/server.h"

namespace qwen35::server {

struct Job;

// The API-specific half of an answer. Called on the connection's strand only, so it needs no
// locking; one per Job.
class Formatter {
 public:
  virtual ~Formatter() = default;
  // Streaming. open: once, before anything else; delta: every delta polled from a choice (also
  // empty ones: the formatter chooses what to show); close: once every choice is done (must
  // append something: it ends the stream); fail: an engine error, which ends the stream.
  virtual void open(Job& job, std::string* out) = 0;
  virtual void delta(Job& job, const ChoiceRunner& c, const Delta& d, std::string* out) = 0;
  virtual void close(Job& job, std::string* out) = 0;
  virtual void fail(Job& job, const ApiError& e, std::string* out) = 0;
  // Non-streaming: every delta, before the driver adds it to job.acc / job.calls.
  virtual void collect(Job& job, size_t choice, const Delta& d) {
    (void)job, (void)choice, (void)d;
  }
  // Non-streaming: the body, once every choice is done without an error or an abort.
  virtual Json body(Job& job) = 0;
  // An error answer in this API's format (also used before the job runs).
  virtual HttpResponse error(const ApiError& e) const { return error_response(e); }
};

using Clock = std::chrono::steady_clock;

// Wakes a job's driver. notify() comes from the engine thread (RequestStream's waker, after each
// push) or the strand (Responder::on_close); it posts the driver when the driver is parked, and
// only then, so at most one pass is queued. A notify that comes while a pass runs (after its
// polls, before it parks) makes the parking pass run again instead of being lost: each pass
// clears `dirty_` before it polls, and park() looks at it after setting `parked_`.
class Wake {
 public:
  explicit Wake(std::function<void()> resume) : resume_(std::move(resume)) {}
  void notify();
  // The driver, at the start of a pass (before it polls).
  void begin_pass() { dirty_.store(false); }
  // The driver, when the pass found nothing to do.
  void park();

 private:
  std::atomic<bool> dirty_{false}, parked_{false};
  // Posts a pass of the driver onto the strand. It holds the job and the responder weakly: the
  // streams' wakers hold this, and the engine holds the streams.
  std::function<void()> resume_;
};

// Everything one generation request needs; shared with the driver, which runs after the handler
// returns.
struct Job {
  Context* ctx = nullptr;
  CompletionRequest req;
  std::unique_ptr<Formatter> fmt;
  std::vector<std::unique_ptr<ChoiceRunner>> choices;
  std::string id;
  int64_t created = 0;
  Clock::time_point t0;
  const char* endpoint = "";
  bool observed = false;
  // Streaming: the opening events are out.
  bool opened = false;
  // Non-streaming: what each choice has produced so far (the driver fills these).
  std::vector<Delta> acc;
  std::vector<std::vector<ToolCall>> calls;
  std::shared_ptr<Wake> wake;  // set by drive_job
  int64_t completion_tokens() const;
  // Prompt tokens, each prompt of a batch counted once.
  int64_t prompt_tokens() const;
  // Prompt tokens resumed from the prefix cache, counted once per prompt (its first choice's).
  int64_t cached_tokens() const;
  const std::vector<int32_t>& ids_of(const ChoiceRunner& c) const {
    return req.batch[size_t(c.prompt)].ids;
  }
  const std::string& text_of(const ChoiceRunner& c) const {
    return req.batch[size_t(c.prompt)].text;
  }
  // Latency histograms and token counters, once per request.
  void observe();
};

// Starts a job whose req is parsed and whose fmt, id, created, t0 and endpoint are set: submits
// every choice (a refusal is answered through fmt->error) and drives the answer, streamed when
// req.stream. Returns at once; the answer is written later on the connection's strand.
void run_job(std::shared_ptr<Job> job, std::shared_ptr<Responder> r);

// The second half of run_job, for a job whose choices are submitted: installs the wakers (the
// choices' streams, the responder's hang-up) and starts the driver.
void drive_job(std::shared_ptr<Job> job, std::shared_ptr<Responder> r);

// Answers an error before a job runs (counted in /metrics under `endpoint`).
void fail_request(Context& ctx, const char* endpoint, const Formatter& fmt, const ApiError& e,
                  Responder& r);

// An SSE event with a name (`event: NAME`), as the Responses and Messages APIs send them.
void append_named_event(std::string* out, const char* name, const Json& data);

}  // namespace qwen35::server
