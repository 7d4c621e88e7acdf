// *drafted == plain* over HTTP (issue 16): a server with --spec lookup or --spec mtp, and
// requests asking for it ("speculative", "prediction"), answer with the bits of a server without
// speculation (text, token ids, logprobs), greedy and seeded, exact and fast, streamed or not,
// and when a stop string or max_tokens ends the answer inside a drafted block; /metrics counts
// drafted and accepted tokens; bad "speculative" values are 400s that name the field; a
// checkpoint without an MTP head refuses --spec mtp with a clear message.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_process.h"
#include "test_util.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;

class SpecHttp : public ::testing::TestWithParam<bool> {
 protected:
  std::string model() const {
    std::string m = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
    return GetParam() ? m + "/mlx-4bit" : m;
  }
  std::vector<std::string> args(std::vector<std::string> extra) const {
    extra.insert(extra.end(), {"--parallel", "4", "--ctx", "1024"});
    if (GetParam()) extra.push_back("--fast");
    return extra;
  }
};

const char* kVerse =
    "And God said, Let there be light: and there was light. And God saw the light, that it was "
    "good: and God divided the light from the darkness. ";

std::string repeated(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += kVerse;
  return s;
}

Json completion(const std::string& prompt, double temperature, int seed) {
  return Json{{"prompt", prompt},         {"max_tokens", 48}, {"temperature", temperature},
              {"seed", seed},             {"logprobs", 2},    {"return_token_ids", true}};
}

// `spec` runs with --spec `method`; `plain` without. With `accepts`, the drafter must have
// drafted tokens that were accepted (a trained model); else drafting alone is checked.
void expect_drafted_equals_plain(ServerProcess& plain, ServerProcess& spec, const std::string& method,
                                 bool accepts, const std::vector<std::string>& prompts) {
  std::vector<Json> reqs;
  for (double t : {0.0, 0.8})
    for (size_t p = 0; p < prompts.size(); ++p) reqs.push_back(completion(prompts[p], t, 5 + int(p)));
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto [s1, want] = plain.post("/v1/completions", reqs[i]);
    ASSERT_EQ(s1, 200) << want;
    auto [s2, got] = spec.post("/v1/completions", reqs[i]);
    ASSERT_EQ(s2, 200) << got;
    EXPECT_EQ(got["choices"].dump(), want["choices"].dump()) << "request " << i;
    // The same asking for it per request, K = 1, 2, 4 (lookup: on the plain server too).
    for (int k : {1, 2, 4}) {
      Json r = reqs[i];
      r["speculative"] = {{"method", method}, {"draft_tokens", k}};
      auto [s3, per] = (method == "lookup" ? plain : spec).post("/v1/completions", r);
      ASSERT_EQ(s3, 200) << per;
      EXPECT_EQ(per["choices"].dump(), want["choices"].dump()) << "request " << i << " K=" << k;
    }
    // A stop string or max_tokens that ends the answer mid-way, likely inside a drafted block.
    const std::string text = want["choices"][0]["text"];
    if (text.size() > 40) {
      Json r = reqs[i];
      r["stop"] = text.substr(text.size() / 2, 5);
      auto [a, pa] = plain.post("/v1/completions", r);
      auto [b, sb] = spec.post("/v1/completions", r);
      ASSERT_EQ(a, 200);
      ASSERT_EQ(b, 200);
      EXPECT_EQ(pa["choices"][0]["finish_reason"], "stop");
      EXPECT_EQ(sb["choices"].dump(), pa["choices"].dump()) << "stop in request " << i;
    }
    for (int m : {1, 7, 13}) {
      Json r = reqs[i];
      r["max_tokens"] = m;
      EXPECT_EQ(spec.post("/v1/completions", r).second["choices"].dump(),
                plain.post("/v1/completions", r).second["choices"].dump());
    }
  }
  // Streamed, completions and chat.
  Json sr = reqs[0];
  sr["stream"] = true;
  auto text_of = [](const std::vector<std::string>& events, const char* field) {
    std::string t;
    for (const auto& e : events) {
      if (e == "[DONE]") continue;
      const Json c = Json::parse(e)["choices"][0];
      t += field[0] == 't' ? c.value("text", "") : c["delta"].value("content", "");
    }
    return t;
  };
  EXPECT_EQ(text_of(spec.stream("/v1/completions", sr), "text"),
            text_of(plain.stream("/v1/completions", sr), "text"));
  Json chat = {{"messages", {{{"role", "user"}, {"content", prompts[0]}}}}, {"max_tokens", 32},
               {"temperature", 0.7}, {"seed", 3}, {"logprobs", true}, {"stream", true}};
  EXPECT_EQ(text_of(spec.stream("/v1/chat/completions", chat), "delta"),
            text_of(plain.stream("/v1/chat/completions", chat), "delta"));
  chat.erase("stream");
  EXPECT_EQ(spec.post("/v1/chat/completions", chat).second["choices"].dump(),
            plain.post("/v1/chat/completions", chat).second["choices"].dump());
  EXPECT_GT(spec.metric("qwen35_spec_drafted_tokens_total"), 0);
  if (accepts) {
    EXPECT_GT(spec.metric("qwen35_spec_accepted_tokens_total"), 0);
  }
  EXPECT_LE(spec.metric("qwen35_spec_accepted_tokens_total"),
            spec.metric("qwen35_spec_drafted_tokens_total"));
  EXPECT_EQ(spec.metric("qwen35_slots_used"), 0);
}

TEST_P(SpecHttp, LookupDraftedEqualsPlain) {
  ServerProcess plain(model(), args({}));
  ServerProcess spec(model(), args({"--spec", "lookup", "--draft-tokens", "3"}));
  ASSERT_TRUE(plain.ready() && spec.ready()) << plain.log() << spec.log();
  expect_drafted_equals_plain(plain, spec, "lookup", true,
                              {repeated(3), "In the beginning God created the heaven and the earth."});
}

// The MTP head: the bundled model's (exact); in fast mode a synthetic MLX 4-bit checkpoint's
// (random weights: its drafts are nearly all rejected), as the bundled MLX export has none.
TEST_P(SpecHttp, MtpDraftedEqualsPlain) {
  testing::TempDir tmp;
  std::string dir = model();
  if (GetParam()) {
    auto r = testing::run_qwen35("synth --preset tiny --format mlx --mtp on --quiet --out " + tmp.file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    dir = tmp.file("m");
  }
  ServerProcess plain(dir, args({}));
  ServerProcess spec(dir, args({"--spec", "mtp", "--draft-tokens", "3"}));
  ASSERT_TRUE(plain.ready() && spec.ready()) << plain.log() << spec.log();
  expect_drafted_equals_plain(plain, spec, "mtp", !GetParam(),
                              {"In the beginning God created the heaven and the earth.", repeated(2)});
}

// MLX exports drop the MTP head (mlx-lm does): --spec mtp says so and the server does not start.
TEST(SpecHttpMtp, AnExportWithoutTheHeadRefusesMtp) {
  ServerProcess s(std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv/mlx-4bit", {"--spec", "mtp"});
  EXPECT_FALSE(s.ready());
  EXPECT_NE(s.log().find("no MTP head"), std::string::npos) << s.log();
  EXPECT_NE(s.log().find("--spec lookup"), std::string::npos) << s.log();
}

// A chat request with a prediction drafts from it (the server's lookup is off) and answers as
// without it.
TEST_P(SpecHttp, PredictionDraftsAndChangesNothing) {
  ServerProcess plain(model(), args({}));
  ASSERT_TRUE(plain.ready()) << plain.log();
  Json chat = {{"messages", {{{"role", "user"}, {"content", "Say what God said of the light."}}}},
               {"max_tokens", 40},
               {"temperature", 0},
               {"logprobs", true},
               {"chat_template_kwargs", {{"enable_thinking", false}}}};
  auto [s1, want] = plain.post("/v1/chat/completions", chat);
  ASSERT_EQ(s1, 200) << want;
  EXPECT_EQ(plain.metric("qwen35_spec_drafted_tokens_total"), 0);
  const std::string answer = want["choices"][0]["message"]["content"];
  Json with = chat;
  with["prediction"] = {{"type", "content"}, {"content", answer}};
  auto [s2, got] = plain.post("/v1/chat/completions", with);
  ASSERT_EQ(s2, 200) << got;
  EXPECT_EQ(got["choices"].dump(), want["choices"].dump());
  EXPECT_GT(plain.metric("qwen35_spec_accepted_tokens_total"), 0);
  with["prediction"] = {{"type", "content"},
                        {"content", {{{"type", "text"}, {"text", "And God said"}}}}};
  auto [s3, parts] = plain.post("/v1/chat/completions", with);
  ASSERT_EQ(s3, 200) << parts;
  EXPECT_EQ(parts["choices"].dump(), want["choices"].dump());
}

TEST_P(SpecHttp, BadSpeculativeValuesAreRefusedByName) {
  ServerProcess plain(model(), args({}));
  ASSERT_TRUE(plain.ready()) << plain.log();
  const std::vector<std::pair<Json, std::string>> bad = {
      {"ngram", "speculative"},
      {42, "speculative"},
      {{{"method", "eagle"}}, "speculative.method"},
      {{{"draft_tokens", 0}}, "speculative.draft_tokens"},
      {{{"draft_tokens", 16}}, "speculative.draft_tokens"},
      {{{"draft_tokens", "3"}}, "speculative.draft_tokens"},
      {{{"tokens", 3}}, "speculative.tokens"},
      {"mtp", ""},  // the server was not started with --spec mtp: no head cache
  };
  for (const auto& [value, param] : bad) {
    Json r = {{"prompt", "In the beginning"}, {"max_tokens", 4}, {"speculative", value}};
    auto [st, body] = plain.post("/v1/completions", r);
    EXPECT_EQ(st, 400) << value << " " << body;
    if (!param.empty()) {
      EXPECT_EQ(body["error"]["param"], param) << body;
    }
  }
  for (const Json& p : {Json("text"), Json{{"type", "content"}}, Json{{"type", "x"}, {"content", "a"}},
                        Json{{"type", "content"}, {"content", {1, 2}}}}) {
    Json r = {{"prompt", "In the beginning"}, {"max_tokens", 4}, {"prediction", p}};
    auto [st, body] = plain.post("/v1/completions", r);
    EXPECT_EQ(st, 400) << p << " " << body;
  }
  EXPECT_EQ(plain.get("/health").first, 200);
}

INSTANTIATE_TEST_SUITE_P(ExactAndFast, SpecHttp, ::testing::Bool(),
                         [](const auto& info) { return std::string(info.param ? "fast" : "exact"); });

}  // namespace
}  // namespace qwen35
