// Speculative decoding in the engine (issue 16), *drafted == plain*: with prompt lookup and
// with the MTP head, at K = 1..4 drafted tokens, greedy and seeded, exact and fast, dense and
// MoE, every request gets the tokens and logprobs of plain decoding bit for bit: prompts whose
// continuation the drafter drafts well, prompts where its drafts are all or mostly rejected
// (the MTP heads of random synthetic checkpoints), requests that end on an end-of-sequence id or
// max_tokens inside a drafted block, and a batch mixing speculative and plain requests
// (concurrent == solo still holds).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/ops.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "engine_drain.h"
#include "test_util.h"

namespace qwen35::runtime {
namespace {

using testing::TempDir;

using Out = testing::EngineOut;
using testing::drain;

void expect_same(const Out& got, const Out& want, const std::string& what) {
  EXPECT_EQ(got.finish, want.finish) << what << " " << got.error;
  EXPECT_EQ(got.error, want.error) << what;
  ASSERT_EQ(got.samples.size(), want.samples.size()) << what;
  for (size_t k = 0; k < got.samples.size(); ++k) {
    EXPECT_EQ(got.samples[k].token, want.samples[k].token) << what << " token " << k;
    EXPECT_EQ(std::memcmp(&got.samples[k].logprob, &want.samples[k].logprob, 4), 0) << what << " " << k;
    ASSERT_EQ(got.samples[k].top.size(), want.samples[k].top.size()) << what;
    for (size_t j = 0; j < got.samples[k].top.size(); ++j) {
      EXPECT_EQ(got.samples[k].top[j].token, want.samples[k].top[j].token) << what;
      EXPECT_EQ(std::memcmp(&got.samples[k].top[j].logprob, &want.samples[k].top[j].logprob, 4), 0)
          << what;
    }
  }
}

// (model, drafter). Models: "tiny", "tiny-moe" (synthetic HF, with MTP heads), "tiny-mlx"
// (synthetic MLX 4-bit with an MTP head, fast), "kjv" (the bundled model), "kjv-4bit" (its MLX
// export, fast, no MTP head), "qwen3" and "qwen3-moe" (the Qwen3 family fixtures, no MTP head),
// "qwen3-next" (the Qwen3-Next fixture, no MTP head), "qwen3-next-tiny" (synthetic HF Qwen3-Next
// with its MTP head: a MoE layer under mtp.*).
class SpecTest : public ::testing::TestWithParam<std::tuple<std::string, SpecMethod>> {
 protected:
  void SetUp() override {
    const std::string which = std::get<0>(GetParam());
    method_ = std::get<1>(GetParam());
    std::string dir = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
    if (which == "kjv-4bit") dir += "/mlx-4bit";
    if (which == "qwen3" || which == "qwen3-moe")  // the Qwen3 fixtures: full attention throughout
      dir = testing::fixture_models_dir() + (which == "qwen3" ? "/qwen3_dense_tied_bf16" : "/qwen3_moe_e8_top2") + "/ckpt";
    if (which == "qwen3-next") dir = testing::fixture_models_dir() + "/qwen3_next_e8_top2/ckpt";
    if (which.rfind("tiny", 0) == 0 || which == "qwen3-next-tiny") {
      const std::string preset = which == "tiny-mlx" ? "tiny" : which;
      const std::string fmt = which == "tiny-mlx" ? " --format mlx --mtp on" : "";
      auto r = testing::run_qwen35("synth --preset " + preset + fmt + " --quiet --out " + tmp_.file("m"));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      dir = tmp_.file("m");
    }
    auto w = model::load_weights(dir, core::LoadMode::kMmap);
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<model::Model>(std::move(*w), kernels::cpu_ops(), &pool_);
    model_->set_fast_activations(which == "kjv-4bit" || which == "tiny-mlx");
    trained_ = which.rfind("kjv", 0) == 0;
  }
  // A prompt that repeats a phrase (lookup drafts its continuation), or one that never does.
  GenerationRequest request(bool repetitive, bool seeded, int salt) const {
    GenerationRequest g;
    const int64_t vocab = model_->config().vocab;
    for (int k = 0; k < 90; ++k) {
      const int i = repetitive ? k % 18 : k;
      g.prompt.push_back(int32_t((i * 131 + salt * 977 + 7) % (vocab - 1)));
    }
    g.max_tokens = 40;
    g.sampling.temperature = seeded ? 0.9f : 0.0f;
    g.sampling.seed = 1000 + uint64_t(salt);
    g.sampling.logprobs = 2;
    return g;
  }
  Out run(Engine& e, GenerationRequest g) {
    SubmitError err;
    std::string msg;
    auto s = e.submit(std::move(g), &err, &msg);
    EXPECT_TRUE(s) << msg;
    return s ? drain(*s) : Out{};
  }
  static EngineOptions options(SpecMethod m, int k) {
    EngineOptions o;
    o.parallel = 4;
    o.ctx = 512;
    o.spec.method = m;
    o.spec.draft_tokens = k;
    return o;
  }
  TempDir tmp_;
  core::ThreadPool pool_{2};
  std::unique_ptr<model::Model> model_;
  SpecMethod method_ = SpecMethod::kLookup;
  bool trained_ = false;  // the bundled model: its MTP head drafts well
};

// Each request also runs with a prediction (GenerationRequest::prediction) of its plain output
// with some tokens wrong: lookup drafts from it even where the model never repeats itself
// (the random synthetic checkpoints), and its drafts fail at each wrong token. The MTP head
// takes no prediction (those requests run with lookup only); on random checkpoints nearly all
// of its drafts are rejected.
TEST_P(SpecTest, DraftedEqualsPlain) {
  Engine plain(*model_, options(SpecMethod::kOff, 1));
  std::vector<GenerationRequest> reqs;
  for (bool seeded : {false, true})
    for (bool repetitive : {true, false}) reqs.push_back(request(repetitive, seeded, int(reqs.size())));
  std::vector<Out> want;
  for (const auto& g : reqs) want.push_back(run(plain, g));
  const int64_t vocab = model_->config().vocab;
  for (size_t i = 0, n = method_ == SpecMethod::kLookup ? reqs.size() : 0; i < n; ++i) {
    GenerationRequest g = reqs[i];
    const std::vector<size_t> wrong = {5, 9, 16, 22, 23, 30, 37};  // no period a K aligns to
    for (size_t k = 0; k < want[i].samples.size(); ++k) {
      const int32_t t = want[i].samples[k].token;
      const bool w = std::find(wrong.begin(), wrong.end(), k) != wrong.end();
      g.prediction.push_back(w ? int32_t((t + 1) % vocab) : t);
    }
    reqs.push_back(std::move(g));
    want.push_back(want[i]);
  }
  for (int k = 1; k <= 4; ++k) {
    Engine spec(*model_, options(method_, k));
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_same(run(spec, reqs[i]), want[i], "K=" + std::to_string(k) + " request " + std::to_string(i));
    const EngineStats st = spec.stats();
    EXPECT_GT(st.drafted_tokens, 0) << "K=" << k;
    if (method_ == SpecMethod::kLookup || trained_) {
      EXPECT_GT(st.accepted_tokens, 0) << "K=" << k;
    }
    EXPECT_LT(st.accepted_tokens, st.drafted_tokens) << "K=" << k << ": no draft was rejected";
    EXPECT_EQ(st.kv_blocks_used, 0);
  }
}

// An end-of-sequence id or max_tokens that falls inside a drafted block ends the request where
// plain decoding ends it.
TEST_P(SpecTest, EndsInsideADraftedBlockWherePlainEnds) {
  Engine plain(*model_, options(SpecMethod::kOff, 1));
  Engine spec(*model_, options(method_, 4));
  for (bool seeded : {false, true}) {
    GenerationRequest g = request(true, seeded, 7);
    const Out full = run(plain, g);
    ASSERT_GE(full.samples.size(), 12u);
    // The first token that appears only from position 5 on becomes the end-of-sequence id.
    for (size_t at = 5; at < full.samples.size(); ++at) {
      const int32_t t = full.samples[at].token;
      bool earlier = false;
      for (size_t j = 0; j < at; ++j) earlier |= full.samples[j].token == t;
      if (earlier) continue;
      GenerationRequest e = g;
      e.eos_ids = {t};
      const Out want = run(plain, e);
      EXPECT_EQ(want.finish, "stop");
      EXPECT_EQ(want.samples.size(), at);
      expect_same(run(spec, e), want, "eos at " + std::to_string(at));
      break;
    }
    for (int64_t m : {1, 2, 5, 11}) {
      GenerationRequest l = g;
      l.max_tokens = m;
      expect_same(run(spec, l), run(plain, l), "max_tokens " + std::to_string(m));
    }
  }
}

// Speculative and plain requests in one batch, and requests overriding the engine's method.
TEST_P(SpecTest, AMixedBatchEqualsSolo) {
  Engine plain(*model_, options(SpecMethod::kOff, 1));
  Engine spec(*model_, options(method_, 3));
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    GenerationRequest g = request(i % 3 != 2, i % 2 == 1, 20 + i);
    g.max_tokens = 16 + 5 * i;
    if (i == 1) g.spec = SpecOptions{SpecMethod::kOff, 1};
    if (i == 4) g.spec = SpecOptions{SpecMethod::kLookup, 1};
    if (i == 5) g.spec = SpecOptions{method_, 2};
    reqs.push_back(std::move(g));
  }
  std::vector<Out> want;
  for (GenerationRequest g : reqs) {  // plain decoding: no request's own drafter
    g.spec.reset();
    want.push_back(run(plain, g));
  }
  SubmitError err;
  std::string msg;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& g : reqs) {
    streams.push_back(spec.submit(g, &err, &msg));
    ASSERT_TRUE(streams.back()) << msg;
  }
  for (size_t i = 0; i < reqs.size(); ++i)
    expect_same(drain(*streams[i]), want[i], "request " + std::to_string(i));
}

// A request resumed from the prefix cache drafts what the same request computed fresh drafts:
// the snapshot carries the MTP head's cache (its layer of the shared KV blocks and the trunk's
// last hidden row), so the drafts, and with them the acceptance, are the same.
TEST_P(SpecTest, ResumedFromThePrefixCacheDraftsAsFresh) {
  if (method_ != SpecMethod::kMtp) GTEST_SKIP() << "lookup drafts from tokens alone";
  EngineOptions o = options(method_, 3);
  o.cache_bytes = 64 << 20;
  Engine spec(*model_, o);
  Engine plain(*model_, options(SpecMethod::kOff, 1));
  GenerationRequest g = request(false, true, 3);
  for (int k = 0; k < 80; ++k) g.prompt.push_back(g.prompt[size_t(k)]);  // 170 tokens
  const Out want = run(plain, g);
  std::vector<std::pair<int64_t, int64_t>> counts;  // (drafted, accepted) of each run
  for (int i = 0; i < 2; ++i) {
    const EngineStats before = spec.stats();
    expect_same(run(spec, g), want, "run " + std::to_string(i));
    const EngineStats after = spec.stats();
    counts.emplace_back(after.drafted_tokens - before.drafted_tokens,
                        after.accepted_tokens - before.accepted_tokens);
  }
  EXPECT_EQ(spec.stats().cache.hits, 1);
  EXPECT_GT(counts[0].first, 0);
  EXPECT_EQ(counts[1], counts[0]);
}

TEST_P(SpecTest, BadSpeculativeRequestsAreRefused) {
  Engine spec(*model_, options(method_, 3));
  SubmitError err;
  std::string msg;
  GenerationRequest g = request(true, false, 1);
  g.spec = SpecOptions{method_, 16};
  EXPECT_FALSE(spec.submit(g, &err, &msg));
  EXPECT_EQ(err, SubmitError::kInvalid);
  EXPECT_NE(msg.find("draft_tokens must be in [1, 15]"), std::string::npos) << msg;
  g.spec = SpecOptions{method_, 0};
  EXPECT_FALSE(spec.submit(g, &err, &msg));
  if (method_ == SpecMethod::kLookup) {
    // The MTP head needs its cache in every state: an engine without it refuses MTP requests.
    g.spec = SpecOptions{SpecMethod::kMtp, 2};
    EXPECT_FALSE(spec.submit(g, &err, &msg));
    EXPECT_NE(msg.find(model_->weights().mtp ? "--spec mtp" : "no usable MTP head"), std::string::npos) << msg;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, SpecTest,
    ::testing::Values(std::tuple{"tiny", SpecMethod::kLookup}, std::tuple{"tiny-moe", SpecMethod::kLookup},
                      std::tuple{"kjv", SpecMethod::kLookup}, std::tuple{"kjv-4bit", SpecMethod::kLookup},
                      std::tuple{"qwen3", SpecMethod::kLookup}, std::tuple{"qwen3-moe", SpecMethod::kLookup},
                      std::tuple{"qwen3-next", SpecMethod::kLookup},
                      std::tuple{"tiny", SpecMethod::kMtp}, std::tuple{"tiny-moe", SpecMethod::kMtp},
                      std::tuple{"tiny-mlx", SpecMethod::kMtp}, std::tuple{"kjv", SpecMethod::kMtp},
                      std::tuple{"qwen3-next-tiny", SpecMethod::kMtp}),
    [](const auto& info) {
      std::string s = std::get<0>(info.param) + "_" + spec_method_name(std::get<1>(info.param));
      for (char& c : s)
        if (c == '-') c = '_';
      return s;
    });

}  // namespace
}  // namespace qwen35::runtime
