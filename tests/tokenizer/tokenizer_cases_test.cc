// Every fixture case must match the Hugging Face tokenizers output exactly: ids, decode(ids) and
// decode(ids, skip_special_tokens).
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "test_fixtures.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {
namespace {

using testing::Case;
using testing::fixture_tokenizer;
using testing::load_cases;

std::string ids_str(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

class FixtureCases : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureCases, EncodeMatchesEveryCase) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  const std::vector<Case> cases = load_cases(GetParam());
  ASSERT_EQ(cases.size(), 279u);
  int failures = 0;
  for (const Case& c : cases) {
    auto ids = tok.encode(c.text);
    ASSERT_TRUE(ids.ok()) << c.name << ": " << ids.message();
    if (*ids != c.ids && ++failures <= 10) {
      ADD_FAILURE() << c.name << ": got " << ids_str(*ids) << "\n want " << ids_str(c.ids);
    }
  }
  EXPECT_EQ(failures, 0) << "of " << cases.size() << " cases";
}

TEST_P(FixtureCases, DecodeMatchesEveryCase) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  for (const Case& c : load_cases(GetParam())) {
    EXPECT_EQ(tok.decode(c.ids, false), c.decoded) << c.name;
    EXPECT_EQ(tok.decode(c.ids, true), c.decoded_skip_special) << c.name;
  }
}

// Fed one token at a time, the stream decoder reproduces `decoded` and never emits a broken
// UTF-8 sequence.
TEST_P(FixtureCases, StreamDecodeMatchesEveryCase) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  for (const Case& c : load_cases(GetParam())) {
    for (bool skip : {false, true}) {
      StreamDecoder sd(tok, skip);
      std::string all;
      for (int32_t id : c.ids) {
        const std::string piece = sd.push(id);
        ASSERT_EQ(utf8_valid_prefix(piece), piece.size()) << c.name << ": invalid UTF-8 emitted";
        all += piece;
      }
      const std::string rest = sd.flush();
      ASSERT_EQ(utf8_valid_prefix(rest), rest.size()) << c.name;
      all += rest;
      EXPECT_EQ(all, skip ? c.decoded_skip_special : c.decoded) << c.name;
    }
  }
}

// encode() is const and thread-safe (the shared merge cache is locked): threads racing on a cold
// cache all get the fixture ids.
TEST_P(FixtureCases, ConcurrentEncodeMatches) {
  const Tokenizer& tok = fixture_tokenizer(GetParam());
  const std::vector<Case> cases = load_cases(GetParam());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < cases.size(); ++k) {
        const Case& c = cases[(k * 7 + t * 31) % cases.size()];
        auto ids = tok.encode(c.text);
        if (!ids.ok() || *ids != c.ids) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, FixtureCases, ::testing::Values("qwen3", "qwen35-like"),
                         [](const auto& info) {
                           return info.param == "qwen3" ? std::string("Qwen3")
                                                        : std::string("Qwen35Like");
                         });

TEST(FixtureTokenizers, AddedTokenIdsAndFlags) {
  const Tokenizer& q35 = fixture_tokenizer("qwen35-like");
  EXPECT_EQ(q35.vocab_size(), 248077u);
  EXPECT_EQ(q35.token_to_id("<|endoftext|>"), 248044);
  EXPECT_EQ(q35.token_to_id("<|im_end|>"), 248046);
  EXPECT_EQ(q35.token_to_id("<|audio_pad|>"), 248076);
  EXPECT_TRUE(q35.is_special(248046));
  EXPECT_FALSE(q35.is_special(248068));  // <think>
  EXPECT_EQ(q35.id_to_token(248068), "<think>");
  EXPECT_EQ(q35.token_to_id("no such token"), -1);
  const Tokenizer& q3 = fixture_tokenizer("qwen3");
  EXPECT_EQ(q3.vocab_size(), 151669u);
  EXPECT_EQ(q3.eos_id(), 151645);  // <|im_end|> from tokenizer_config.json
  EXPECT_EQ(q3.pad_id(), 151643);
  EXPECT_EQ(q3.bos_id(), -1);
  EXPECT_FALSE(q3.config().chat_template.empty());
}

}  // namespace
}  // namespace qwen35::tokenizer
