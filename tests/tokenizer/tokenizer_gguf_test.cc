// The tokenizer of a GGUF file (Tokenizer::from_gguf). The metadata is written here from each
// fixture's tokenizer.json the way llama.cpp's converter writes it (every id in order, added
// tokens CONTROL when special, USER_DEFINED otherwise, merges as "a b"). Then:
//   - on text that NFC leaves alone, the ids are those of tokenizer.json (Hugging Face's, in
//     cases.jsonl), decoded text included: the two differ only where tokenizer.json normalizes;
//   - on every case, the ids are llama.cpp's own on the same metadata (llama_cpp_ids.jsonl,
//     written by llama.cpp's llama-tokenize; see the fixture's LLAMA_CPP.md), and on a fixture
//     GGUF file's own metadata;
//   - metadata it cannot serve is refused with the key named.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "gguf_builder.h"
#include "test_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {
namespace {

using qwen35::testing::GgufBuilder;

// GGUF tokenizer metadata from a tokenizer.json (+ tokenizer_config.json when present).
GgufBuilder gguf_from_tokenizer_json(const std::string& dir, const std::string& pre) {
  const auto tj = nlohmann::json::parse(std::ifstream(dir + "/tokenizer.json"));
  std::map<int64_t, std::string> by_id;
  for (const auto& [tok, id] : tj["model"]["vocab"].items()) by_id[id.get<int64_t>()] = tok;
  std::map<int64_t, int32_t> types;
  for (const auto& a : tj["added_tokens"]) {
    by_id[a["id"].get<int64_t>()] = a["content"].get<std::string>();
    types[a["id"].get<int64_t>()] = a["special"].get<bool>() ? 3 : 4;
  }
  std::vector<std::string> tokens;
  std::vector<int32_t> type_list;
  for (int64_t id = 0; id <= by_id.rbegin()->first; ++id) {
    auto it = by_id.find(id);
    tokens.push_back(it != by_id.end() ? it->second : "[PAD" + std::to_string(id) + "]");
    type_list.push_back(it == by_id.end() ? 5 : types.count(id) ? types[id] : 1);
  }
  std::vector<std::string> merges;
  for (const auto& m : tj["model"]["merges"])
    merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
  GgufBuilder b;
  b.str("general.architecture", "qwen35");
  b.str("tokenizer.ggml.model", "gpt2");
  b.str("tokenizer.ggml.pre", pre);
  b.strings("tokenizer.ggml.tokens", tokens);
  b.ints("tokenizer.ggml.token_type", type_list);
  b.strings("tokenizer.ggml.merges", merges);
  for (size_t id = 0; id < tokens.size(); ++id)
    if (tokens[id] == "<|im_end|>") b.u32("tokenizer.ggml.eos_token_id", uint32_t(id));
  b.boolean("tokenizer.ggml.add_bos_token", false);
  return b;
}

struct Loaded {
  std::string bytes;  // the parse keeps views into it
  std::shared_ptr<formats::GgufModel> model;
};

Loaded load(const GgufBuilder& b) {
  Loaded l;
  l.bytes = b.build();
  auto f = formats::GgufFile::parse(reinterpret_cast<const uint8_t*>(l.bytes.data()), l.bytes.size(), "tok.gguf");
  EXPECT_TRUE(f.ok()) << f.message();
  auto m = formats::GgufModel::from_files({*f});
  EXPECT_TRUE(m.ok()) << m.message();
  l.model = *m;
  return l;
}

const Tokenizer& gguf_tokenizer(const std::string& name) {
  static std::map<std::string, std::pair<Loaded, Tokenizer>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    Loaded l = load(gguf_from_tokenizer_json(testing::fixture_dir(name), "qwen35"));
    auto t = Tokenizer::from_gguf(*l.model);
    if (!t.ok()) {
      ADD_FAILURE() << t.message();
      std::abort();
    }
    it = cache.emplace(name, std::make_pair(std::move(l), std::move(t).value())).first;
  }
  return it->second.second;
}

bool nfc_stable(const std::string& s) {
  std::string n;
  return append_nfc(s, &n).ok() && n == s;
}

TEST(TokenizerGguf, MatchesTokenizerJsonOnNfcStableText) {
  const Tokenizer& tok = gguf_tokenizer("qwen35-like");
  int checked = 0, skipped = 0;
  for (const auto& c : testing::load_cases("qwen35-like")) {
    if (!nfc_stable(c.text)) {
      ++skipped;
      continue;
    }
    ++checked;
    auto ids = tok.encode(c.text);
    ASSERT_TRUE(ids.ok()) << c.name << ": " << ids.message();
    EXPECT_EQ(*ids, c.ids) << c.name;
    EXPECT_EQ(tok.decode(c.ids, false), c.decoded) << c.name;
    EXPECT_EQ(tok.decode(c.ids, true), c.decoded_skip_special) << c.name;
  }
  EXPECT_GT(checked, 250);
  EXPECT_GT(skipped, 0);  // the corpus has text NFC changes: the other test covers it
  EXPECT_EQ(tok.eos_id(), tok.token_to_id("<|im_end|>"));
  EXPECT_TRUE(tok.is_special(tok.token_to_id("<|im_start|>")));
  EXPECT_FALSE(tok.is_special(tok.token_to_id("<think>")));
}

TEST(TokenizerGguf, MatchesLlamaCppOnEveryCase) {
  const std::string path = std::string(QWEN35_SOURCE_DIR) + "/tests/fixtures/tokenizer/qwen35-like/llama_cpp_ids.jsonl";
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  std::map<std::string, std::vector<int32_t>> want;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      want[j["name"].get<std::string>()] = j["ids"].get<std::vector<int32_t>>();
    }
  const Tokenizer& tok = gguf_tokenizer("qwen35-like");
  const auto cases = testing::load_cases("qwen35-like");
  ASSERT_EQ(want.size(), cases.size());
  for (const auto& c : cases) {
    auto ids = tok.encode(c.text);
    ASSERT_TRUE(ids.ok()) << c.name << ": " << ids.message();
    EXPECT_EQ(*ids, want[c.name]) << c.name;
  }
}

// The same file in both engines: a fixture GGUF (its own small vocabulary), every case.
TEST(TokenizerGguf, MatchesLlamaCppOnAFixtureFile) {
  const std::string dir = std::string(QWEN35_SOURCE_DIR) + "/tests/fixtures/gguf";
  auto g = formats::GgufModel::open(dir + "/dense_q4_k_m.gguf");
  ASSERT_TRUE(g.ok()) << g.message();
  auto tok = Tokenizer::from_gguf(**g);
  ASSERT_TRUE(tok.ok()) << tok.message();
  std::map<std::string, std::vector<int32_t>> want;
  std::ifstream f(dir + "/dense_q4_k_m.llama_cpp_ids.jsonl");
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) {
      const auto j = nlohmann::json::parse(line);
      want[j["name"].get<std::string>()] = j["ids"].get<std::vector<int32_t>>();
    }
  const auto cases = testing::load_cases("qwen35-like");
  ASSERT_EQ(want.size(), cases.size());
  for (const auto& c : cases) {
    auto ids = tok->encode(c.text);
    ASSERT_TRUE(ids.ok()) << c.name << ": " << ids.message();
    EXPECT_EQ(*ids, want[c.name]) << c.name;
    EXPECT_EQ(tok->decode(*ids), c.text) << c.name;
  }
}

TEST(TokenizerGguf, RefusesWhatItCannotServe) {
  auto expect = [](const std::function<void(GgufBuilder&)>& change, const std::string& what) {
    GgufBuilder b;
    b.str("tokenizer.ggml.model", "gpt2");
    b.str("tokenizer.ggml.pre", "qwen35");
    b.strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
    b.ints("tokenizer.ggml.token_type", {1, 1, 1});
    b.strings("tokenizer.ggml.merges", {"a b"});
    change(b);
    Loaded l = load(b);
    auto t = Tokenizer::from_gguf(*l.model);
    if (what.empty()) {
      ASSERT_TRUE(t.ok()) << t.message();
      EXPECT_EQ(*t->encode("abab"), (std::vector<int32_t>{2, 2}));
      return;
    }
    ASSERT_FALSE(t.ok()) << what;
    EXPECT_NE(t.message().find(what), std::string::npos) << t.message();
  };
  expect([](GgufBuilder&) {}, "");
  expect([](GgufBuilder& b) { b.str("tokenizer.ggml.model", "llama"); }, "tokenizer.ggml.model 'llama' is not supported");
  expect([](GgufBuilder& b) { b.str("tokenizer.ggml.pre", "deepseek-llm"); }, "tokenizer.ggml.pre 'deepseek-llm' is not supported");
  expect([](GgufBuilder& b) { b.erase_kv("tokenizer.ggml.tokens"); }, "tokenizer.ggml.tokens is missing");
  expect([](GgufBuilder& b) { b.erase_kv("tokenizer.ggml.merges"); }, "tokenizer.ggml.merges is missing");
  expect([](GgufBuilder& b) { b.ints("tokenizer.ggml.token_type", {1, 1}); }, "tokenizer.ggml.token_type");
  expect([](GgufBuilder& b) { b.strings("tokenizer.ggml.tokens", {"a", "b", "a"}); }, "token 2 repeats");
  expect([](GgufBuilder& b) { b.u32("tokenizer.ggml.eos_token_id", 9); }, "tokenizer.ggml.eos_token_id is not a token id");
  expect([](GgufBuilder& b) { b.strings("tokenizer.ggml.merges", {"a c"}); }, "merge");
  expect([](GgufBuilder& b) { b.strings("tokenizer.ggml.tokens", {"a", "b", "\xff"}); }, "token 2 is not valid UTF-8");
  expect([](GgufBuilder& b) { b.strings("tokenizer.ggml.merges", {"a \xc3"}); }, "merge 0 is not valid UTF-8");
  expect([](GgufBuilder& b) { b.erase_kv("tokenizer.ggml.model"); }, "missing metadata key 'tokenizer.ggml.model'");
}

}  // namespace
}  // namespace qwen35::tokenizer
