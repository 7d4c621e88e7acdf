// server::ImageLane alone: a lane whose threads cannot start answers 503 and starts them on a
// later request; one that starts fewer runs every job on those; a job that throws leaves the
// lane working; a full queue is a 429 with Retry-After; stop() returns with jobs queued and a
// test gate closed. Every wait is on a state (a future, the lane's stats), never on time.
#include "server/image_lane.h"

#include "runtime/image_budget.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <system_error>

#include "test_util.h"

namespace qwen35::server {
namespace {

// A thread factory that starts `allowed` threads, then fails as a PID limit makes std::thread fail.
struct LimitedFactory {
  std::shared_ptr<std::atomic<int>> allowed = std::make_shared<std::atomic<int>>(0);
  std::function<std::thread(std::function<void()>)> fn() const {
    return [a = allowed](std::function<void()> body) {
      if (a->fetch_sub(1) <= 0) {
        a->fetch_add(1);
        throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
      }
      return std::thread(std::move(body));
    };
  }
};

// Waits until `pred` holds of the lane's stats (a minute at most: a safety net, not a timing).
template <typename Pred>
bool wait_for_stats(const ImageLane& lane, Pred pred) {
  for (int i = 0; i < 60000; ++i) {
    if (pred(lane.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

TEST(ImageLane, NoThreadIsA503AndALaterRequestStartsThem) {
  LimitedFactory f;
  ImageLaneOptions o;
  o.threads = 2;
  o.start_thread = f.fn();
  ImageLane lane(o);
  bool ran = false;
  auto e = lane.submit([&] { ran = true; });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status(), 503);
  EXPECT_GT(e->retry_after_s, 0);
  EXPECT_NE(e->message.find("cannot start a thread"), std::string::npos) << e->message;
  EXPECT_FALSE(ran);
  *f.allowed = 2;  // the limit is lifted
  std::promise<void> done;
  EXPECT_FALSE(lane.submit([&] { done.set_value(); }).has_value());
  done.get_future().wait();
  EXPECT_EQ(lane.stats().threads, 2);
  EXPECT_EQ(lane.stats().refused, 1);
}

TEST(ImageLane, FewerThreadsStillRunEveryJob) {
  LimitedFactory f;
  *f.allowed = 1;
  ImageLaneOptions o;
  o.threads = 4;
  o.queue = 64;
  o.start_thread = f.fn();
  ImageLane lane(o);
  std::atomic<int> ran{0};
  for (int i = 0; i < 32; ++i) ASSERT_FALSE(lane.submit([&] { ran++; }).has_value());
  ASSERT_TRUE(wait_for_stats(lane, [](const ImageLane::Stats& s) { return s.queued == 0 && s.busy == 0; }));
  lane.stop();
  EXPECT_EQ(ran.load(), 32);
  EXPECT_EQ(lane.stats().threads, 1);
  EXPECT_FALSE(lane.stats().start_error.empty());
}

TEST(ImageLane, AJobThatThrowsLeavesTheLaneWorking) {
  ImageLaneOptions o;
  o.threads = 1;
  ImageLane lane(o);
  ASSERT_FALSE(lane.submit([] { throw std::runtime_error("decoder failure"); }).has_value());
  std::promise<void> done;
  ASSERT_FALSE(lane.submit([&] { done.set_value(); }).has_value());
  done.get_future().wait();
  ASSERT_TRUE(wait_for_stats(lane, [](const ImageLane::Stats& s) { return s.busy == 0; }));
  EXPECT_EQ(lane.stats().failed, 1);
}

TEST(ImageLane, AFullQueueIsA429WithRetryAfter) {
  ImageLaneOptions o;
  o.threads = 1;
  o.queue = 1;
  ImageLane lane(o);
  std::promise<void> started, release;
  std::shared_future<void> go = release.get_future().share();
  ASSERT_FALSE(lane.submit([&, go] { started.set_value(); go.wait(); }).has_value());
  started.get_future().wait();  // the thread is busy
  std::atomic<int> ran{0};
  ASSERT_FALSE(lane.submit([&] { ran++; }).has_value());  // waits in the queue
  auto e = lane.submit([&] { ran++; });
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status(), 429);
  EXPECT_EQ(e->retry_after_s, 1);
  release.set_value();
  lane.stop();
  EXPECT_EQ(ran.load(), 1);
}

// stop() in every state: jobs queued behind a closed gate run (the server answers them 503 while
// shutting down), and the gate opens for a stopping lane.
TEST(ImageLane, StopReturnsWithJobsQueuedBehindAClosedGate) {
  testing::TempDir dir;
  ImageLaneOptions o;
  o.threads = 2;
  o.queue = 4;
  o.gate_file = dir.file("gate");  // never created
  ImageLane lane(o);
  std::atomic<int> ran{0};
  for (int i = 0; i < 2; ++i) ASSERT_FALSE(lane.submit([&] { ran++; }).has_value());
  ASSERT_TRUE(wait_for_stats(lane, [](const ImageLane::Stats& s) { return s.busy == 2; }));  // at the gate
  for (int i = 0; i < 4; ++i) ASSERT_FALSE(lane.submit([&] { ran++; }).has_value());
  ASSERT_TRUE(wait_for_stats(lane, [](const ImageLane::Stats& s) { return s.busy == 2 && s.queued == 4; }));
  EXPECT_EQ(ran.load(), 0);
  lane.stop();
  EXPECT_EQ(ran.load(), 6);
  auto e = lane.submit([] {});
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status(), 503);
}

// The server-wide image memory: a reservation that does not fit beside those held is refused
// (the request gets 429), never waited for; giving one back makes room again.
TEST(ImageBudget, RefusesWhatDoesNotFitNowAndGivesBack) {
  runtime::ImageBudget b(100);
  auto r1 = b.try_reserve(60);
  ASSERT_TRUE(r1);
  EXPECT_FALSE(b.try_reserve(41));
  auto r2 = b.try_reserve(40);
  ASSERT_TRUE(r2);
  EXPECT_EQ(b.used(), 100);
  r1.reset();
  EXPECT_EQ(b.used(), 40);
  runtime::ImageBudget::Reservation moved = std::move(r2);
  EXPECT_EQ(b.used(), 40);
  EXPECT_TRUE(b.try_reserve(60));  // a temporary: given back at once
  EXPECT_EQ(b.used(), 40);
}

}  // namespace
}  // namespace qwen35::server
