#include "tokenizer/stop_matcher.h"

#include <gtest/gtest.h>

namespace qwen35::tokenizer {
namespace {

// Feeds pieces; returns everything emitted and whether it stopped.
std::pair<std::string, bool> feed(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  std::string out;
  bool stopped = false;
  for (const auto& p : pieces) {
    out += m.push(p, &stopped);
    if (stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopMatcher, MatchesAcrossPieces) {
  EXPECT_EQ(feed({"END"}, {"hello E", "N", "D and more"}), std::make_pair(std::string("hello "), true));
  EXPECT_EQ(feed({"END"}, {"hello EN", "X"}), std::make_pair(std::string("hello ENX"), false));
  EXPECT_EQ(feed({"\n\n", "##"}, {"a\n", "b#", "#c"}), std::make_pair(std::string("a\nb"), true));
  EXPECT_EQ(feed({}, {"a", "b"}), std::make_pair(std::string("ab"), false));
  EXPECT_EQ(feed({"x"}, {"x"}), std::make_pair(std::string(""), true));
  EXPECT_EQ(feed({"ab", "b"}, {"cab"}), std::make_pair(std::string("c"), true));  // earliest match wins
}

TEST(StopMatcher, HoldsBackOnlyPossiblePrefixes) {
  StopMatcher m({"</s>"});
  bool stopped = false;
  EXPECT_EQ(m.push("abc<", &stopped), "abc");
  EXPECT_EQ(m.push("/", &stopped), "");
  EXPECT_EQ(m.push("x", &stopped), "</x");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(m.push("é</s>tail", &stopped), "é");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(m.push("more", &stopped), "");
  EXPECT_EQ(m.flush(), "");
}

}  // namespace
}  // namespace qwen35::tokenizer
