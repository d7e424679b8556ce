#include "base/rng.h"

#include <gtest/gtest.h>

#include <cmath>

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

TEST(Rng, NormalHasMeanZeroAndUnitVariance) {
  Rng r(3);
  double sum = 0, sq = 0;
  int beyond2 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const double z = r.Normal();
    sum += z;
    sq += z * z;
    beyond2 += std::abs(z) > 2;
  }
  EXPECT_NEAR(sum / n, 0, 0.03);
  EXPECT_NEAR(sq / n, 1, 0.05);
  EXPECT_NEAR(beyond2 / static_cast<double>(n), 0.0455, 0.006);  // two-sided 2-sigma tail
}

}  // namespace
}  // namespace rota
