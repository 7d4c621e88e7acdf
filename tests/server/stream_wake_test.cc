// The driver is woken, not timed (generation.h): a job's answer advances when the engine pushes
// to one of its streams (RequestStream's waker) or the client hangs up (Responder::on_close),
// and a driver with nothing to do parks. Shown on a Responder that runs nothing by itself (no
// timers at all): its posted work runs only when the test runs it, so what is written after each
// push is what the wake-ups delivered.
#include <gtest/gtest.h>

#include <deque>
#include <memory>

#include "server/responses.h"
#include "bundled_model_info.h"

namespace qwen35::server {
namespace {

class ManualResponder : public Responder {
 public:
  void send(HttpResponse res) override { sent.push_back(std::move(res)); }
  void start_stream(HttpResponse) override { streaming = true; }
  void write(std::string data, std::function<void(bool)> done) override {
    written += data;
    if (done) queue.push_back([this, done] { done(!hung_up); });
  }
  void end_stream() override { ended = true; }
  void post(std::function<void()> fn) override { queue.push_back(std::move(fn)); }
  void on_close(std::function<void()> fn) override { close_fn = std::move(fn); }
  bool closed() const override { return hung_up; }
  void add_header(std::string name, std::string value) override {
    headers.emplace_back(std::move(name), std::move(value));
  }

  // Runs what was posted, and what that posts, until nothing is left; returns how many ran.
  int run_all() {
    int n = 0;
    while (!queue.empty()) {
      auto fn = std::move(queue.front());
      queue.pop_front();
      fn();
      ++n;
    }
    return n;
  }
  void hang_up() {
    hung_up = true;
    if (close_fn) std::exchange(close_fn, nullptr)();
  }

  std::deque<std::function<void()>> queue;
  std::vector<HttpResponse> sent;
  std::string written;
  bool streaming = false, ended = false, hung_up = false;
  std::function<void()> close_fn;
  std::vector<std::pair<std::string, std::string>> headers;
};

// The bundled model's tokenizer and template in a server Context (no engine: the test pushes).
struct WakeModel {
  WakeModel() { ctx.mi = testing_model::bundled_model_info().mi; }
  tokenizer::Tokenizer* tok = testing_model::bundled_model_info().tok.get();
  Context ctx;
};

WakeModel& wake_model() {
  static WakeModel m;
  return m;
}

// A Responses job of one choice reading `stream`, as run_job would set it up after submitting.
std::shared_ptr<Job> job_on(const std::shared_ptr<runtime::RequestStream>& stream, bool streamed) {
  WakeModel& m = wake_model();
  Json body = {{"input", "hi"}, {"reasoning", {{"effort", "none"}}}, {"stream", streamed}};
  ResponsesOptions opt;
  auto job = std::make_shared<Job>();
  EXPECT_FALSE(parse_responses_request(body, m.ctx.mi, &job->req, &opt));
  job->ctx = &m.ctx;
  job->fmt = make_responses_formatter(opt, job->req);
  job->endpoint = "/v1/responses";
  job->id = "resp_1";
  job->t0 = Clock::now();
  job->choices.push_back(std::make_unique<ChoiceRunner>(0, job->req, *m.tok, stream));
  return job;
}

void push_text(runtime::RequestStream& s, const std::string& text) {
  auto ids = wake_model().tok->encode(text);
  ASSERT_TRUE(ids.ok());
  for (int32_t id : *ids) {
    runtime::StreamEvent ev;
    ev.sample.token = id;
    s.push(std::move(ev));
  }
}

void push_done(runtime::RequestStream& s) {
  runtime::StreamEvent ev;
  ev.kind = runtime::StreamEvent::kDone;
  ev.finish_reason = "stop";
  s.push(std::move(ev));
}

TEST(StreamWake, StreamAdvancesOnlyWhenTheEngineWakesIt) {
  auto stream = std::make_shared<runtime::RequestStream>(4);
  auto r = std::make_shared<ManualResponder>();
  drive_job(job_on(stream, true), r);
  EXPECT_GE(r->run_all(), 1);
  EXPECT_TRUE(r->streaming);
  EXPECT_NE(r->written.find("response.created"), std::string::npos) << r->written;
  EXPECT_EQ(r->written.find("output_text.delta"), std::string::npos) << r->written;
  // Parked: nothing is scheduled, so nothing runs until the engine pushes.
  EXPECT_EQ(r->run_all(), 0);
  push_text(*stream, "And God said");
  EXPECT_FALSE(r->queue.empty());  // the push woke the driver
  r->run_all();
  EXPECT_NE(r->written.find("output_text.delta"), std::string::npos) << r->written;
  EXPECT_EQ(r->run_all(), 0);
  EXPECT_FALSE(r->ended);
  push_done(*stream);
  r->run_all();
  EXPECT_TRUE(r->ended);
  EXPECT_NE(r->written.find("response.completed"), std::string::npos) << r->written;
  EXPECT_NE(r->written.find("And God said"), std::string::npos) << r->written;
  EXPECT_EQ(r->run_all(), 0);
  push_text(*stream, " more");  // a push after the end wakes nothing
  EXPECT_TRUE(r->queue.empty());
}

TEST(StreamWake, WholeAnswerIsSentWhenTheLastEventWakesIt) {
  auto stream = std::make_shared<runtime::RequestStream>(4);
  auto r = std::make_shared<ManualResponder>();
  drive_job(job_on(stream, false), r);
  r->run_all();
  push_text(*stream, "And God said");
  r->run_all();
  EXPECT_TRUE(r->sent.empty());
  push_done(*stream);
  r->run_all();
  ASSERT_EQ(r->sent.size(), 1u);
  const Json body = Json::parse(r->sent[0].body);
  EXPECT_EQ(body["status"], "completed") << body;
  EXPECT_EQ(body["output"][0]["content"][0]["text"], "And God said") << body;
}

TEST(StreamWake, HangUpWakesTheDriverWhichCancels) {
  auto stream = std::make_shared<runtime::RequestStream>(4);
  auto r = std::make_shared<ManualResponder>();
  drive_job(job_on(stream, true), r);
  r->run_all();
  EXPECT_FALSE(stream->cancelled());
  r->hang_up();  // no event from the engine: the hang-up alone wakes the driver
  EXPECT_FALSE(r->queue.empty());
  r->run_all();
  EXPECT_TRUE(stream->cancelled());
}

TEST(StreamWake, WakerRunsOnEachPushOutsideTheLock) {
  runtime::RequestStream s(1);
  int calls = 0;
  runtime::StreamEvent seen;
  s.set_waker([&] {
    ++calls;
    // Outside the stream's lock: the woken side may read the stream at once.
    EXPECT_TRUE(s.next(&seen, std::chrono::milliseconds(0)));
  });
  for (int32_t t : {7, 8, 9}) {
    runtime::StreamEvent ev;
    ev.sample.token = t;
    s.push(std::move(ev));
    EXPECT_EQ(seen.sample.token, t);
  }
  EXPECT_EQ(calls, 3);
}

}  // namespace
// The engine's last resort (issue 32): close() ends a stream from literals; the reader gets the
// events pushed before it, then the end, once; what comes after the end is dropped.
TEST(StreamWake, CloseEndsTheStreamAfterItsEventsOnce) {
  runtime::RequestStream s(1);
  int calls = 0;
  s.set_waker([&] { ++calls; });
  runtime::StreamEvent tok;
  tok.sample.token = 5;
  s.push(std::move(tok));
  s.close("error", "the server ran out of memory");
  runtime::StreamEvent late;
  late.sample.token = 6;
  s.push(std::move(late));
  runtime::StreamEvent done;
  done.kind = runtime::StreamEvent::kDone;
  done.finish_reason = "stop";
  s.push(std::move(done));
  s.close("cancelled", nullptr);
  EXPECT_EQ(calls, 2);  // the token and the close
  runtime::StreamEvent ev;
  ASSERT_TRUE(s.next(&ev, std::chrono::milliseconds(0)));
  EXPECT_EQ(ev.kind, runtime::StreamEvent::kToken);
  EXPECT_EQ(ev.sample.token, 5);
  ASSERT_TRUE(s.next(&ev, std::chrono::milliseconds(0)));
  EXPECT_EQ(ev.kind, runtime::StreamEvent::kDone);
  EXPECT_EQ(ev.finish_reason, "error");
  EXPECT_EQ(ev.error, "the server ran out of memory");
  EXPECT_FALSE(s.next(&ev, std::chrono::milliseconds(0)));
}

}  // namespace qwen35::server
