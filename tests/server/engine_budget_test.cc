// The step's budget of work (runtime/stepper.h, docs/design.md "Runtime"): a long prompt read
// beside a decoding request, on the tiny synthetic checkpoint. Every step's planned work, its
// rows' matmuls and their attention over every position before them counted the way this test
// counts them from the config, stays within the budget, but for the one grid chunk a step always
// gives the prompt; its chunks stay on the 64-position grid, are the longest that fit the budget
// and the step's rows, and shrink as the context grows; the decoding request gets a token in every step, with its solo
// bits (the prompt's own, chunked otherwise, are checked by the chunking tests). Work is counted, never timed.
#include <gtest/gtest.h>

#include <algorithm>
#include <deque>

#include "engine_drain.h"
#include "stepper_drive.h"
#include "runtime/stepper.h"
#include "tiny_model_suite.h"

namespace qwen35::runtime {
namespace {
namespace step_budget {  // the engine tests build as one unit: names of its own

class EngineBudgetTest : public testing::TinyModelSuite<EngineBudgetTest> {};

using testing::admit;
using testing::collect;
using testing::Driven;


GenerationRequest request(int64_t n, int salt, int64_t max_tokens) {
  GenerationRequest g;
  for (int64_t k = 0; k < n; ++k) g.prompt.push_back(int32_t((k * 37 + salt * 11 + 5) % 3000));
  g.max_tokens = max_tokens;
  g.sampling.temperature = 0.0f;
  return g;
}

TEST_F(EngineBudgetTest, ALongPromptsStepsStayWithinTheirBudgetOnTheGrid) {
  constexpr int64_t kGrid = 64, kSteps = 256, kLong = 2600;
  const model::ModelConfig& c = model_->config();
  // A row's work: its matmuls, and per key it reads 2·head_dim multiply-adds of scores and as
  // many of values, per query head, in every full-attention layer.
  const double T = model_->token_flops();
  const double per_key = 4.0 * double(c.n_heads * c.head_dim) * double(c.n_full_layers());
  ASSERT_GT(per_key, 0);
  auto rows = [&](int64_t pos0, int64_t n) {  // rows at KV positions [pos0, pos0 + n)
    double keys = 0;
    for (int64_t p = pos0; p < pos0 + n; ++p) keys += double(p + 1);
    return double(n) * T + per_key * keys;
  };
  Stepper st(*model_, EngineOptions{2, 4096, 8, kSteps});
  const double budget = st.step_budget();
  EXPECT_DOUBLE_EQ(budget, double(kSteps) * T + per_key * double(kSteps * kSteps));
  // The attention past a few thousand positions is more than a row's matmuls on this model, so
  // the prompt's chunks must shrink to fit.
  ASSERT_GT(per_key * double(kLong), T);

  const GenerationRequest decoding = request(12, 1, 48), long_prompt = request(kLong, 2, 2);
  Driven a, b;
  admit(st, decoding, &a);
  {
    StepOutput out;  // its prompt, and its first token
    st.step(&out);
    collect(out, {&a, &b});
    ASSERT_EQ(a.out.samples.size(), 1u);
  }
  admit(st, long_prompt, &b);
  const Sequence* prefilling = st.slot(0)->prompt_size() == kLong ? st.slot(0) : st.slot(1);
  ASSERT_EQ(prefilling->prompt_size(), kLong);
  const Sequence* other = prefilling == st.slot(0) ? st.slot(1) : st.slot(0);
  std::vector<int64_t> chunks;
  int64_t over = 0;  // steps past the budget: a single grid chunk each
  while (prefilling->phase() == Phase::kPrefill) {
    const int64_t start = prefilling->prefilled(), decode_pos = other->state()->pos();
    const size_t tokens = a.out.samples.size();
    StepOutput out;
    st.step(&out);
    collect(out, {&a, &b});
    ASSERT_TRUE(a.out.finish.empty()) << "the decoding request ended first: make it longer";
    EXPECT_EQ(a.out.samples.size(), tokens + 1) << "the decoding request waited at " << start;
    const int64_t end = prefilling->phase() == Phase::kPrefill ? prefilling->prefilled() : kLong;
    const int64_t n = end - start;
    ASSERT_GT(n, 0) << "no progress at " << start;
    EXPECT_EQ(start % kGrid, 0) << start;
    EXPECT_TRUE(end % kGrid == 0 || end == kLong) << end;
    chunks.push_back(n);
    const double decode = rows(decode_pos, 1), work = decode + rows(start, n);
    EXPECT_NEAR(out.work_flops, work, 1e-9 * work) << start;
    if (work > budget) {
      ++over;
      EXPECT_LE(n, kGrid) << "a chunk of more than one grid piece past the budget at " << start;
    }
    // The longest that fits: one grid piece more would not, in work or in rows.
    EXPECT_LE(1 + n, kSteps);
    if (end < kLong && work <= budget) {
      const int64_t longer = std::min(kLong, (end / kGrid + 1) * kGrid) - start;
      EXPECT_TRUE(decode + rows(start, longer) > budget || 1 + longer > kSteps)
          << "the chunk at " << start << " could be longer";
    }
  }
  // At the start the step's rows less the decode row's (three grid pieces), deep in the prompt
  // one piece.
  EXPECT_EQ(chunks.front(), kSteps - kGrid);
  EXPECT_LE(chunks.back(), kGrid);
  EXPECT_LE(chunks[chunks.size() - 2], kGrid);
  std::printf("  %zu steps for %lld prompt tokens (chunks %lld .. %lld), %lld past the budget by their one grid piece\n",
              chunks.size(), (long long)kLong, (long long)chunks.front(), (long long)chunks.back(), (long long)over);

  while (st.running()) {
    StepOutput out;
    st.step(&out);
    collect(out, {&a, &b});
  }
  ASSERT_EQ(a.out.finish, "length") << a.out.error;
  ASSERT_EQ(b.out.finish, "length") << b.out.error;
  Engine alone(*model_, EngineOptions{1, 4096, 8, kSteps});
  testing::expect_same_bits(a.out, testing::run(alone, decoding));
}

}  // namespace step_budget
}  // namespace
}  // namespace qwen35::runtime
