#include "base/strings.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

TEST(SplitList, TheItemsBetweenCommasWithoutEmptyOnes) {
  EXPECT_EQ(SplitList("a,b,,c"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(SplitList(",x,"), (std::vector<std::string>{"x"}));
  EXPECT_TRUE(SplitList("").empty());
  EXPECT_EQ(SplitList("n=2"), (std::vector<std::string>{"n=2"}));
}

}  // namespace
TEST(FindControlCharacter, FindsTheFirstByteBelowASpaceOrDel) {
  EXPECT_EQ(FindControlCharacter("/data/set"), std::string_view::npos);
  EXPECT_EQ(FindControlCharacter(std::string_view("/\0/x", 4)), 1u);
  EXPECT_EQ(FindControlCharacter("a\r\nb"), 1u);
  EXPECT_EQ(FindControlCharacter("ab\x7f"), 2u);
  EXPECT_EQ(FindControlCharacter("caf\xc3\xa9"), std::string_view::npos);  // (UTF-8 is not control)
}

}  // namespace rota
