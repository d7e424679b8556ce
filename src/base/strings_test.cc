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
}  // namespace rota
