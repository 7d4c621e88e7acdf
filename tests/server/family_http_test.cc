// The three equalities over HTTP on a Qwen3 and a Qwen3-MoE checkpoint (`qwen35 synth --preset
// qwen3-tiny` and `qwen3-tiny-moe`: full attention throughout, no recurrent state, Qwen3's chat
// template), exact (HF bf16) and fast (MLX 4-bit):
//   - concurrent == solo: 8 completions of different lengths, alone and all at once;
//   - resumed == fresh: a 4-turn chat on servers with and without the prefix cache (whose
//     entries are KV blocks alone), later turns reporting cached tokens;
//   - drafted == plain: --spec lookup against a plain server, greedy and seeded.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "server_process.h"
#include "test_util.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

// (preset, fast): fast is the MLX 4-bit export with --fast; else the HF bf16 checkpoint, exact.
class FamilyHttp : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  bool fast() const { return std::get<1>(GetParam()); }
  void SetUp() override {
    auto r = testing::run_qwen35("synth --preset " + std::get<0>(GetParam()) + " --quiet" +
                                 std::string(fast() ? " --format mlx --bits 4" : "") + " --out " + dir_.file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  std::string model() const { return dir_.file("m"); }
  std::vector<std::string> flags(std::vector<std::string> extra) const {
    extra.insert(extra.end(), {"--parallel", "8", "--ctx", "1024", "--step-tokens", "96"});
    if (fast()) extra.push_back("--fast");
    return extra;
  }
  TempDir dir_;
};

Json completion(int i, bool seeded) {
  const int lengths[8] = {5, 70, 130, 1, 200, 64, 17, 129};
  std::vector<int> prompt;
  for (int k = 0; k < lengths[i]; ++k) prompt.push_back((k * 37 + i * 101 + 11) % 1000);
  Json r = {{"prompt", prompt}, {"max_tokens", 8 + 3 * i}, {"ignore_eos", true}, {"logprobs", 2},
            {"return_token_ids", true}, {"temperature", seeded ? 0.9 : 0.0}};
  if (seeded) r["seed"] = 100 + i;
  return r;
}

TEST_P(FamilyHttp, ConcurrentEqualsSolo) {
  ServerProcess srv(model(), flags({}));
  ASSERT_TRUE(srv.ready()) << srv.log();
  for (bool seeded : {false, true}) {
    std::vector<Json> solo, together(8);
    for (int i = 0; i < 8; ++i) {
      auto [st, r] = srv.post("/v1/completions", completion(i, seeded));
      ASSERT_EQ(st, 200) << r;
      solo.push_back(r["choices"]);
    }
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i)
      threads.emplace_back([&, i] { together[size_t(i)] = srv.post("/v1/completions", completion(i, seeded)).second["choices"]; });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(together[i].dump(), solo[i].dump()) << "request " << i;
  }
  EXPECT_EQ(srv.metric("qwen35_slots_used"), 0);
}

TEST_P(FamilyHttp, PrefixCacheResumedEqualsFresh) {
  ServerProcess off(model(), flags({"--no-prefix-cache"}));
  ServerProcess on(model(), flags({"--cache-interval", "64"}));
  ASSERT_TRUE(off.ready() && on.ready()) << off.log() << on.log();
  Json history = Json::array();
  history.push_back({{"role", "system"}, {"content", std::string(300, 'x') + " a long system prompt."}});
  int64_t cached_total = 0;
  for (int turn = 0; turn < 4; ++turn) {
    history.push_back({{"role", "user"}, {"content", "Question number " + std::to_string(turn) + ": and then?"}});
    Json req = {{"messages", history}, {"max_tokens", 24}, {"temperature", 0.8}, {"seed", turn},
                {"logprobs", true}, {"top_logprobs", 2}};
    auto [s_off, r_off] = off.post("/v1/chat/completions", req);
    auto [s_on, r_on] = on.post("/v1/chat/completions", req);
    ASSERT_EQ(s_off, 200) << r_off;
    ASSERT_EQ(s_on, 200) << r_on;
    EXPECT_EQ(r_on["choices"][0].dump(), r_off["choices"][0].dump()) << "turn " << turn;
    if (turn > 0) cached_total += r_on["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
    history.push_back({{"role", "assistant"}, {"content", r_off["choices"][0]["message"].value("content", "")}});
  }
  EXPECT_GT(cached_total, 0) << "no turn resumed from the cache";
  EXPECT_GT(on.metric("qwen35_prefix_cache_hits_total"), 0);
  EXPECT_EQ(on.metric("qwen35_kv_blocks_used"), on.metric("qwen35_prefix_cache_blocks"));
}

TEST_P(FamilyHttp, LookupDraftedEqualsPlain) {
  ServerProcess plain(model(), flags({}));
  ServerProcess spec(model(), flags({"--spec", "lookup", "--draft-tokens", "3"}));
  ASSERT_TRUE(plain.ready() && spec.ready()) << plain.log() << spec.log();
  for (bool seeded : {false, true})
    for (int i : {2, 4, 7}) {
      Json req = completion(i, seeded);
      auto [a, want] = plain.post("/v1/completions", req);
      auto [b, got] = spec.post("/v1/completions", req);
      ASSERT_EQ(a, 200) << want;
      ASSERT_EQ(b, 200) << got;
      EXPECT_EQ(got["choices"].dump(), want["choices"].dump()) << "request " << i;
      // With a prediction of the plain answer's text (one character changed): drafts that are
      // accepted and some that are not, the same answer.
      std::string pred = want["choices"][0]["text"];
      if (pred.size() > 4) pred[pred.size() / 2] = pred[pred.size() / 2] == 'q' ? 'z' : 'q';
      req["prediction"] = {{"type", "content"}, {"content", pred}};
      auto [c, with_pred] = spec.post("/v1/completions", req);
      ASSERT_EQ(c, 200) << with_pred;
      EXPECT_EQ(with_pred["choices"].dump(), want["choices"].dump()) << "request " << i << " with a prediction";
    }
  EXPECT_GT(spec.metric("qwen35_spec_drafted_tokens_total"), 0);
  EXPECT_GT(spec.metric("qwen35_spec_accepted_tokens_total"), 0);
}

INSTANTIATE_TEST_SUITE_P(ExactAndFast, FamilyHttp,
                         ::testing::Combine(::testing::Values("qwen3-tiny", "qwen3-tiny-moe"), ::testing::Bool()),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) == "qwen3-tiny" ? "qwen3" : "qwen3_moe";
                           return name + (std::get<1>(info.param) ? "_fast" : "_exact");
                         });

}  // namespace
}  // namespace qwen35
