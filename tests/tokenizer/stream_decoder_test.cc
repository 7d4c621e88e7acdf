// StreamDecoder: holds back incomplete UTF-8, replaces invalid bytes exactly as decode() does.
#include <gtest/gtest.h>

#include <random>

#include "synthetic.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace qwen35::tokenizer {
namespace {

using Ids = std::vector<int32_t>;
constexpr const char* kFffd = "\xEF\xBF\xBD";

Tokenizer make() {
  auto r = Tokenizer::from_json(testing::synthetic_json().dump(), "", "test.json");
  if (!r.ok()) std::abort();
  return std::move(r).value();
}

TEST(StreamDecoder, HoldsBackIncompleteSequences) {
  const Tokenizer t = make();
  StreamDecoder sd(t);
  EXPECT_EQ(sd.push('a'), "a");
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push(0x82), "");
  EXPECT_EQ(sd.push(0xAC), "\xE2\x82\xAC");
  EXPECT_EQ(sd.push(0xF0), "");
  EXPECT_EQ(sd.flush(), kFffd);
  EXPECT_EQ(sd.flush(), "");
}

TEST(StreamDecoder, InvalidBytesAreReplacedAtOnce) {
  const Tokenizer t = make();
  StreamDecoder sd(t);
  EXPECT_EQ(sd.push(0xFF), kFffd);
  EXPECT_EQ(sd.push(0xE2), "");
  EXPECT_EQ(sd.push('a'), std::string(kFffd) + "a");
  EXPECT_EQ(sd.push(-1), "");  // unknown ids are skipped, as in decode()
  EXPECT_EQ(sd.push(259), "hello");
}

TEST(StreamDecoder, RandomBytesMatchDecode) {
  const Tokenizer t = make();
  std::mt19937 rng(42);
  // Bias towards UTF-8 lead and continuation bytes so that sequences are often valid.
  const int pool[] = {'a',  0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9F, 0x98, 0x80,
                      0x80, 0xBF, 0xED, 0xA0, 0xF4, 0x90, 0xC0, 0xFF, 259};
  for (int trial = 0; trial < 2000; ++trial) {
    Ids ids(rng() % 12);
    for (auto& id : ids) id = pool[rng() % std::size(pool)];
    StreamDecoder sd(t);
    std::string all;
    for (int32_t id : ids) {
      const std::string piece = sd.push(id);
      ASSERT_EQ(utf8_valid_prefix(piece), piece.size());
      all += piece;
    }
    all += sd.flush();
    ASSERT_EQ(all, t.decode(ids)) << "trial " << trial;
  }
}

TEST(Utf8, LossyUsesMaximalSubparts) {
  auto lossy = [](std::string_view s) {
    std::string out;
    append_lossy(s, true, &out);
    return out;
  };
  const std::string r = kFffd;
  EXPECT_EQ(lossy("\xF0\x80"), r + r);  // F0 80: 80 cannot follow F0
  EXPECT_EQ(lossy("\xE2\x82"
                  "A"),
            r + "A");                           // truncated 3-byte sequence: one U+FFFD
  EXPECT_EQ(lossy("\xED\xA0\x80"), r + r + r);  // surrogates are invalid
  EXPECT_EQ(lossy("\xF4\x8F\xBF\xBF"), "\xF4\x8F\xBF\xBF");
  EXPECT_EQ(lossy("\xC1\xBF"), r + r);
}

}  // namespace
}  // namespace qwen35::tokenizer
