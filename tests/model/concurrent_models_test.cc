// Two Models run forward passes at the same time on two threads (a main model and a draft head,
// two engines in one process), each with its own thread pool or none: each gets exactly the bits
// it gets alone. The kernels keep no state of their own (kernels/ops.h, Workspace); this test, run
// under ThreadSanitizer too (scripts/test), is what holds them to it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

std::unique_ptr<Model> load(const std::string& fixture, core::ThreadPool* pool, bool fast) {
  auto w = load_weights(qwen35::testing::fixture_models_dir() + "/" + fixture + "/ckpt");
  EXPECT_TRUE(w.ok()) << w.message();
  if (!w.ok()) return nullptr;
  auto m = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), pool);
  m->set_fast_activations(fast);
  return m;
}

// A prompt of 100 tokens (two grid chunks, the second partial: chunked and recurrent delta forms),
// then 12 decode steps fed with the greedy token. Returns every logit produced, in order.
std::vector<float> generate(Model& m) {
  const int64_t vocab = m.config().vocab;
  std::vector<int32_t> prompt(100);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % size_t(vocab));
  auto st = m.new_state(256);
  std::vector<float> all, logits;
  SequenceRows rows{st.get(), prompt, true};
  EXPECT_TRUE(m.forward(std::span<const SequenceRows>(&rows, 1), &logits).ok());
  all.insert(all.end(), logits.begin(), logits.end());
  for (int i = 0; i < 12; ++i) {
    const float* last = logits.data() + logits.size() - size_t(vocab);
    int32_t tok = int32_t(std::max_element(last, last + vocab) - last);
    SequenceRows d{st.get(), std::span<const int32_t>(&tok, 1), false};
    EXPECT_TRUE(m.forward(std::span<const SequenceRows>(&d, 1), &logits).ok());
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

struct Case {
  const char* a;
  const char* b;
  bool fast;
};

class ConcurrentModels : public ::testing::TestWithParam<Case> {};

TEST_P(ConcurrentModels, EachGetsItsSoloBits) {
  const Case c = GetParam();
  core::ThreadPool pool_a(2), pool_b(2);
  auto a = load(c.a, &pool_a, c.fast);
  auto b = load(c.b, &pool_b, c.fast);
  auto single = load(c.b, nullptr, c.fast);  // a third, single-threaded, beside them
  ASSERT_TRUE(a && b && single);
  const std::vector<float> solo_a = generate(*a), solo_b = generate(*b), solo_single = generate(*single);
  for (int round = 0; round < 3; ++round) {
    std::vector<float> got_a, got_b, got_single;
    std::thread ta([&] { got_a = generate(*a); });
    std::thread tb([&] { got_b = generate(*b); });
    got_single = generate(*single);
    ta.join();
    tb.join();
    // Bit for bit: compare the bytes, not the values with a tolerance.
    ASSERT_EQ(got_a.size(), solo_a.size());
    EXPECT_EQ(0, std::memcmp(got_a.data(), solo_a.data(), solo_a.size() * 4)) << c.a << " round " << round;
    ASSERT_EQ(got_b.size(), solo_b.size());
    EXPECT_EQ(0, std::memcmp(got_b.data(), solo_b.data(), solo_b.size() * 4)) << c.b << " round " << round;
    EXPECT_EQ(0, std::memcmp(got_single.data(), solo_single.data(), solo_single.size() * 4)) << c.b;
  }
  // Thread count does not change a bit either (batch invariance), so all three agree on model b.
  EXPECT_EQ(0, std::memcmp(solo_b.data(), solo_single.data(), solo_b.size() * 4));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConcurrentModels,
                         ::testing::Values(Case{"dense_q4_untied", "moe_q4", false},
                                           Case{"dense_q4_untied", "dense_q4_untied", true},
                                           Case{"moe_bf16", "extra_hf_gqa4_hd64", false}));

}  // namespace
}  // namespace qwen35::model
