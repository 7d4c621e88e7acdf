// What the grammar tests share: a vocabulary of BPE-like tokens and an automaton fixture that
// feeds texts byte by byte and samples masked walks.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace qwen35::grammar {
namespace {

// Every single byte, and multi-byte tokens of the shapes a BPE vocabulary has: words, JSON
// punctuation runs, whitespace runs, whole and split UTF-8 characters.
std::shared_ptr<const Vocab> test_vocab(std::vector<int32_t>* end_ids) {
  std::vector<std::string> t;
  for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
  for (const char* s : {"{\"", "\":", "\",", "\": \"", "\"}", "}]", "[{", "true", "false", "null",
                        "name", "\"name", " \"", "  ", "\n  ", "\n    ", "12", "2024", "-0", "0.",
                        "e+", "abc", "hello", " world", "\\n", "\\u00", "é", "€", "\xE2\x82",
                        "\xAC\"", "😀", "<tool_call>", "</", "<parameter=", ">\n", "\n</parameter>\n",
                        "<function=", "</function>\n</tool_call>", "\"a\"", "ab", "a\"", "\"\"", ""})
    t.push_back(s);
  std::vector<bool> usable(t.size() + 1, true);
  t.push_back("<|end|>");  // the end token: never a grammar token
  usable.back() = false;
  *end_ids = {int32_t(t.size() - 1)};
  return std::make_shared<const Vocab>(t, usable);
}

struct Fixture {
  std::vector<int32_t> ends;
  std::shared_ptr<const Vocab> vocab = test_vocab(&ends);

  std::unique_ptr<Automaton> compile(const Json& schema) {
    auto g = json_schema_grammar(schema);
    EXPECT_TRUE(g.ok()) << g.message() << " for " << schema.dump();
    if (!g.ok()) return nullptr;
    return std::make_unique<Automaton>(std::move(*g), vocab, ends);
  }
  // Feeds text byte by byte (single-byte tokens): complete, or -1 when rejected.
  static int accepts(Automaton& a, std::string_view text) {
    int32_t c = a.initial();
    for (unsigned char b : text) {
      c = a.step(c, int32_t(b));
      if (c == Automaton::kDead) return -1;
    }
    return a.complete(c) ? 1 : 0;
  }
  // Samples tokens uniformly among those the mask allows (within `budget` tokens, the end
  // token included) until the end token; returns the text.
  std::string walk(Automaton& a, std::mt19937_64& rng, int64_t budget, bool* ended) {
    std::string out;
    int32_t c = a.initial();
    std::vector<uint64_t> m;
    *ended = false;
    for (int64_t left = budget; left > 0; --left) {
      a.mask(c, left - 2, &m);
      std::vector<int32_t> allowed;
      for (int64_t t = 0; t < vocab->size(); ++t)
        if ((m[size_t(t) / 64] >> (t % 64)) & 1) allowed.push_back(int32_t(t));
      if (allowed.empty()) return out;
      const int32_t t = allowed[rng() % allowed.size()];
      if (a.is_end(t)) {
        *ended = true;
        return out;
      }
      c = a.step(c, t);
      if (c == Automaton::kDead) return out + "<DEAD>";
      out += vocab->bytes(t);
    }
    return out;
  }
};

}  // namespace
}  // namespace qwen35::grammar
