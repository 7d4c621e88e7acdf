// runtime::Engine in process on a synthetic tiny checkpoint: concurrent == solo bit for bit,
// cancellation frees the slot, admission control (queue full, prompt longer than the context).
#include "runtime/engine.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "kernels/ops.h"
#include "model/weights.h"
#include "engine_drain.h"
#include "test_util.h"
#include "tiny_model_suite.h"

namespace qwen35::runtime {
namespace {

using testing::TempDir;

class EngineTest : public testing::TinyModelSuite<EngineTest> {};

using Out = testing::EngineOut;
using testing::drain;

GenerationRequest make(int i, bool seeded) {
  const int lengths[6] = {3, 65, 150, 64, 1, 100};
  GenerationRequest g;
  for (int k = 0; k < lengths[i]; ++k) g.prompt.push_back((k * 13 + i * 7 + 1) % 3000);
  g.max_tokens = 6 + 3 * i;
  g.sampling.temperature = seeded ? 0.8f : 0.0f;
  g.sampling.seed = 42 + i;
  g.sampling.logprobs = 2;
  return g;
}

void expect_same(const Out& a, const Out& b, int i) {
  ASSERT_EQ(a.samples.size(), b.samples.size()) << i;
  for (size_t k = 0; k < a.samples.size(); ++k) {
    EXPECT_EQ(a.samples[k].token, b.samples[k].token) << i << "/" << k;
    EXPECT_EQ(std::memcmp(&a.samples[k].logprob, &b.samples[k].logprob, 4), 0) << i << "/" << k;
    ASSERT_EQ(a.samples[k].top.size(), b.samples[k].top.size());
    for (size_t t = 0; t < a.samples[k].top.size(); ++t) {
      EXPECT_EQ(a.samples[k].top[t].token, b.samples[k].top[t].token);
      EXPECT_EQ(std::memcmp(&a.samples[k].top[t].logprob, &b.samples[k].top[t].logprob, 4), 0);
    }
  }
  EXPECT_EQ(a.finish, b.finish);
}

TEST_F(EngineTest, ConcurrentEqualsSolo) {
  for (bool seeded : {false, true}) {
    Engine engine(*model_, EngineOptions{6, 256, 16, 64});
    SubmitError err;
    std::string msg;
    std::vector<Out> solo;
    for (int i = 0; i < 6; ++i) {
      auto s = engine.submit(make(i, seeded), &err, &msg);
      ASSERT_TRUE(s) << msg;
      solo.push_back(drain(*s));
      EXPECT_EQ(solo.back().finish, "length");
    }
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      streams.push_back(engine.submit(make(i, seeded), &err, &msg));
      ASSERT_TRUE(streams.back()) << msg;
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * i));
    }
    for (int i = 0; i < 6; ++i) expect_same(drain(*streams[size_t(i)]), solo[size_t(i)], i);
  }
}

TEST_F(EngineTest, CancelFreesTheSlot) {
  Engine engine(*model_, EngineOptions{2, 512, 4, 64});
  SubmitError err;
  std::string msg;
  GenerationRequest g = make(1, false);
  g.max_tokens = -1;
  auto s = engine.submit(g, &err, &msg);
  ASSERT_TRUE(s);
  StreamEvent ev;
  ASSERT_TRUE(s->next(&ev, std::chrono::seconds(30)));
  s->cancel();
  Out rest = drain(*s);
  EXPECT_EQ(rest.finish, "cancelled");
  EXPECT_EQ(engine.stats().slots_busy, 0);
}

TEST_F(EngineTest, Admission) {
  Engine engine(*model_, EngineOptions{1, 64, 1, 64});
  SubmitError err;
  std::string msg;
  GenerationRequest g = make(0, false);
  g.max_tokens = -1;
  auto a = engine.submit(g, &err, &msg);
  auto b = engine.submit(g, &err, &msg);
  ASSERT_TRUE(a && b);
  auto c = engine.submit(g, &err, &msg);
  EXPECT_FALSE(c);
  EXPECT_EQ(err, SubmitError::kQueueFull);
  GenerationRequest big = make(2, false);  // 150 tokens > 64
  EXPECT_FALSE(engine.submit(big, &err, &msg));
  EXPECT_EQ(err, SubmitError::kInvalid);
  EXPECT_NE(msg.find("150"), std::string::npos) << msg;
  EXPECT_NE(msg.find("64"), std::string::npos) << msg;
  // The context fills up: the request ends with "length".
  EXPECT_EQ(drain(*a).finish, "length");
  engine.shutdown(false);
  const std::string fb = drain(*b).finish;
  EXPECT_TRUE(fb == "cancelled" || fb == "length") << fb;
}

// A KV pool smaller than the slots' worst case: requests wait for blocks (or are preempted and
// resume) instead of failing, still get their solo bits, and a prompt the whole pool cannot
// hold is refused with the numbers; with a pool smaller than the context, the pool is the
// context. The pool is empty again afterwards.
TEST_F(EngineTest, SmallKvPoolMakesRequestsWait) {
  std::vector<Out> solo;
  {
    Engine engine(*model_, EngineOptions{1, 256, 8, 64});
    SubmitError err;
    std::string msg;
    for (int i = 0; i < 6; ++i) {
      auto s = engine.submit(make(i, true), &err, &msg);
      ASSERT_TRUE(s) << msg;
      solo.push_back(drain(*s));
    }
  }
  EngineOptions o{4, 256, 8, 64};
  o.kv_blocks = 3;  // 192 positions; make(2) alone needs all three
  Engine engine(*model_, o);
  EXPECT_EQ(engine.stats().kv_tokens_total, 192);
  SubmitError err;
  std::string msg;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) {
    streams.push_back(engine.submit(make(i, true), &err, &msg));
    ASSERT_TRUE(streams.back()) << msg;
  }
  for (int i = 0; i < 6; ++i) expect_same(drain(*streams[size_t(i)]), solo[size_t(i)], i);
  GenerationRequest open_ended = make(0, false);
  open_ended.max_tokens = -1;  // the pool is its context: it ends at 192 positions
  auto s = engine.submit(open_ended, &err, &msg);
  ASSERT_TRUE(s) << msg;
  const Out got = drain(*s);
  EXPECT_EQ(got.finish, "length");
  EXPECT_EQ(int64_t(got.samples.size()), 192 - 3 + 1);
  GenerationRequest big = make(0, false);
  big.prompt.assign(200, 5);  // within --ctx 256, over the pool
  EXPECT_FALSE(engine.submit(big, &err, &msg));
  EXPECT_EQ(err, SubmitError::kInvalid);
  for (const char* want : {"200", "192", "KV pool"})
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  EXPECT_EQ(engine.stats().kv_blocks_used, 0);
  EXPECT_EQ(engine.stats().kv_blocks_total, 3);
}

// The prefix cache: a prompt that extends or shares a cached grid prefix resumes from its
// snapshot and gets the bits of a fresh run (greedy and seeded), the reused count is reported,
// and a tiny cache that evicts keeps the bits too. The cache's blocks count in the pool and go
// back when it is cleared by demand.
TEST_F(EngineTest, PrefixCacheResumedEqualsFresh) {
  auto prompt = [](int64_t n, int salt) {
    std::vector<int32_t> p;
    for (int64_t k = 0; k < n; ++k) p.push_back(int32_t((k * 31 + salt * 977 + 5) % 3000));
    return p;
  };
  const std::vector<int32_t> base = prompt(300, 1);
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(std::vector<int32_t>(base.begin(), base.begin() + 200));  // snapshot at 192
  prompts.push_back(base);                                                    // resumes at 192
  auto branch = std::vector<int32_t>(base.begin(), base.begin() + 130);      // snapshot at 128?
  for (int32_t t : prompt(70, 2)) branch.push_back(t);
  prompts.push_back(branch);
  prompts.push_back(base);  // again: resumes at 256 (base's own last boundary)
  for (bool seeded : {false, true}) {
    for (int64_t cache_bytes : {int64_t(64) << 20, int64_t(3) << 20}) {  // roomy, then evicting
      auto run = [&](int64_t bytes, std::vector<int64_t>* reused) {
        EngineOptions o{2, 512, 8, 64};
        o.cache_bytes = bytes;
        o.cache_interval = 128;
        Engine engine(*model_, o);
        std::vector<Out> outs;
        for (const auto& p : prompts) {
          GenerationRequest g;
          g.prompt = p;
          g.max_tokens = 12;
          g.sampling.temperature = seeded ? 0.9f : 0.0f;
          g.sampling.seed = 7;
          g.sampling.logprobs = 3;
          SubmitError err;
          std::string msg;
          auto s = engine.submit(g, &err, &msg);
          EXPECT_TRUE(s) << msg;
          if (!s) return outs;
          outs.push_back(drain(*s));
          if (reused) reused->push_back(s->timing().prompt_reused);
        }
        const EngineStats st = engine.stats();
        if (bytes > 0) {
          EXPECT_GT(st.cache.hits, 0);
          EXPECT_EQ(st.kv_blocks_used, st.cache.blocks);  // only the cache holds blocks now
        }
        return outs;
      };
      std::vector<int64_t> reused;
      const auto fresh = run(0, nullptr);
      const auto cached = run(cache_bytes, &reused);
      ASSERT_EQ(fresh.size(), cached.size());
      for (size_t i = 0; i < fresh.size(); ++i) expect_same(cached[i], fresh[i], int(i));
      ASSERT_EQ(reused.size(), 4u);
      EXPECT_EQ(reused[0], 0);
      if (cache_bytes == (int64_t(64) << 20)) {
        EXPECT_EQ(reused[1], 192);
        EXPECT_EQ(reused[2], 128);  // the interval snapshot of the first prompt
        EXPECT_EQ(reused[3], 256);
      }
    }
  }
}

// A group (the choices of one API request) is queued all or nothing: one larger than slots +
// queue places can never run (kInvalid, with the numbers), one that does not fit now is
// kQueueFull and leaves nothing queued, and a bad prompt anywhere in it refuses it whole.
TEST_F(EngineTest, GroupAdmission) {
  Engine engine(*model_, EngineOptions{2, 4096, 3, 64});  // runs long: admission is not racy
  EXPECT_EQ(engine.capacity(), 5);
  SubmitError err;
  std::string msg;
  GenerationRequest g = make(0, false);
  g.max_tokens = -1;
  EXPECT_TRUE(engine.submit_group(std::vector<GenerationRequest>(6, g), &err, &msg).empty());
  EXPECT_EQ(err, SubmitError::kInvalid);
  for (const char* want : {"6", "5", "2 running", "3 waiting"})
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  std::vector<GenerationRequest> mixed(2, g);
  mixed.push_back(g);
  mixed.back().prompt.assign(5000, 7);  // over the context
  EXPECT_TRUE(engine.submit_group(mixed, &err, &msg).empty());
  EXPECT_EQ(err, SubmitError::kInvalid);
  EXPECT_EQ(engine.stats().queued + engine.stats().running, 0);
  auto held = engine.submit_group(std::vector<GenerationRequest>(4, g), &err, &msg);
  ASSERT_EQ(held.size(), 4u) << msg;
  EXPECT_TRUE(engine.submit_group(std::vector<GenerationRequest>(2, g), &err, &msg).empty());
  EXPECT_EQ(err, SubmitError::kQueueFull);
  auto last = engine.submit_group(std::vector<GenerationRequest>(1, g), &err, &msg);
  EXPECT_EQ(last.size(), 1u) << msg;
  engine.shutdown(false);
}

// The gauges go back to idle when the last request ends, and already when its stream closes:
// kv_tokens_used used to keep the value of the last step's start.
TEST_F(EngineTest, GaugesReturnToIdle) {
  Engine engine(*model_, EngineOptions{2, 256, 4, 64});
  SubmitError err;
  std::string msg;
  auto a = engine.submit(make(1, false), &err, &msg);
  auto b = engine.submit(make(2, true), &err, &msg);
  ASSERT_TRUE(a && b) << msg;
  EXPECT_EQ(drain(*a).finish, "length");
  EXPECT_EQ(drain(*b).finish, "length");
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.kv_tokens_used, 0);
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.slots_busy, 0);
  EXPECT_EQ(st.queued, 0);
  EXPECT_EQ(st.finished, 2);
}

TEST_F(EngineTest, MaxTokensZeroReadsThePromptOnly) {
  Engine engine(*model_, EngineOptions{1, 512, 4, 64});
  SubmitError err;
  std::string msg;
  GenerationRequest g = make(1, false);
  g.max_tokens = 0;
  auto s = engine.submit(g, &err, &msg);
  const Out o = drain(*s);
  EXPECT_EQ(o.finish, "length");
  EXPECT_TRUE(o.samples.empty());
  EXPECT_TRUE(s->timing().prompt_done);
}

}  // namespace
}  // namespace qwen35::runtime
