#include "core/result.h"

#include <gtest/gtest.h>

namespace qwen35::core {
namespace {

Result<int> half(int x) {
  if (x % 2) return error("[test] " + std::to_string(x) + " is odd");
  return x / 2;
}
Result<int> quarter(int x) {
  QWEN35_ASSIGN_OR_RETURN(int h, half(x));
  return half(h);
}
Status check_even(int x) {
  QWEN35_RETURN_IF_ERROR(half(x));
  return Status();
}

TEST(Result, PropagatesMessages) {
  EXPECT_EQ(*quarter(8), 2);
  EXPECT_FALSE(quarter(6).ok());
  EXPECT_EQ(quarter(6).message(), "[test] 3 is odd");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_EQ(check_even(5).message(), "[test] 5 is odd");
  EXPECT_EQ(error("x").with_context("[ctx]").message(), "[ctx]: x");
}

}  // namespace
}  // namespace qwen35::core
