#include "base/rng.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

TEST(Rng, SameSeedSameSequence) {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    uint64_t x = a.Next();
    EXPECT_EQ(x, b.Next());
    differs |= x != c.Next();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, UniformStaysInRangeAndCoversIt) {
  Rng r(1);
  int seen[6] = {};
  for (int i = 0; i < 6000; ++i) {
    uint64_t v = r.Uniform(6);
    ASSERT_LT(v, 6u);
    ++seen[v];
  }
  for (int count : seen) EXPECT_GT(count, 800);
}

}  // namespace
}  // namespace rota
