#include <gtest/gtest.h>
TEST(TokenizeCli, Placeholder) {}
