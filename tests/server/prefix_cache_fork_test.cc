// One prompt for n choices (issue 34): the choices of a request, and identical prompts of one
// batched completions call, compute their prompt once and fork. Each choice equals the
// single-choice request with its seed (the server gives choice i seed + i) bit for bit (text,
// logprobs, finish reason), on chat and completions, with a JSON schema too; /metrics shows the
// prompt rows computed once while the prompt rows received count every choice; usage's
// cached_tokens counts the prompts that were forked, not computed. Also with fewer slots than
// choices (the late ones resume from the prefix cache instead). The reference is a server
// without the prefix cache, where every choice computes its whole prompt.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;

const std::string kModel = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";

std::string long_text(int words) {
  std::string s;
  for (int i = 0; i < words / 10; ++i)
    s += "And the " + std::to_string(i) + " river went out of Eden to water the garden. ";
  return s;
}

Json person_format() {
  const Json schema = Json::parse(R"({"type":"object","properties":{
    "name":{"type":"string","maxLength":16},"age":{"type":"integer"}},
    "required":["name","age"],"additionalProperties":false})");
  return {{"type", "json_schema"},
          {"json_schema", {{"name", "p"}, {"schema", schema}, {"strict", true}}}};
}

// The rows one request added to the prompt counters: (received, computed).
struct Rows {
  double received = 0, computed = 0;
};
Rows rows(const ServerProcess& s) {
  return {s.metric("qwen35_prompt_rows_received_total"), s.metric("qwen35_prefill_rows_total")};
}

// Two servers: `on` (the prefix cache, and so forks) and `off` (--no-prefix-cache: every
// choice computes its whole prompt, the reference). With `parallel` slots each.
struct Servers {
  ServerProcess on, off;
  explicit Servers(const std::string& parallel)
      : on(kModel, {"--parallel", parallel, "--ctx", "1024"}),
        off(kModel, {"--parallel", parallel, "--ctx", "1024", "--no-prefix-cache"}) {}
  bool ready() const { return on.ready() && off.ready(); }
};

// Posts `req` with n = 4 to `server`, and each choice alone (n = 1, seed + i) to the reference;
// every choice must equal its single request. Returns the n = 4 response.
Json expect_choices_equal_singles(const ServerProcess& server, const ServerProcess& reference,
                                  const std::string& path, Json req) {
  req["n"] = 4;
  auto [st, r] = server.post(path, req);
  EXPECT_EQ(st, 200) << r;
  EXPECT_EQ(r["choices"].size(), 4u) << r;
  for (int i = 0; i < 4; ++i) {
    Json one = req;
    one["n"] = 1;
    one["seed"] = req["seed"].get<int>() + i;
    auto [s1, r1] = reference.post(path, one);
    EXPECT_EQ(s1, 200) << r1;
    Json c = r1["choices"][0];
    c["index"] = i;
    EXPECT_EQ(r["choices"][i].dump(), c.dump()) << path << " choice " << i;
  }
  return r;
}

TEST(PrefixCacheFork, NChoicesComputeThePromptOnce) {
  Servers s("4");
  ASSERT_TRUE(s.ready()) << s.on.log() << s.off.log();
  const Json completion = {{"prompt", long_text(120)}, {"max_tokens", 20}, {"temperature", 0.9},
                           {"seed", 7},                 {"logprobs", 2}};
  const Json chat = {{"messages",
                      {{{"role", "system"}, {"content", long_text(80)}},
                       {{"role", "user"}, {"content", "Who was in the garden?"}}}},
                     {"max_tokens", 20},
                     {"temperature", 0.9},
                     {"seed", 3},
                     {"logprobs", true},
                     {"top_logprobs", 2},
                     {"chat_template_kwargs", {{"enable_thinking", false}}}};
  Json constrained = chat;
  constrained["response_format"] = person_format();
  constrained["max_tokens"] = 60;
  constrained["seed"] = 11;
  for (const auto& [path, req] : std::vector<std::pair<std::string, Json>>{
           {"/v1/completions", completion},
           {"/v1/chat/completions", chat},
           {"/v1/chat/completions", constrained}}) {
    const Rows on0 = rows(s.on), off0 = rows(s.off);
    const Json r = expect_choices_equal_singles(s.on, s.off, path, req);
    const Rows on1 = rows(s.on), off1 = rows(s.off);
    const int64_t prompt = r["usage"]["prompt_tokens"];
    const int64_t cached = r["usage"]["prompt_tokens_details"]["cached_tokens"];
    EXPECT_EQ(on1.received - on0.received, 4 * prompt) << path;
    // Computed once: what the cache did not give (a chat's system part, snapshotted by the
    // request before).
    EXPECT_EQ(on1.computed - on0.computed, prompt - cached) << path;
    EXPECT_EQ(off1.computed - off0.computed, 4 * prompt) << path;  // the four singles
  }
  EXPECT_EQ(s.on.metric("qwen35_slots_used"), 0);
  EXPECT_EQ(s.on.metric("qwen35_kv_blocks_used"), s.on.metric("qwen35_prefix_cache_blocks"));
}

// Identical prompts in one batched completions call: computed once, and usage counts the
// forked one as cached.
TEST(PrefixCacheFork, IdenticalPromptsOfABatchComputeOnce) {
  Servers s("4");
  ASSERT_TRUE(s.ready()) << s.on.log() << s.off.log();
  const std::string p = long_text(100), q = "In the beginning " + long_text(60);
  const Json batch = {{"prompt", {p, q, p}}, {"max_tokens", 16}, {"temperature", 0.8},
                      {"seed", 21},          {"logprobs", 1},    {"return_token_ids", true}};
  const Rows before = rows(s.on);
  auto [st, r] = s.on.post("/v1/completions", batch);
  ASSERT_EQ(st, 200) << r;
  const Rows after = rows(s.on);
  const int64_t np = int64_t(r["prompt_token_ids"][0].size());
  const int64_t nq = int64_t(r["prompt_token_ids"][1].size());
  EXPECT_EQ(after.received - before.received, 2 * np + nq);
  EXPECT_EQ(after.computed - before.computed, np + nq);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], np);
  auto [s_off, r_off] = s.off.post("/v1/completions", batch);
  ASSERT_EQ(s_off, 200) << r_off;
  EXPECT_EQ(r["choices"].dump(), r_off["choices"].dump());
  EXPECT_EQ(r_off["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  for (int i = 0; i < 3; ++i) {
    Json one = batch;
    one["prompt"] = i == 1 ? q : p;
    auto [s1, r1] = s.off.post("/v1/completions", one);
    ASSERT_EQ(s1, 200) << r1;
    Json c = r1["choices"][0];
    c["index"] = i;
    EXPECT_EQ(r["choices"][i].dump(), c.dump()) << "prompt " << i;
  }
}

// More choices than slots: the choices admitted beside the first fork; the later ones start when
// a slot frees, from the prefix cache's snapshot of the prompt: the same bits.
TEST(PrefixCacheFork, MoreChoicesThanSlots) {
  Servers s("2");
  ASSERT_TRUE(s.ready()) << s.on.log() << s.off.log();
  // ignore_eos: choices 0 and 1 end in the same step, so 2 and 3 are admitted together.
  const Json req = {{"prompt", long_text(150)}, {"max_tokens", 12}, {"temperature", 1.0},
                    {"seed", 5},                 {"logprobs", 1},   {"ignore_eos", true}};
  const Rows before = rows(s.on);
  const Json r = expect_choices_equal_singles(s.on, s.off, "/v1/completions", req);
  const int64_t prompt = r["usage"]["prompt_tokens"];
  // Choices 0 and 1: the prompt once. Choices 2 and 3, admitted together when those end: once
  // more, past the prompt's last grid boundary (the snapshot choice 0 took).
  const int64_t tail = prompt - (prompt - 1) / 64 * 64;
  EXPECT_EQ(rows(s.on).computed - before.computed, prompt + tail) << prompt;
}

}  // namespace
}  // namespace qwen35
