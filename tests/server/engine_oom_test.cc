// An allocation failure at any point of the engine thread's work ends at most the requests it
// touched, with an error that says so, and never the process (issue 32): the test fails the
// k-th allocation after a request's admission, for every k until the request runs through
// without reaching it, plain and with each drafter, and each time a later request still gets
// its solo bits. The sweep covers whatever the engine thread does after admission: the plan, the
// drafts, the forward call, sampling, the prefix cache's snapshots, the events, publishing the
// stats and taking the next request from the queue.
#include <gtest/gtest.h>

#include <atomic>

#include "alloc_hook.h"
#include "engine_drain.h"
#include "runtime/engine.h"
#include "tiny_model_suite.h"

namespace qwen35::runtime {
namespace {

using testing::run;

class EngineOomTest : public testing::TinyModelSuite<EngineOomTest> {
 protected:
  // Over one grid chunk, so that the prefix cache takes a snapshot; repetitive, so that lookup
  // finds drafts in it.
  // `first`: the first token, which makes the prompt one the prefix cache has not seen.
  static GenerationRequest request(SpecMethod method, int32_t first = 5) {
    GenerationRequest r;
    r.prompt.push_back(first);
    for (int k = 1; k < 90; ++k) r.prompt.push_back(int32_t((k % 11) * 37 + 5));
    r.max_tokens = 10;
    r.sampling.temperature = 0.7f;
    r.sampling.seed = 7;
    r.sampling.logprobs = 2;
    r.spec = SpecOptions{method, 3};
    return r;
  }

  // Fails the k-th allocation after admission for k = 0, 1, ... until one request runs through
  // without it firing. `fresh`: each failing request has a prompt of its own (a full prefill,
  // and the prefix cache takes its snapshots), else the prompt the cache holds (a resume).
  void sweep(SpecMethod method, bool fresh) {
    EngineOptions opts{2, 256, 8, 64};
    opts.cache_bytes = int64_t(64) << 20;  // before_resume runs where every admission starts
    opts.spec = SpecOptions{method, 3};
    std::atomic<int64_t> arm{-1};  // the skip count to arm at the next admission; -1: none
    std::atomic<int64_t> fired{0};
    std::atomic<bool> pending{false};
    opts.before_resume = [&] {
      // On the engine thread: arms (or disarms) its own hook; counts what the last arming did.
      if (pending.exchange(false) && testing::failed_allocations() > fired.load())
        fired.store(testing::failed_allocations());
      const int64_t k = arm.exchange(-1);
      if (k >= 0) {
        fired.store(testing::failed_allocations());
        testing::fail_next_allocation(1, k);
        pending = true;
      } else {
        testing::allow_allocations();
      }
    };
    Engine engine(*model_, opts);
    const testing::EngineOut solo = run(engine, request(method));
    ASSERT_EQ(solo.finish, "length") << solo.error;
    int64_t errors = 0;
    for (int64_t k = 0;; ++k) {
      const int64_t before = fired.load();
      arm = k;
      const testing::EngineOut hit = run(engine, request(method, fresh ? int32_t(1000 + k) : 5));
      ASSERT_NE(hit.finish, "timeout") << "k = " << k;
      if (hit.finish == "error") {
        ++errors;
        EXPECT_NE(hit.error.find("out of memory"), std::string::npos) << k << ": " << hit.error;
      } else {
        ASSERT_EQ(hit.finish, "length") << k;
      }
      // The next admission disarms the hook (an armed failure still pending may end this one);
      // the one after it runs clean and must give the solo bits.
      const testing::EngineOut next = run(engine, request(method));
      ASSERT_NE(next.finish, "timeout") << "k = " << k;
      testing::expect_same_bits(run(engine, request(method)), solo);
      if (::testing::Test::HasFailure()) FAIL() << "after failing allocation " << k;
      EXPECT_EQ(engine.stats().slots_busy, 0);
      if (fired.load() == before && hit.finish != "error" && next.finish != "error")
        break;  // the k-th allocation came after the request's end: the sweep is complete
    }
    EXPECT_GT(errors, 0) << "the hook never ended a request";
  }
};

TEST_F(EngineOomTest, EveryAllocationOnTheEngineThreadMayFailPlain) {
  sweep(SpecMethod::kOff, false);
  sweep(SpecMethod::kOff, true);
}
TEST_F(EngineOomTest, EveryAllocationOnTheEngineThreadMayFailLookup) {
  sweep(SpecMethod::kLookup, false);
  sweep(SpecMethod::kLookup, true);
}
TEST_F(EngineOomTest, EveryAllocationOnTheEngineThreadMayFailMtp) {
  sweep(SpecMethod::kMtp, false);
  sweep(SpecMethod::kMtp, true);
}

}  // namespace
}  // namespace qwen35::runtime
