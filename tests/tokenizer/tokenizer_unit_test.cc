// Tokenizer behaviour on small in-memory tokenizers: merges, added-token flags, decode rules and
// the errors for bad or unsupported files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "synthetic.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::tokenizer {
namespace {

using nlohmann::json;
using testing::added_token;
using testing::synthetic_json;
using Ids = std::vector<int32_t>;

Tokenizer make(const json& j) {
  auto r = Tokenizer::from_json(j.dump(), "", "test.json");
  EXPECT_TRUE(r.ok()) << r.message();
  if (!r.ok()) std::abort();
  return std::move(r).value();
}

std::string load_error(const json& j) {
  auto r = Tokenizer::from_json(j.dump(), "", "test.json");
  return r.ok() ? "(loaded)" : r.message();
}

Ids enc(const Tokenizer& t, std::string_view s) {
  auto r = t.encode(s);
  EXPECT_TRUE(r.ok()) << r.message();
  return r.ok() ? *r : Ids{};
}

TEST(Tokenizer, MergesAsStringsOrPairs) {
  for (bool pairs : {false, true}) {
    const Tokenizer t = make(synthetic_json(pairs));
    EXPECT_EQ(enc(t, "hello"), (Ids{259}));
    EXPECT_EQ(enc(t, "hell"), (Ids{258}));
    EXPECT_EQ(enc(t, "helo"), (Ids{256, 'l', 'o'}));
    EXPECT_EQ(enc(t, ""), Ids{});
    EXPECT_EQ(t.decode(Ids{259, ' ', 'a'}), "hello a");
  }
}

TEST(Tokenizer, LongWordsMergeLikeShortOnes) {
  // Words over 64 bytes take the heap path; the result must not change.
  const Tokenizer t = make(synthetic_json());
  std::string word;
  for (int i = 0; i < 40; ++i) word += "hello";
  EXPECT_EQ(enc(t, word), Ids(40, 259));
  EXPECT_EQ(enc(t, word + "hel"), [] {
    Ids ids(40, 259);
    ids.insert(ids.end(), {256, 'l'});
    return ids;
  }());
}

TEST(Tokenizer, NfcBeforeTheModel) {
  const Tokenizer t = make(synthetic_json());
  // "e" + U+0301 composes to U+00E9 (C3 A9).
  EXPECT_EQ(enc(t, "e\xCC\x81"), (Ids{0xC3, 0xA9}));
}

TEST(Tokenizer, InvalidUtf8InputIsAnError) {
  const Tokenizer t = make(synthetic_json());
  auto r = t.encode("ab\xFF");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("not valid UTF-8 at byte 2"), std::string::npos) << r.message();
}

TEST(Tokenizer, DecodeSkipsUnknownIdsAndReplacesBrokenUtf8) {
  const Tokenizer t = make(synthetic_json());
  EXPECT_EQ(t.decode(Ids{'a', -1, 1 << 30, 260, 'b'}), "ab");
  EXPECT_EQ(t.decode(Ids{0xE2, 'a'}),
            "\xEF\xBF\xBD"
            "a");
  EXPECT_EQ(t.decode(Ids{0xE2, 0x82, 0xAC}), "\xE2\x82\xAC");
  EXPECT_EQ(t.token_to_id("hello"), 259);
  EXPECT_EQ(t.id_to_token(256), "he");
  EXPECT_EQ(t.id_to_token(-5), "");
}

TEST(Tokenizer, AddedTokensMatchInRawTextAndInsideWords) {
  json j = synthetic_json();
  j["added_tokens"] = json::array({added_token("<s>", 260, true), added_token("<t>", 261, false)});
  const Tokenizer t = make(j);
  EXPECT_EQ(enc(t, "a<s>b<t>"), (Ids{'a', 260, 'b', 261}));
  EXPECT_EQ(enc(t, "<s"), (Ids{'<', 's'}));
  EXPECT_EQ(t.decode(Ids{'a', 260, 261}, false), "a<s><t>");
  EXPECT_EQ(t.decode(Ids{'a', 260, 261}, true), "a<t>");  // only special ones are skipped
  EXPECT_EQ(t.vocab_size(), 262u);
}

TEST(Tokenizer, AddedTokenIdsFollowHuggingFace) {
  // Not in the vocab: the next id after the vocab, whatever the file says; in the vocab: its id.
  json j = synthetic_json();
  j["added_tokens"] = json::array({added_token("<a>", 999, true), added_token("he", 5, true)});
  const Tokenizer t = make(j);
  EXPECT_EQ(t.token_to_id("<a>"), 260);
  EXPECT_EQ(t.token_to_id("he"), 256);
}

TEST(Tokenizer, LstripRstripAbsorbWhiteSpace) {
  json j = synthetic_json();
  j["added_tokens"] = json::array({added_token("<l>", 260, true, /*lstrip=*/true),
                                   added_token("<r>", 261, true, false, /*rstrip=*/true)});
  const Tokenizer t = make(j);
  EXPECT_EQ(enc(t, "a  <l> b"), (Ids{'a', 260, ' ', 'b'}));
  EXPECT_EQ(enc(t, "a <r>  b"), (Ids{'a', ' ', 261, 'b'}));
}

TEST(Tokenizer, SingleWordOnlyMatchesWholeWords) {
  json j = synthetic_json();
  j["added_tokens"] = json::array({added_token("<w>", 260, true, false, false, true)});
  const Tokenizer t = make(j);
  EXPECT_EQ(enc(t, "a <w> b"), (Ids{'a', ' ', 260, ' ', 'b'}));
  EXPECT_NE(enc(t, "a<w>"), (Ids{'a', 260}));
}

TEST(Tokenizer, NormalizedAddedTokensMatchAfterNfc) {
  json j = synthetic_json();
  // "\u00e9\u00e9" as a normalized token matches the decomposed form in the text.
  j["added_tokens"] =
      json::array({added_token("\xC3\xA9\xC3\xA9", 260, false, false, false, false, true),
                   added_token("e\xCC\x81!", 261, false)});
  const Tokenizer t = make(j);
  EXPECT_EQ(enc(t,
                "xe\xCC\x81"
                "e\xCC\x81y"),
            (Ids{'x', 260, 'y'}));
  // A non-normalized token matches the raw (decomposed) text before NFC.
  EXPECT_EQ(enc(t, "e\xCC\x81!"), (Ids{261}));
}

// Literal ranges (encode_into's third argument): a special token that would overlap one is not
// matched there, and the text is tokenized as the plain text it is; tokens not flagged special
// still match, and outside the ranges nothing changes.
TEST(Tokenizer, LiteralRangesKeepSpecialSpellingsAsText) {
  json j = synthetic_json();
  j["added_tokens"] =
      json::array({added_token("<s>", 260, true), added_token("<t>", 261, false),
                   added_token("<l>", 262, true, /*lstrip=*/true),
                   added_token("\xC3\xA9\xC3\xA9", 263, true, false, false, false, true)});
  const Tokenizer t = make(j);
  auto lit = [&](std::string_view text, std::vector<TextRange> r) {
    Ids ids;
    EXPECT_TRUE(t.encode_into(text, &ids, r).ok());
    return ids;
  };
  const std::string text = "a<s>b<s><t>c";
  EXPECT_EQ(enc(t, text), (Ids{'a', 260, 'b', 260, 261, 'c'}));
  EXPECT_EQ(lit(text, {{5, 11}}), (Ids{'a', 260, 'b', '<', 's', '>', 261, 'c'}));
  // Overlapping a token by one byte is enough; a range over plain text changes nothing.
  EXPECT_EQ(lit(text, {{3, 4}}), (Ids{'a', '<', 's', '>', 'b', 260, 261, 'c'}));
  EXPECT_EQ(lit(text, {{0, 1}, {11, 12}}), enc(t, text));
  // A literal lstrip token absorbs no white space.
  EXPECT_EQ(lit("a  <l>", {{3, 6}}), (Ids{'a', ' ', ' ', '<', 'l', '>'}));
  EXPECT_EQ(enc(t, "a  <l>"), (Ids{'a', 262}));
  // A normalized special token: matched after NFC, literal in its segment.
  const std::string decomposed = "xe\xCC\x81" "e\xCC\x81y";
  EXPECT_EQ(enc(t, decomposed), (Ids{'x', 263, 'y'}));
  EXPECT_EQ(lit(decomposed, {{1, 4}}), (Ids{'x', 0xC3, 0xA9, 0xC3, 0xA9, 'y'}));
}

TEST(Tokenizer, GptByteLevelRegexWhenUseRegex) {
  json j = synthetic_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  const Tokenizer t = make(j);
  EXPECT_EQ(enc(t, "hello hello"), (Ids{259, ' ', 259}));
}

TEST(TokenizerErrors, MissingFileAndInvalidJson) {
  auto r = Tokenizer::load("/nonexistent/dir");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("/nonexistent/dir/tokenizer.json': no such file"), std::string::npos)
      << r.message();
  EXPECT_NE(load_error(json::parse("[1]")).find("not a JSON object"), std::string::npos);
  auto bad = Tokenizer::from_json("{\"model\": ", "", "x.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("[tokenizer] 'x.json': invalid JSON"), std::string::npos);
}

TEST(TokenizerErrors, BadConfigFileIsNamed) {
  const auto dir = std::filesystem::temp_directory_path() / "qwen35_tok_cfg_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << synthetic_json().dump();
  std::ofstream(dir / "tokenizer_config.json") << "{not json";
  auto r = Tokenizer::load(dir.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tokenizer_config.json': invalid JSON"), std::string::npos)
      << r.message();
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": {"content": "he"}})";
  auto ok = Tokenizer::load(dir.string());
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->eos_id(), 256);
  std::filesystem::remove_all(dir);
}

struct BadCase {
  const char* what;
  void (*edit)(json&);
  const char* expect;
};

TEST(TokenizerErrors, UnsupportedFeaturesFailClosed) {
  const BadCase cases[] = {
      {"model type", [](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type"},
      {"no model", [](json& j) { j.erase("model"); }, "model: missing"},
      {"normalizer",
       [](json& j) {
         j["normalizer"] = {{"type", "NFKC"}};
       },
       "normalizer"},
      {"split behavior",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; },
       "pretokenizers[0].behavior"},
      {"pre-tokenizer type",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["type"] = "Whitespace"; },
       "unsupported type 'Whitespace'"},
      {"prefix space",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true; },
       "add_prefix_space"},
      {"bad regex",
       [](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
       "regex does not compile"},
      {"decoder", [](json& j) { j["decoder"] = nullptr; }, "decoder"},
      {"post",
       [](json& j) {
         j["post_processor"] = {{"type", "TemplateProcessing"}};
       },
       "post_processor"},
      {"padding",
       [](json& j) {
         j["padding"] = {{"strategy", "BatchLongest"}};
       },
       "padding"},
      {"byte fallback", [](json& j) { j["model"]["byte_fallback"] = true; }, "byte_fallback"},
      {"merge not pair", [](json& j) { j["model"]["merges"][1] = "l l l"; },
       "merges[1] is not a pair"},
      {"merge unknown", [](json& j) { j["model"]["merges"][2] = "he zz"; }, "merges[2]: 'zz'"},
      {"merged unknown", [](json& j) { j["model"]["merges"][0] = "e h"; },
       "merges[0]: merged token 'eh'"},
      {"vocab id", [](json& j) { j["model"]["vocab"]["he"] = -3; }, "model.vocab['he']"},
      {"dup id", [](json& j) { j["model"]["vocab"]["zz"] = 7; }, "id 7 is used by both"},
      {"wrong type", [](json& j) { j["model"]["ignore_merges"] = "yes"; },
       "unexpected JSON structure"},
      {"added not object", [](json& j) { j["added_tokens"] = json::array({1}); },
       "added_tokens[0]"},
  };
  for (const BadCase& c : cases) {
    json j = synthetic_json();
    c.edit(j);
    const std::string msg = load_error(j);
    EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.rfind("[tokenizer] ", 0), 0u) << c.what << ": " << msg;
  }
}

TEST(PreTokenizer, OnigurumaWhiteSpaceAndCaseFolding) {
  auto sp = RegexSplitter::create(
      R"((?i:'s|'t)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s+(?!\S)|\s+)", "t");
  ASSERT_TRUE(sp.ok()) << sp.message();
  auto pieces = [&](std::string_view s) {
    std::vector<std::pair<size_t, size_t>> p;
    EXPECT_TRUE(sp->split(s, &p).ok());
    std::vector<std::string> out;
    for (auto [b, e] : p) out.emplace_back(s.substr(b, e - b));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("a\xC2\x85'sy"), (V{"a", "\xC2\x85", "'s", "y"}));  // U+0085 is \s
  EXPECT_EQ(pieces("a'\xC5\xBFT"), (V{"a", "'\xC5\xBF", "T"}));        // U+017F folds to s
  EXPECT_EQ(pieces("12"), (V{"1", "2"}));
  EXPECT_EQ(pieces("a   b"), (V{"a", "  ", " b"}));
  // U+180E is not White_Space (PCRE2's own \s would say it is).
  EXPECT_EQ(pieces("\xE1\xA0\x8E"), (V{"\xE1\xA0\x8E"}));
  EXPECT_FALSE(translate_oniguruma(R"([\S])").ok());
}

}  // namespace
}  // namespace qwen35::tokenizer
