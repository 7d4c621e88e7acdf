// The tool-call form comes from the chat template: Qwen3.5's writes XML, Qwen3's Hermes-style
// JSON. For each template, the forced-call grammar accepts what the template itself writes for
// an assistant's call (the expectation: the template's own text), and the output parser reads
// it back as the call that was rendered.
#include <gtest/gtest.h>

#include <random>

#include "bundled_model_info.h"
#include "grammar/matcher.h"
#include "server/chat_request.h"
#include "server/output_parser.h"
#include "server/structured.h"
#include "template/chat_template.h"
#include "test_util.h"

namespace qwen35::server {
namespace {

tmpl::ChatTemplate fixture_template(const std::string& name) {
  auto t = tmpl::load_chat_template(testing::source_dir() + "/tests/fixtures/chat_template/" + name);
  EXPECT_TRUE(t.ok()) << t.message();
  return std::move(*t);
}

const Json kTools = Json::parse(R"([{"type": "function", "function": {"name": "get_weather", "strict": true,
  "parameters": {"type": "object", "properties": {"city": {"type": "string"},
  "days": {"type": "integer"}, "units": {"type": "string", "enum": ["C", "F"]}}, "required": ["city", "days"]}}}])");

// The <tool_call> block the template writes for a call of get_weather with `args`.
std::string rendered_call(const tmpl::ChatTemplate& t, const Json& args) {
  Json msgs = Json::array();
  msgs.push_back({{"role", "user"}, {"content", "Weather?"}});
  msgs.push_back({{"role", "assistant"}, {"content", ""},
                  {"tool_calls", {{{"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"arguments", args}}}}}}});
  auto r = t.render(msgs, kTools, false, Json::object());
  EXPECT_TRUE(r.ok()) << r.message();
  // (Qwen3's system prompt names the tags too: the block is the assistant turn's.)
  const size_t turn = r->find("<|im_start|>assistant");
  const size_t a = r->find("<tool_call>", turn), b = r->find("</tool_call>", turn);
  EXPECT_TRUE(a != std::string::npos && b != std::string::npos) << *r;
  return r->substr(a, b + 12 - a);
}

// A vocabulary of the 256 bytes and an end token.
std::shared_ptr<const grammar::Vocab> byte_vocab() {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
  t.push_back("<|end|>");
  std::vector<bool> usable(t.size(), true);
  usable.back() = false;
  return std::make_shared<const grammar::Vocab>(t, usable);
}

// 1: the grammar takes the whole text; 0: a prefix of one; -1: refused.
int accepts(grammar::Automaton& a, std::string_view text) {
  int32_t c = a.initial();
  for (unsigned char b : text) {
    c = a.step(c, int32_t(b));
    if (c == grammar::Automaton::kDead) return -1;
  }
  return a.complete(c) ? 1 : 0;
}

std::vector<ToolCall> parse_all(const std::string& text, ToolCallFormat f) {
  OutputParser p(false, true, true, kTools, f);
  std::vector<ToolCall> calls;
  for (auto v : {p.push(text), p.flush()})
    for (auto& x : v)
      if (x.kind == OutputPiece::kToolCall) calls.push_back(x.call);
  return calls;
}

TEST(ToolFormat, ReadFromTheTemplate) {
  EXPECT_EQ(tool_call_format(fixture_template("qwen35")), ToolCallFormat::kXml);
  EXPECT_EQ(tool_call_format(fixture_template("qwen3")), ToolCallFormat::kJson);
  auto plain = tmpl::ChatTemplate::parse("{% for m in messages %}{{ m.content }}{% endfor %}");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(tool_call_format(*plain), ToolCallFormat::kXml);  // no calls written: the default
}

TEST(ToolFormat, GrammarTakesWhatTheTemplateWritesAndTheParserReadsIt) {
  const Json args = {{"city", "Paris"}, {"days", 3}, {"units", "C"}};
  for (const char* name : {"qwen3", "qwen35"}) {
    SCOPED_TRACE(name);
    const tmpl::ChatTemplate t = fixture_template(name);
    const ToolCallFormat f = tool_call_format(t);
    const std::string block = rendered_call(t, args);
    auto g = tool_call_grammar(kTools, "get_weather", false, f);
    ASSERT_TRUE(g.ok()) << g.message();
    grammar::Automaton a(std::move(*g), byte_vocab(), {256});
    EXPECT_EQ(accepts(a, block), 1) << block;
    const auto calls = parse_all(block, f);
    ASSERT_EQ(calls.size(), 1u) << block;
    EXPECT_EQ(calls[0].name, "get_weather");
    EXPECT_EQ(calls[0].arguments, args);
    // A required argument left out, or the other family's form: refused.
    const std::string other = rendered_call(fixture_template(f == ToolCallFormat::kJson ? "qwen35" : "qwen3"), args);
    EXPECT_EQ(accepts(a, other), -1) << other;
    EXPECT_EQ(accepts(a, rendered_call(t, {{"city", "Paris"}})), -1);
  }
}

// Random walks through the JSON form's grammar (any allowed byte, uniformly): every finished
// text parses back as one call of the function whose arguments hold the required fields with
// their declared types.
TEST(ToolFormat, RandomJsonFormCallsParse) {
  auto g = tool_call_grammar(kTools, "", true, ToolCallFormat::kJson);
  ASSERT_TRUE(g.ok()) << g.message();
  grammar::Automaton a(std::move(*g), byte_vocab(), {256});
  std::mt19937_64 rng(5);
  std::vector<uint64_t> m;
  int finished = 0;
  for (int walk = 0; walk < 40; ++walk) {
    std::string out;
    int32_t c = a.initial();
    bool ended = false;
    for (int64_t left = 400; left > 0 && !ended; --left) {
      a.mask(c, left - 2, &m);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t <= 256; ++t)
        if ((m[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty()) << out;
      const int32_t t = allowed[rng() % allowed.size()];
      if (t == 256) {
        ended = true;
      } else {
        c = a.step(c, t);
        out += char(t);
      }
    }
    ASSERT_TRUE(ended) << out;
    ++finished;
    const auto calls = parse_all(out, ToolCallFormat::kJson);
    ASSERT_GE(calls.size(), 1u) << out;
    for (const auto& call : calls) {
      EXPECT_EQ(call.name, "get_weather") << out;
      EXPECT_TRUE(call.arguments["city"].is_string()) << out;
      EXPECT_TRUE(call.arguments["days"].is_number_integer()) << out;
    }
  }
  EXPECT_EQ(finished, 40);
}

// A forced call on Qwen3's template (the bundled tokenizer, which has the thinking tags): with
// thinking on the prompt leaves <think> to the model, so the sampler may let it think first; with
// thinking off (an empty block in the prompt) and on Qwen3.5's template (whose prompt opens the
// block) it may not.
TEST(ToolFormat, Qwen3MayThinkBeforeAForcedCall) {
  auto& bundled = testing_model::bundled_model_info();
  static const tmpl::ChatTemplate qwen3 = fixture_template("qwen3");
  static auto grammars = std::make_shared<GrammarCache>(grammar_vocab(*bundled.tok, 0));
  for (const bool q3 : {true, false})
    for (const bool think : {true, false}) {
      SCOPED_TRACE(std::string(q3 ? "qwen3" : "qwen3.5") + (think ? " thinking" : ""));
      ModelInfo mi = bundled.mi;
      mi.grammars = grammars;
      if (q3) mi.tmpl = &qwen3;
      mi.tool_format = tool_call_format(*mi.tmpl);
      const Json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}},
                         {"tools", kTools}, {"tool_choice", "required"}, {"max_tokens", 200},
                         {"chat_template_kwargs", {{"enable_thinking", think}}}};
      CompletionRequest r;
      auto e = parse_chat_request(body, mi, &r);
      ASSERT_FALSE(e.has_value()) << e->message;
      ASSERT_NE(r.sampling.grammar, nullptr);
      EXPECT_EQ(r.tool_format, q3 ? ToolCallFormat::kJson : ToolCallFormat::kXml);
      EXPECT_EQ(r.sampling.think_may_open, q3 && think);
      EXPECT_EQ(r.sampling.reasoning_open, !q3 && think);
      EXPECT_TRUE(r.sampling.validate().ok());
    }
}

}  // namespace
}  // namespace qwen35::server
