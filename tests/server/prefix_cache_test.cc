// *resumed == fresh* over HTTP (issue 15): a 6-turn chat, thinking on and off, exact and fast,
// gets the same bits (text, reasoning, logprobs) from a server with the prefix cache as from
// one without, and from one whose tiny cache keeps evicting; later turns report cached prompt
// tokens (usage.prompt_tokens_details.cached_tokens), and afterwards the only KV blocks held are
// the cache's own.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;

// (thinking, fast)
class PrefixCacheChat : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(PrefixCacheChat, SixTurnsResumedEqualsFresh) {
  const auto [thinking, fast] = GetParam();
  std::string model = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  if (fast) model += "/mlx-4bit";
  std::vector<std::string> common = {"--parallel", "2", "--ctx", "2048"};
  if (fast) common.push_back("--fast");
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  ServerProcess off(model, with({"--no-prefix-cache"}));
  ServerProcess on(model, with({"--cache-interval", "128"}));
  // A cache that must evict: fast mode's q8_0 KV blocks are a quarter of f32's.
  ServerProcess tiny(model, with({"--cache-mb", fast ? "0.3" : "0.6", "--cache-interval", "64"}));
  ASSERT_TRUE(off.ready() && on.ready() && tiny.ready()) << off.log() << on.log() << tiny.log();
  const std::vector<std::string> users = {
      "In the beginning God created the heaven and the earth. Tell me what happened next.",
      "And what did he call the light?",
      "Who was the first man, and where did he live?",
      "Tell me about the serpent.",
      "What happened to Cain and Abel?",
      "Summarize all of this in one sentence."};
  Json history = Json::array();
  history.push_back({{"role", "system"},
                     {"content", "You are a careful reader of the King James Bible. Answer in "
                                 "its language, briefly, and cite the chapter when you can."}});
  int64_t cached_total = 0;
  for (size_t turn = 0; turn < users.size(); ++turn) {
    history.push_back({{"role", "user"}, {"content", users[turn]}});
    Json req = {{"messages", history},
                {"max_tokens", 40},
                {"temperature", 0.8},
                {"seed", int(turn)},
                {"logprobs", true},
                {"top_logprobs", 2},
                {"chat_template_kwargs", {{"enable_thinking", thinking}}}};
    auto [s_off, r_off] = off.post("/v1/chat/completions", req);
    auto [s_on, r_on] = on.post("/v1/chat/completions", req);
    auto [s_tiny, r_tiny] = tiny.post("/v1/chat/completions", req);
    ASSERT_EQ(s_off, 200) << r_off;
    ASSERT_EQ(s_on, 200) << r_on;
    ASSERT_EQ(s_tiny, 200) << r_tiny;
    const Json& c = r_off["choices"][0];
    EXPECT_EQ(r_on["choices"][0].dump(), c.dump()) << "turn " << turn;
    EXPECT_EQ(r_tiny["choices"][0].dump(), c.dump()) << "turn " << turn;
    EXPECT_EQ(r_on["usage"]["prompt_tokens"], r_off["usage"]["prompt_tokens"]);
    EXPECT_EQ(r_off["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const int64_t cached = r_on["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_EQ(cached % 64, 0);
    EXPECT_LT(cached, r_on["usage"]["prompt_tokens"].get<int64_t>());
    if (turn > 0) cached_total += cached;
    // The client sends the answer back without its reasoning, as OpenAI clients do.
    history.push_back({{"role", "assistant"}, {"content", c["message"].value("content", "")}});
  }
  EXPECT_GT(cached_total, 0) << "no turn resumed from the cache";
  EXPECT_GT(on.metric("qwen35_prefix_cache_hits_total"), 0);
  EXPECT_GT(tiny.metric("qwen35_prefix_cache_evictions_total"), 0);
  for (ServerProcess* s : {&on, &tiny}) {
    EXPECT_EQ(s->metric("qwen35_slots_used"), 0);
    EXPECT_EQ(s->metric("qwen35_kv_blocks_used"), s->metric("qwen35_prefix_cache_blocks"));
    EXPECT_LE(s->metric("qwen35_prefix_cache_bytes"), s == &tiny ? 0.6 * (1 << 20) : 1024 << 20);
  }
  EXPECT_EQ(off.metric("qwen35_kv_blocks_used"), 0);
}

// Completions that share a long prefix and branch, greedy and seeded, one prompt, a batch of
// prompts with n = 2, and streamed: the same bits from a server with the cache, one without, and
// one whose tiny cache keeps evicting; the branches after the first resume from the shared part.
class PrefixCacheBranches : public ::testing::TestWithParam<bool> {};

TEST_P(PrefixCacheBranches, BranchesResumedEqualFresh) {
  const bool fast = GetParam();
  std::string model = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  if (fast) model += "/mlx-4bit";
  std::vector<std::string> common = {"--parallel", "4", "--ctx", "1024"};
  if (fast) common.push_back("--fast");
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  ServerProcess off(model, with({"--no-prefix-cache"}));
  ServerProcess on(model, with({"--cache-interval", "64"}));
  ServerProcess tiny(model, with({"--cache-mb", "0.6", "--cache-interval", "64"}));
  ASSERT_TRUE(off.ready() && on.ready() && tiny.ready()) << off.log() << on.log() << tiny.log();
  std::string prefix;
  for (int i = 1; i <= 30; ++i)
    prefix += "And on the " + std::to_string(i) + " day the waters were gathered together. ";
  const std::vector<std::string> ends = {"And God said,", "Then the earth", "And the evening",
                                         "In those days", "And it came to pass"};
  auto body = [&](Json prompt, double temperature, int seed, int n) {
    return Json{{"prompt", std::move(prompt)}, {"max_tokens", 24},   {"temperature", temperature},
                {"seed", seed},                {"n", n},             {"logprobs", 2},
                {"return_token_ids", true}};
  };
  const std::vector<Json> reqs = {
      body(prefix + ends[0], 0.0, 0, 1),
      body(prefix + ends[1], 0.9, 7, 1),
      body(Json::array({prefix + ends[2], prefix + ends[3]}), 0.9, 11, 2),
      body(prefix + ends[0], 0.7, 3, 1),  // the first branch again: resumes past the fork
  };
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto [s_off, r_off] = off.post("/v1/completions", reqs[i]);
    auto [s_on, r_on] = on.post("/v1/completions", reqs[i]);
    auto [s_tiny, r_tiny] = tiny.post("/v1/completions", reqs[i]);
    ASSERT_EQ(s_off, 200) << r_off;
    ASSERT_EQ(s_on, 200) << r_on;
    ASSERT_EQ(s_tiny, 200) << r_tiny;
    EXPECT_EQ(r_on["choices"].dump(), r_off["choices"].dump()) << "request " << i;
    EXPECT_EQ(r_tiny["choices"].dump(), r_off["choices"].dump()) << "request " << i;
    EXPECT_EQ(r_off["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const int64_t cached = r_on["usage"]["prompt_tokens_details"]["cached_tokens"];
    if (i > 0) {
      EXPECT_GE(cached, 64) << "request " << i << " did not resume: " << r_on["usage"];
    }
    EXPECT_EQ(cached % 64, 0);
  }
  // Streamed, with usage in the last chunk.
  Json sreq = body(prefix + ends[4], 0.9, 5, 1);
  sreq["stream"] = true;
  sreq["stream_options"] = {{"include_usage", true}};
  auto text_and_usage = [](const std::vector<std::string>& events) {
    std::string text;
    Json usage;
    for (const auto& e : events) {
      if (e == "[DONE]") continue;
      const Json j = Json::parse(e);
      for (const auto& c : j["choices"]) text += c.value("text", "");
      if (j.contains("usage") && !j["usage"].is_null()) usage = j["usage"];
    }
    return std::make_pair(text, usage);
  };
  const auto [t_off, u_off] = text_and_usage(off.stream("/v1/completions", sreq));
  const auto [t_on, u_on] = text_and_usage(on.stream("/v1/completions", sreq));
  EXPECT_FALSE(t_off.empty());
  EXPECT_EQ(t_on, t_off);
  EXPECT_GE(u_on["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 64) << u_on;
  EXPECT_GT(tiny.metric("qwen35_prefix_cache_evictions_total"), 0);
  for (ServerProcess* s : {&on, &tiny}) {
    EXPECT_EQ(s->metric("qwen35_slots_used"), 0);
    EXPECT_EQ(s->metric("qwen35_kv_blocks_used"), s->metric("qwen35_prefix_cache_blocks"));
    EXPECT_EQ(s->metric("qwen35_kv_blocks_free"),
              s->metric("qwen35_kv_blocks_total") - s->metric("qwen35_kv_blocks_used"));
  }
  EXPECT_EQ(off.metric("qwen35_kv_blocks_used"), 0);
}

// Branch points at the default --cache-interval (2048): five completions share a 300-word
// prefix and each ends in a question longer than a grid block, so a prompt's own snapshot (its
// last grid boundary) lies past where the others part from it. The first prompt's prefill kept
// provisional snapshots at its grid lines; the second branch resumes from the one at the shared
// part's last grid line, which becomes a branch point, and so does every later branch. Every
// answer equals a server without the cache, bit for bit; a server restarted from --cache-dir
// keeps the branch point (provisional snapshots are not saved).
std::string branch_prefix() {
  std::string prefix;
  for (int i = 1; i <= 30; ++i)  // 300 words
    prefix += "And on the " + std::to_string(i) + " day the waters were gathered together. ";
  return prefix;
}

std::string branch_question(int i) {
  static const char* kWhat[] = {"the light", "the firmament", "the dry land", "the great whales",
                                "the beasts of the earth", "the garden"};
  std::string q = "Question " + std::to_string(i) + ": tell of " + kWhat[i % 6] + ".";
  for (int k = 0; k < 8; ++k) q += " Say again what became of " + std::string(kWhat[(i + k) % 6]) + ".";
  return q;
}

// The longest common prefix of token id arrays.
int64_t common_prefix(const std::vector<Json>& ids) {
  size_t n = ids[0].size();
  for (const auto& v : ids) {
    size_t k = 0;
    while (k < n && k < v.size() && v[k] == ids[0][k]) ++k;
    n = k;
  }
  return int64_t(n);
}

TEST_P(PrefixCacheBranches, BranchPointsResumeAtTheDefaultInterval) {
  const bool fast = GetParam();
  std::string model = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  if (fast) model += "/mlx-4bit";
  testing::TempDir d;
  const std::string dir = d.file("cache");
  std::vector<std::string> common = {"--parallel", "2", "--ctx", "2048"};
  if (fast) common.push_back("--fast");
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };
  ServerProcess off(model, with({"--no-prefix-cache"}));
  auto on = std::make_unique<ServerProcess>(model, with({"--cache-dir", dir}));
  ASSERT_TRUE(off.ready() && on->ready()) << off.log() << on->log();
  auto body = [&](int i) {
    return Json{{"prompt", branch_prefix() + branch_question(i)}, {"max_tokens", 16},
                {"temperature", 0.8}, {"seed", 100 + i}, {"logprobs", 2},
                {"return_token_ids", true}};
  };
  std::vector<Json> ids;
  std::vector<int64_t> cached;
  auto ask = [&](ServerProcess& server, int i) {
    auto [s_off, r_off] = off.post("/v1/completions", body(i));
    auto [s_on, r_on] = server.post("/v1/completions", body(i));
    ASSERT_EQ(s_off, 200) << r_off;
    ASSERT_EQ(s_on, 200) << r_on;
    EXPECT_EQ(r_on["choices"].dump(), r_off["choices"].dump()) << "branch " << i;
    ids.push_back(r_on["prompt_token_ids"]);
    cached.push_back(r_on["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>());
  };
  for (int i = 0; i < 4; ++i) ask(*on, i);
  const int64_t shared = common_prefix(ids), boundary = shared / 64 * 64;
  ASSERT_GE(boundary, 320) << "the prefix is not shared as a 300-word prefix should be";
  for (const auto& v : ids)  // each prompt's own snapshot is past the branch point
    ASSERT_GE((int64_t(v.size()) - 1) / 64 * 64, boundary + 64) << v.size();
  EXPECT_EQ(cached[0], 0);
  for (int i = 1; i < 4; ++i) EXPECT_GE(cached[size_t(i)], boundary) << "branch " << i;
  // 4 prompts' own snapshots + the branch point, besides the provisional ones.
  EXPECT_EQ(on->metric("qwen35_prefix_cache_snapshots") -
                on->metric("qwen35_prefix_cache_provisional_snapshots"), 5);
  EXPECT_EQ(on->metric("qwen35_prefix_cache_promoted_total"), 1);
  EXPECT_EQ(on->stop(), 0);
  // Restarted: the branch point came back from its file.
  on = std::make_unique<ServerProcess>(model, with({"--cache-dir", dir}));
  ASSERT_TRUE(on->ready()) << on->log();
  ask(*on, 4);
  EXPECT_GE(cached[4], boundary) << on->log();
  EXPECT_EQ(on->metric("qwen35_prefix_cache_hits_total"), 1);
}

INSTANTIATE_TEST_SUITE_P(ExactAndFast, PrefixCacheBranches, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "fast" : "exact"); });

// serve --cache-dir: a restarted server keeps its warm system prompt. The first server saves
// its snapshots at SIGTERM; the second loads them, and a new conversation over the same system
// prompt resumes from them with the bits of a server without the cache.
TEST(PrefixCacheRestart, SavedSnapshotsSurviveARestart) {
  const std::string model = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  testing::TempDir d;
  const std::string dir = d.file("cache");
  std::string system;
  for (int i = 0; i < 40; ++i) system += "Verse " + std::to_string(i) + ": and it was so. ";
  auto chat = [&](const std::string& user) {
    return Json{{"messages",
                 {{{"role", "system"}, {"content", system}}, {{"role", "user"}, {"content", user}}}},
                {"max_tokens", 12},
                {"temperature", 0},
                {"logprobs", true}};
  };
  {
    ServerProcess first(model, {"--cache-dir", dir});
    ASSERT_TRUE(first.ready()) << first.log();
    auto [st, r] = first.post("/v1/chat/completions", chat("Who made the light?"));
    ASSERT_EQ(st, 200) << r;
    EXPECT_EQ(first.stop(), 0);
    EXPECT_NE(first.log().find("saved "), std::string::npos) << first.log();
  }
  ServerProcess second(model, {"--cache-dir", dir});
  ServerProcess plain(model, {"--no-prefix-cache"});
  ASSERT_TRUE(second.ready() && plain.ready()) << second.log() << plain.log();
  EXPECT_NE(second.log().find("loaded "), std::string::npos) << second.log();
  EXPECT_EQ(second.log().find("loaded 0 "), std::string::npos) << second.log();
  const Json req = chat("And what of the waters?");
  auto [s2, r2] = second.post("/v1/chat/completions", req);
  auto [s3, r3] = plain.post("/v1/chat/completions", req);
  ASSERT_EQ(s2, 200) << r2;
  ASSERT_EQ(s3, 200) << r3;
  EXPECT_GT(r2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << r2;
  EXPECT_EQ(r2["choices"][0].dump(), r3["choices"][0].dump());
}

// Issue 46: Codex-shaped turns (Responses, no max_output_tokens) under --parallel 1. A request
// without an output cap used to be promised the whole context up front, which evicted every
// cache entry; now the second turn resumes the first turn's prompt and nothing is evicted.
TEST(PrefixCacheUncapped, SecondTurnResumesUnderOneSlot) {
  const std::string model = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  ServerProcess srv(model, {"--parallel", "1", "--ctx", "2048"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  std::string instructions = "You are a careful reader of the King James Bible. ";
  for (int i = 0; i < 30; ++i) instructions += "Rule " + std::to_string(i) + ": answer in its language. ";
  Json input = Json::array();
  input.push_back({{"role", "user"}, {"content", "Who made the light?"}});
  auto [s1, r1] = srv.post("/v1/responses", Json{{"instructions", instructions}, {"input", input},
                                                  {"temperature", 0}});
  ASSERT_EQ(s1, 200) << r1;
  std::string answer;
  for (const auto& item : r1["output"])
    if (item.value("type", "") == "message")
      for (const auto& part : item["content"]) answer += part.value("text", "");
  input.push_back({{"role", "assistant"}, {"content", answer}});
  input.push_back({{"role", "user"}, {"content", "And what of the waters?"}});
  auto [s2, r2] = srv.post("/v1/responses", Json{{"instructions", instructions}, {"input", input},
                                                  {"temperature", 0}});
  ASSERT_EQ(s2, 200) << r2;
  const int64_t cached = r2["usage"]["input_tokens_details"]["cached_tokens"].get<int64_t>();
  EXPECT_GE(cached, r1["usage"]["input_tokens"].get<int64_t>() / 64 * 64 - 64) << r2["usage"].dump();
  EXPECT_GT(cached, 0);
  EXPECT_EQ(srv.metric("qwen35_prefix_cache_evictions_total"), 0);
  EXPECT_GE(srv.metric("qwen35_prefix_cache_hits_total"), 1);
}

INSTANTIATE_TEST_SUITE_P(ThinkingAndFast, PrefixCacheChat,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "thinking" : "no_thinking") +
                                  (std::get<1>(info.param) ? "_fast" : "_exact");
                         });

}  // namespace
}  // namespace qwen35
