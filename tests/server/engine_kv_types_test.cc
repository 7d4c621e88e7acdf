// The engine over KV caches of every type (--kv-type; kernels/kv_format.h) on the bundled model,
// whose MTP head and prompt lookup draft well: for each type, bit for bit, concurrent == solo
// (the requests batched together), drafted == plain (lookup and the MTP head, whose own KV layer
// has the pool's type), resumed == fresh (the prefix cache, forks of n choices, and the same
// snapshots written to --cache-dir and read by a new engine), and a cache directory of another
// type is skipped with a warning naming both types.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine_drain.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

using kernels::KvType;
using kernels::KvTypes;
using Out = testing::EngineOut;

class EngineKvTypesTest : public ::testing::TestWithParam<KvTypes> {
 protected:
  static void SetUpTestSuite() {
    auto w = model::load_weights(std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv",
                                 core::LoadMode::kMmap);
    ASSERT_TRUE(w.ok()) << w.message();
    pool_ = new core::ThreadPool(2);
    model_ = new model::Model(std::move(*w), kernels::cpu_ops(), pool_);
    ASSERT_TRUE(model_->enable_mtp().ok());
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
  }
  void SetUp() override { ASSERT_TRUE(model_->set_kv_types(GetParam()).ok()); }
  void TearDown() override { ASSERT_TRUE(model_->set_kv_types({}).ok()); }

  // A prompt that repeats a phrase (lookup drafts it), `n` tokens; seeded or greedy.
  static GenerationRequest request(int64_t n, int salt, bool seeded) {
    GenerationRequest g;
    for (int64_t k = 0; k < n; ++k) g.prompt.push_back(int32_t((k % 23 * 131 + salt * 977 + 7) % 4000));
    g.max_tokens = 24;
    g.sampling.temperature = seeded ? 0.9f : 0.0f;
    g.sampling.seed = 100 + uint64_t(salt);
    g.sampling.logprobs = 2;
    return g;
  }
  static EngineOptions options(SpecMethod m = SpecMethod::kOff) {
    EngineOptions o;
    o.parallel = 3;
    o.ctx = 512;
    o.step_tokens = 64;
    o.spec.method = m;
    o.spec.draft_tokens = 3;
    return o;
  }
  static void expect_same(const Out& got, const Out& want, const std::string& what) {
    EXPECT_EQ(got.finish, want.finish) << what << " " << got.error;
    ASSERT_EQ(got.samples.size(), want.samples.size()) << what;
    for (size_t k = 0; k < got.samples.size(); ++k) {
      EXPECT_EQ(got.samples[k].token, want.samples[k].token) << what << " token " << k;
      EXPECT_EQ(std::memcmp(&got.samples[k].logprob, &want.samples[k].logprob, 4), 0) << what;
      ASSERT_EQ(got.samples[k].top.size(), want.samples[k].top.size()) << what;
      for (size_t j = 0; j < got.samples[k].top.size(); ++j)
        EXPECT_EQ(std::memcmp(&got.samples[k].top[j].logprob, &want.samples[k].top[j].logprob, 4), 0)
            << what;
    }
  }

  static inline core::ThreadPool* pool_ = nullptr;
  static inline model::Model* model_ = nullptr;
};

TEST_P(EngineKvTypesTest, ConcurrentAndDraftedEqualSolo) {
  std::vector<GenerationRequest> reqs = {request(3, 1, false), request(150, 2, true),
                                         request(70, 3, false)};
  Engine plain(*model_, options());
  std::vector<Out> solo;
  for (const auto& g : reqs) solo.push_back(testing::run(plain, g));
  // Together: their rows share each step's batch.
  SubmitError err;
  std::string msg;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& g : reqs) streams.push_back(plain.submit(g, &err, &msg));
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_TRUE(streams[i]) << msg;
    expect_same(testing::drain(*streams[i]), solo[i], "concurrent " + std::to_string(i));
  }
  {  // The pool is of the type: the f32 cache gives other logprobs (the same tokens, mostly).
    ASSERT_TRUE(model_->set_kv_types({}).ok());
    Engine exact(*model_, options());
    const Out f32 = testing::run(exact, reqs[1]);
    ASSERT_TRUE(model_->set_kv_types(GetParam()).ok());
    bool differs = f32.samples.size() != solo[1].samples.size();
    for (size_t k = 0; !differs && k < f32.samples.size(); ++k)
      differs = std::memcmp(&f32.samples[k].logprob, &solo[1].samples[k].logprob, 4) != 0;
    EXPECT_TRUE(differs) << "the same bits as the f32 cache";
  }
  for (SpecMethod m : {SpecMethod::kLookup, SpecMethod::kMtp}) {
    Engine spec(*model_, options(m));
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(testing::run(spec, reqs[i]), solo[i],
                  std::string(m == SpecMethod::kMtp ? "mtp " : "lookup ") + std::to_string(i));
    EXPECT_GT(spec.stats().accepted_tokens, 0) << "the drafts were never accepted: nothing tested";
  }
}

TEST_P(EngineKvTypesTest, ResumedEqualsFreshAndCacheDirRestart) {
  const GenerationRequest first = request(200, 4, false);  // a snapshot at 192
  GenerationRequest longer = request(290, 4, true);        // shares its first 200 tokens
  // The choices of one request: the prompt computed once, the others forked from it (its whole
  // blocks shared, the partial one copied byte for byte).
  std::vector<GenerationRequest> choices = {request(150, 5, true), request(150, 5, true)};
  choices[1].sampling.seed = 7;
  Out fresh;
  std::vector<Out> alone;
  {
    Engine plain(*model_, options());
    fresh = testing::run(plain, longer);
    for (const auto& g : choices) alone.push_back(testing::run(plain, g));
  }
  testing::TempDir dir;
  EngineOptions o = options();
  o.cache_bytes = int64_t(16) << 20;
  o.cache_interval = 128;
  o.cache_dir = dir.file("cache");
  o.cache_fingerprint = 0x6b76;
  {
    Engine cached(*model_, o);
    SubmitError err;
    std::string msg;
    auto group = cached.submit_group(choices, &err, &msg);
    ASSERT_EQ(group.size(), 2u) << msg;
    for (size_t i = 0; i < 2; ++i)
      expect_same(testing::drain(*group[i]), alone[i], "fork " + std::to_string(i));
    EXPECT_GT(group[1]->timing().prompt_reused, 0) << "no fork";
  }
  {
    Engine cached(*model_, o);
    testing::run(cached, first);
    SubmitError err;
    std::string msg;
    auto s = cached.submit(longer, &err, &msg);
    ASSERT_TRUE(s) << msg;
    expect_same(testing::drain(*s), fresh, "resumed");
    EXPECT_EQ(s->timing().prompt_reused, 192);
  }  // saved at shutdown
  {
    Engine restarted(*model_, o);
    SubmitError err;
    std::string msg;
    auto s = restarted.submit(longer, &err, &msg);
    ASSERT_TRUE(s) << msg;
    expect_same(testing::drain(*s), fresh, "resumed after a restart");
    EXPECT_EQ(s->timing().prompt_reused, 256);
  }
  // A pool of another type finds the files and skips each, naming both types.
  const KvTypes other = GetParam() == KvTypes{KvType::kQ8_0, KvType::kQ8_0}
                            ? KvTypes{KvType::kTurbo3, KvType::kTurbo3}
                            : KvTypes{KvType::kQ8_0, KvType::kQ8_0};
  ASSERT_TRUE(model_->set_kv_types(other).ok());
  Engine foreign(*model_, o);
  const auto log = foreign.cache_log();
  bool warned = false;
  for (const auto& line : log) warned = warned || line.find("KV cache of type") != std::string::npos;
  EXPECT_TRUE(warned) << (log.empty() ? "no log" : log.front());
  EXPECT_EQ(foreign.stats().cache.snapshots, 0);
}

std::string name_of(const ::testing::TestParamInfo<KvTypes>& info) {
  std::string s = kernels::kv_types_name(info.param);
  for (char& c : s)
    if (c == ',') c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Types, EngineKvTypesTest,
    ::testing::Values(KvTypes{KvType::kBF16, KvType::kBF16}, KvTypes{KvType::kQ8_0, KvType::kQ8_0},
                      KvTypes{KvType::kQ4_0, KvType::kQ4_0},
                      KvTypes{KvType::kTurbo4, KvType::kTurbo4},
                      KvTypes{KvType::kTurbo3, KvType::kTurbo3},
                      KvTypes{KvType::kQ8_0, KvType::kTurbo4}, KvTypes{KvType::kBF16, KvType::kQ4_0}),
    name_of);

}  // namespace
}  // namespace qwen35::runtime
