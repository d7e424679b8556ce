#include "server/histogram.h"

#include <array>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

namespace rota::server {
namespace {

constexpr double kBounds[] = {0.001, 0.01, 0.5};

TEST(Histogram, AValueCountsInTheFirstBucketItDoesNotExceed) {
  EXPECT_EQ(BucketOf(kBounds, 0), 0u);
  EXPECT_EQ(BucketOf(kBounds, 0.001), 0u);  // le: a value on a bound is in its bucket
  EXPECT_EQ(BucketOf(kBounds, 0.0011), 1u);
  EXPECT_EQ(BucketOf(kBounds, 0.5), 2u);
  EXPECT_EQ(BucketOf(kBounds, 0.51), 3u);  // +Inf
  EXPECT_EQ(BucketOf(kBounds, 1e9), 3u);
}

TEST(Histogram, TheTextIsCumulativeWithInfSumAndCount) {
  const std::array<uint64_t, 4> counts = {2, 0, 3, 1};
  std::string out = "# TYPE x histogram\n";
  AppendHistogram(out, "x", kBounds, counts, 1.25, 6);
  EXPECT_EQ(out,
            "# TYPE x histogram\n"
            "x_bucket{le=\"0.001\"} 2\n"
            "x_bucket{le=\"0.01\"} 2\n"
            "x_bucket{le=\"0.5\"} 5\n"
            "x_bucket{le=\"+Inf\"} 6\n"
            "x_sum 1.250000\n"
            "x_count 6\n");
}

TEST(Histogram, MissingCountsAreZero) {
  // (The controller's cycle counts are sized at its first cycle.)
  std::string out;
  AppendHistogram(out, "y", kBounds, {}, 0, 9);
  EXPECT_EQ(out,
            "y_bucket{le=\"0.001\"} 0\ny_bucket{le=\"0.01\"} 0\ny_bucket{le=\"0.5\"} 0\ny_bucket{le=\"+Inf\"} 0\n"
            "y_sum 0.000000000\ny_count 0\n");
}

}  // namespace
}  // namespace rota::server
