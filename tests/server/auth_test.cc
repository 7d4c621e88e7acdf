// The server's small pure pieces: the constant-time key comparison and the JSON depth bound.
#include "server/auth.h"

#include <gtest/gtest.h>

#include <string>

#include "server/json_limits.h"

namespace qwen35::server {
namespace {

TEST(ConstantTimeEqual, ComparesContentsAndLengths) {
  EXPECT_TRUE(constant_time_equal("", ""));
  EXPECT_TRUE(constant_time_equal("sekret", "sekret"));
  EXPECT_FALSE(constant_time_equal("sekret", "sekreT"));
  EXPECT_FALSE(constant_time_equal("sekret", "Sekret"));
  // A prefix, or the key with bytes after it, is not the key: the length counts even though
  // the loop does not stop at the shorter string.
  EXPECT_FALSE(constant_time_equal("sekret", "sekre"));
  EXPECT_FALSE(constant_time_equal("sekre", "sekret"));
  EXPECT_FALSE(constant_time_equal("sekret", std::string("sekret\0", 7)));
  EXPECT_FALSE(constant_time_equal("", "x"));
  EXPECT_FALSE(constant_time_equal(std::string(1000, 'a'), std::string(999, 'a')));
  EXPECT_FALSE(constant_time_equal("\xff", "\x7f"));
}

TEST(ConstantTimeEqual, BearerHeader) {
  EXPECT_TRUE(bearer_matches("Bearer sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearer sekret2", "sekret"));
  // The scheme is case-insensitive (RFC 9110 §11.1) and followed by 1*SP; the key is exact.
  EXPECT_TRUE(bearer_matches("bearer sekret", "sekret"));
  EXPECT_TRUE(bearer_matches("BEARER sekret", "sekret"));
  EXPECT_TRUE(bearer_matches("bEaReR sekret", "sekret"));
  EXPECT_TRUE(bearer_matches("Bearer   sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearer SEKRET", "sekret"));
  EXPECT_FALSE(bearer_matches("bearer sekret ", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearer	sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearersekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearer", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearer ", "sekret"));
  EXPECT_FALSE(bearer_matches("Basic sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("Bearxr sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("sekret", "sekret"));
  EXPECT_FALSE(bearer_matches("", "sekret"));
  // Anthropic's clients send x-api-key; either header carries the key.
  EXPECT_TRUE(api_key_matches("", "sekret", "sekret"));
  EXPECT_TRUE(api_key_matches("Bearer sekret", "", "sekret"));
  EXPECT_TRUE(api_key_matches("Bearer wrong", "sekret", "sekret"));
  EXPECT_FALSE(api_key_matches("", "", "sekret"));
  EXPECT_FALSE(api_key_matches("sekret", "Bearer sekret", "sekret"));
  EXPECT_FALSE(api_key_matches("", "sekret2", "sekret"));
}

TEST(JsonLimits, DepthIsCheckedWhileParsing) {
  EXPECT_EQ(check_json("1", 0), JsonStatus::kOk);
  EXPECT_EQ(check_json("[]", 0), JsonStatus::kTooDeep);
  EXPECT_EQ(check_json("{\"a\":[1,{\"b\":2}]}", 3), JsonStatus::kOk);
  EXPECT_EQ(check_json("{\"a\":[1,{\"b\":2}]}", 2), JsonStatus::kTooDeep);
  EXPECT_EQ(check_json("[[],[],[]]", 2), JsonStatus::kOk);  // siblings do not add up
  EXPECT_EQ(check_json("{not json", 64), JsonStatus::kInvalid);
  EXPECT_EQ(check_json("[1] x", 64), JsonStatus::kInvalid);
  // A deep text is refused after max_depth brackets, even when it is cut off (not JSON at all).
  const std::string deep(1'000'000, '[');
  EXPECT_EQ(check_json(deep, 64), JsonStatus::kTooDeep);
  JsonStatus st;
  EXPECT_TRUE(parse_json(deep, 64, &st).is_discarded());
  EXPECT_EQ(st, JsonStatus::kTooDeep);
  auto j = parse_json("{\"a\":[1,2]}", 2, &st);
  EXPECT_EQ(st, JsonStatus::kOk);
  EXPECT_EQ(j["a"][1], 2);
}

}  // namespace
}  // namespace qwen35::server
