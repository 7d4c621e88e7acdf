// *drafted == plain* over HTTP (issue 16): a server with --spec lookup, and requests asking for
// it ("speculative", "prediction"), answer with the bits of a server without speculation (text,
// token ids, logprobs), greedy and seeded, exact and fast, streamed or not, and when a stop
// string or max_tokens ends the answer inside a drafted block; /metrics counts drafted and
// accepted tokens; bad "speculative" values are 400s that name the field.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server_process.h"

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

TEST_P(SpecHttp, DraftedEqualsPlain) {
  ServerProcess plain(model(), args({}));
  ServerProcess spec(model(), args({"--spec", "lookup", "--draft-tokens", "3"}));
  ASSERT_TRUE(plain.ready() && spec.ready()) << plain.log() << spec.log();
  std::vector<Json> reqs;
  for (double t : {0.0, 0.8}) {
    reqs.push_back(completion(repeated(3), t, 5));
    reqs.push_back(completion("In the beginning God created the heaven and the earth.", t, 6));
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto [s1, want] = plain.post("/v1/completions", reqs[i]);
    ASSERT_EQ(s1, 200) << want;
    auto [s2, got] = spec.post("/v1/completions", reqs[i]);
    ASSERT_EQ(s2, 200) << got;
    EXPECT_EQ(got["choices"].dump(), want["choices"].dump()) << "request " << i;
    // The same through the plain server, asking for it per request, K = 1, 2, 4.
    for (int k : {1, 2, 4}) {
      Json r = reqs[i];
      r["speculative"] = {{"method", "lookup"}, {"draft_tokens", k}};
      auto [s3, per] = plain.post("/v1/completions", r);
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
  // Streamed.
  Json sr = reqs[0];
  sr["stream"] = true;
  auto text_of = [](const std::vector<std::string>& events) {
    std::string t;
    for (const auto& e : events)
      if (e != "[DONE]") t += Json::parse(e)["choices"][0].value("text", "");
    return t;
  };
  EXPECT_EQ(text_of(spec.stream("/v1/completions", sr)), text_of(plain.stream("/v1/completions", sr)));
  EXPECT_GT(spec.metric("qwen35_spec_drafted_tokens_total"), 0);
  EXPECT_GT(spec.metric("qwen35_spec_accepted_tokens_total"), 0);
  EXPECT_LE(spec.metric("qwen35_spec_accepted_tokens_total"),
            spec.metric("qwen35_spec_drafted_tokens_total"));
  EXPECT_EQ(spec.metric("qwen35_slots_used"), 0);
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
      {"mtp", ""},  // the bundled model has an MTP head; this build does not run it yet
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
