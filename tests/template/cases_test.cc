// Every case of tests/fixtures/chat_template/cases.json (rendered by Python jinja2 with
// transformers' settings) renders byte for byte, or fails with the recorded message.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "template/chat_template.h"

namespace qwen35::tmpl {
namespace {

using Json = nlohmann::ordered_json;

const std::string kFixtures = std::string(QWEN35_SOURCE_DIR) + "/tests/fixtures/chat_template";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<Json> load_cases() {
  const Json all = Json::parse(slurp(kFixtures + "/cases.json"), nullptr, false);
  if (all.is_discarded() || !all.is_array()) return {};
  return std::vector<Json>(all.begin(), all.end());
}

const ChatTemplate& template_named(const std::string& name) {
  static std::map<std::string, ChatTemplate>* cache = new std::map<std::string, ChatTemplate>();
  auto it = cache->find(name);
  if (it == cache->end()) {
    auto t = ChatTemplate::parse(slurp(kFixtures + "/" + name + "/chat_template.jinja"));
    EXPECT_TRUE(t.ok()) << t.message();
    it = cache->emplace(name, std::move(t).value()).first;
  }
  return it->second;
}

class CasesTest : public ::testing::TestWithParam<Json> {};

TEST_P(CasesTest, RendersLikeTransformers) {
  const Json& c = GetParam();
  const ChatTemplate& t = template_named(c["template"].get<std::string>());
  auto r = t.render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(), c["kwargs"]);
  if (!c["expected"].is_null()) {
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r.value(), c["expected"].get<std::string>());
  } else {
    ASSERT_FALSE(r.ok()) << "rendered: " << r.value();
    EXPECT_NE(r.message().find(c["error"].get<std::string>()), std::string::npos) << r.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CasesTest, ::testing::ValuesIn(load_cases()),
                         [](const ::testing::TestParamInfo<Json>& info) {
                           return info.param["name"].get<std::string>();
                         });

TEST(CasesFile, HasAll57Cases) { EXPECT_EQ(load_cases().size(), 57u); }

// The step bound (jinja::Limits) is tight for a template that loops, but grows with the input:
// the real templates render a conversation of 22,000 messages with tool calls and tools (far
// more than fits any context) with the default limits, and a raise_exception is not a limit.
TEST(CasesFile, LongConversationsWithToolsRenderUnderTheDefaultLimits) {
  for (const char* name : {"qwen35", "qwen3"}) {
    Json best;
    for (const Json& c : load_cases())
      if (c["template"] == name && c["tools"].is_array() && c["expected"].is_string() &&
          (best.is_null() || c["messages"].size() > best["messages"].size()))
        best = c;
    ASSERT_FALSE(best.is_null()) << name;
    Json messages = Json::array();
    while (messages.size() < 22000)
      for (const auto& m : best["messages"])
        if (messages.empty() || m["role"] != "system") messages.push_back(m);  // system first only
    bool over = true;
    auto r = template_named(name).render(messages, best["tools"], true, best["kwargs"], &over);
    ASSERT_TRUE(r.ok()) << name << ": " << r.message();
    EXPECT_FALSE(over);
    EXPECT_GT(r->size(), 22000u * 20);
  }
  for (const Json& c : load_cases()) {
    if (c["expected"].is_string()) continue;
    bool over = true;
    auto r = template_named(c["template"].get<std::string>())
                 .render(c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(),
                         c["kwargs"], &over);
    EXPECT_FALSE(r.ok());
    EXPECT_FALSE(over) << c["name"] << ": a template's own error is not a work limit";
  }
}

}  // namespace
}  // namespace qwen35::tmpl
