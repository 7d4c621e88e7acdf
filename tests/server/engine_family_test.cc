// The engine's equalities on the other families' checkpoints (the Qwen3 and Qwen3-MoE fixtures:
// full attention throughout, no recurrent state; the Qwen3-Next fixture: hybrid, its fused
// DeltaNet projections regrouped at load): concurrent == solo bit for bit, and resumed == fresh
// from the prefix cache, in memory and across a restart through the cache directory. For pure
// attention a cache entry is KV blocks alone (a snapshot of zero bytes). Drafted == plain is in
// spec_test.cc (its qwen3 and qwen3-next parameters).
#include <gtest/gtest.h>

#include <cstring>

#include "core/thread_pool.h"
#include "engine_drain.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

using Out = testing::EngineOut;
using testing::drain;

class FamilyEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto w = model::load_weights(testing::fixture_models_dir() + "/" + GetParam() + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<model::Model>(std::move(*w), kernels::cpu_ops(), &pool_);
    pure_attention_ = model_->config().n_linear_layers() == 0;
  }
  std::vector<int32_t> prompt(int64_t n, int salt) const {
    std::vector<int32_t> p;
    for (int64_t k = 0; k < n; ++k) p.push_back(int32_t((k * 31 + salt * 977 + 5) % model_->config().vocab));
    return p;
  }
  GenerationRequest request(std::vector<int32_t> p, int max_tokens, bool seeded, int seed) const {
    GenerationRequest g;
    g.prompt = std::move(p);
    g.max_tokens = max_tokens;
    g.sampling.temperature = seeded ? 0.9f : 0.0f;
    g.sampling.seed = uint64_t(seed);
    g.sampling.logprobs = 2;
    return g;
  }
  static Out run(Engine& e, const GenerationRequest& g) {
    SubmitError err;
    std::string msg;
    auto s = e.submit(g, &err, &msg);
    EXPECT_TRUE(s) << msg;
    return s ? drain(*s) : Out{};
  }
  static void expect_same(const Out& a, const Out& b, const std::string& what) {
    ASSERT_EQ(a.samples.size(), b.samples.size()) << what;
    for (size_t k = 0; k < a.samples.size(); ++k) {
      EXPECT_EQ(a.samples[k].token, b.samples[k].token) << what << "/" << k;
      EXPECT_EQ(std::memcmp(&a.samples[k].logprob, &b.samples[k].logprob, 4), 0) << what << "/" << k;
    }
    EXPECT_EQ(a.finish, b.finish) << what;
  }

  core::ThreadPool pool_{2};
  std::unique_ptr<model::Model> model_;
  bool pure_attention_ = true;
};

TEST_P(FamilyEngineTest, ConcurrentEqualsSolo) {
  const int lengths[6] = {3, 65, 150, 64, 1, 100};
  for (bool seeded : {false, true}) {
    Engine engine(*model_, EngineOptions{6, 256, 16, 64});
    std::vector<GenerationRequest> reqs;
    std::vector<Out> solo;
    for (int i = 0; i < 6; ++i) {
      reqs.push_back(request(prompt(lengths[i], i), 6 + 3 * i, seeded, 42 + i));
      solo.push_back(run(engine, reqs.back()));
      EXPECT_EQ(solo.back().finish, "length");
    }
    SubmitError err;
    std::string msg;
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (int i = 0; i < 6; ++i) {
      streams.push_back(engine.submit(reqs[size_t(i)], &err, &msg));
      ASSERT_TRUE(streams.back()) << msg;
    }
    for (int i = 0; i < 6; ++i) expect_same(drain(*streams[size_t(i)]), solo[size_t(i)], "request " + std::to_string(i));
  }
}

// Prompts that extend and branch off a cached prefix resume from it (the positions reused are
// reported) with the bits of a fresh run; the cache holds KV blocks and nothing else.
TEST_P(FamilyEngineTest, PrefixCacheResumedEqualsFreshWithKvOnlySnapshots) {
  const std::vector<int32_t> base = prompt(300, 1);
  std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(base.begin(), base.begin() + 200), base};
  std::vector<int32_t> branch(base.begin(), base.begin() + 130);
  for (int32_t t : prompt(70, 2)) branch.push_back(t);
  prompts.push_back(branch);
  prompts.push_back(base);
  const size_t block_bytes = model_->new_pool(1, false)->block_bytes();
  for (bool seeded : {false, true}) {
    auto go = [&](int64_t cache_bytes, std::vector<int64_t>* reused, PrefixCacheStats* stats) {
      EngineOptions o{2, 512, 8, 64};
      o.cache_bytes = cache_bytes;
      o.cache_interval = 128;
      Engine engine(*model_, o);
      std::vector<Out> outs;
      for (const auto& p : prompts) {
        SubmitError err;
        std::string msg;
        auto s = engine.submit(request(p, 12, seeded, 7), &err, &msg);
        EXPECT_TRUE(s) << msg;
        if (!s) return outs;
        outs.push_back(drain(*s));
        if (reused) reused->push_back(s->timing().prompt_reused);
      }
      if (stats) *stats = engine.stats().cache;
      return outs;
    };
    std::vector<int64_t> reused;
    PrefixCacheStats st;
    const auto fresh = go(0, nullptr, nullptr);
    const auto cached = go(int64_t(64) << 20, &reused, &st);
    ASSERT_EQ(fresh.size(), cached.size());
    for (size_t i = 0; i < fresh.size(); ++i) expect_same(cached[i], fresh[i], "prompt " + std::to_string(i));
    EXPECT_EQ(reused, (std::vector<int64_t>{0, 192, 128, 256}));
    EXPECT_GT(st.hits, 0);
    EXPECT_GT(st.snapshots, 0);
    if (pure_attention_)
      EXPECT_EQ(st.bytes, st.blocks * int64_t(block_bytes)) << "a snapshot holds more than its KV blocks";
    else
      EXPECT_GT(st.bytes, st.blocks * int64_t(block_bytes)) << "a hybrid snapshot holds its recurrent state";
  }
}

// The cache on disk (serve --cache-dir): a pure-attention snapshot (KV rows, no recurrent state)
// is saved at shutdown, loaded by the next engine, and resumes to the bits of a fresh run.
TEST_P(FamilyEngineTest, SavedKvOnlySnapshotsResumeAfterRestart) {
  testing::TempDir d;
  const std::vector<int32_t> long_prompt = prompt(400, 3);
  EngineOptions o{1, 1024, 8, 64};
  const Out fresh = [&] {
    Engine e(*model_, o);
    return run(e, request(long_prompt, 8, false, 1));
  }();
  o.cache_bytes = int64_t(64) << 20;
  o.cache_dir = d.file("cache");
  o.cache_fingerprint = 7;
  {
    Engine e(*model_, o);
    run(e, request(std::vector<int32_t>(long_prompt.begin(), long_prompt.begin() + 300), 8, false, 1));
    e.shutdown(false);
    EXPECT_NE(e.cache_log().back().find("saved 1 "), std::string::npos) << e.cache_log().back();
  }
  Engine e(*model_, o);
  EXPECT_NE(e.cache_log().back().find("loaded 1 "), std::string::npos) << e.cache_log().back();
  SubmitError err;
  std::string msg;
  auto s = e.submit(request(long_prompt, 8, false, 1), &err, &msg);
  ASSERT_TRUE(s) << msg;
  expect_same(drain(*s), fresh, "after restart");
  EXPECT_EQ(s->timing().prompt_reused, 256);
}

INSTANTIATE_TEST_SUITE_P(Qwen3, FamilyEngineTest,
                         ::testing::Values("qwen3_dense_tied_bf16", "qwen3_moe_e8_top2", "qwen3_next_e8_top2"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace qwen35::runtime
