#include "core/gpu_history.h"

#include <gtest/gtest.h>

#include <climits>

#include "base/rng.h"

namespace rota {
namespace {

constexpr TimePoint kHourUs = 3600 * kMicrosPerSecond;

TEST(GpuHistory, BlocksStartOnTheirSpan) {
  const TimePoint t = 1'800'000'123LL * kMicrosPerSecond + 7;
  EXPECT_EQ(BlockStart(GpuHistoryBlock::kMinute, t) % kHourUs, 0);
  EXPECT_LE(BlockStart(GpuHistoryBlock::kMinute, t), t);
  EXPECT_GT(BlockStart(GpuHistoryBlock::kMinute, t) + kHourUs, t);
  EXPECT_EQ(BlockStart(GpuHistoryBlock::kHour, t) % (24 * kHourUs), 0);
  EXPECT_EQ(BlockStart(GpuHistoryBlock::kMinute, -1), -kHourUs);
  GpuHistoryBlock minutes, hours;
  hours.step_s = GpuHistoryBlock::kHour;
  EXPECT_EQ(minutes.size(), 60u);
  EXPECT_EQ(hours.size(), 24u);
}

TEST(GpuHistory, RollupWeighsActivityBySamplesAndAddsEnergy) {
  const std::vector<GpuPoint> points = {
      {.samples = 60, .activity = 90, .memory_peak = 70'000, .energy_j = 42'000},
      {.samples = 20, .activity = 10, .memory_peak = 9'000, .energy_j = 4'000},
      {},                                                                        // no report
      {.samples = 30, .activity = -1, .memory_peak = 1'000, .energy_j = 2'000},  // MIG: no utilisation
  };
  const GpuPoint p = Rollup(points);
  EXPECT_EQ(p.samples, 110);
  EXPECT_EQ(p.activity, 70);  // (60 x 90 + 20 x 10) / 80
  EXPECT_EQ(p.memory_peak, 70'000);
  EXPECT_EQ(p.energy_j, 48'000);
  EXPECT_EQ(Rollup({{}, {}}), GpuPoint{});
}

TEST(GpuHistory, PointsSurviveTheirEncodingAndIdleRunsCostLittle) {
  Rng rng(7);
  std::vector<GpuPoint> busy(60);
  for (GpuPoint& p : busy) {
    p.samples = 60;
    p.activity = 40 + static_cast<int32_t>(rng.Uniform(61));
    p.memory_peak = 60'000 + static_cast<int64_t>(rng.Uniform(2'000));
    p.energy_j = 30'000 + static_cast<int64_t>(rng.Uniform(12'000));
  }
  busy[10] = GpuPoint{};                                   // a missed report
  busy[11] = {.samples = 60, .activity = -1, .memory_peak = 0, .energy_j = 0};
  const std::string bytes = EncodeGpuPoints(busy);
  auto back = DecodeGpuPoints(bytes, 60);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, busy);
  EXPECT_LE(bytes.size(), 60u * 8);

  const std::vector<GpuPoint> idle(60, GpuPoint{.samples = 60, .activity = 0, .memory_peak = 0, .energy_j = 3'900});
  const std::string idle_bytes = EncodeGpuPoints(idle);
  EXPECT_LE(idle_bytes.size(), 8u);
  EXPECT_EQ(*DecodeGpuPoints(idle_bytes, 60), idle);
  EXPECT_EQ(*DecodeGpuPoints(EncodeGpuPoints(std::vector<GpuPoint>(24)), 24), std::vector<GpuPoint>(24));
}

TEST(GpuHistory, AnHourOfManySamplesSurvivesAndOverflowIsRefused) {
  // A fast meter: 60 minutes of 1,000,000 samples each roll up past a million.
  const GpuPoint hour = Rollup(std::vector<GpuPoint>(60, GpuPoint{.samples = 1'000'000, .activity = 50}));
  EXPECT_EQ(hour.samples, 60'000'000);
  std::vector<GpuPoint> day(24);
  day[3] = hour;
  EXPECT_EQ(*DecodeGpuPoints(EncodeGpuPoints(day), 24), day);
  // Points that do not add back within range are refused, not wrapped.
  std::string bytes = EncodeGpuPoints({GpuPoint{.samples = 1, .activity = 0, .memory_peak = INT64_MAX, .energy_j = 0}});
  bytes += EncodeGpuPoints({GpuPoint{.samples = 1, .activity = 0, .memory_peak = 1, .energy_j = 0}});
  auto bad = DecodeGpuPoints(bytes, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("out of range"), std::string::npos) << bad.status().message();
}

TEST(GpuHistory, MalformedBytesAreRefusedNamingWhatIsWrong) {
  const std::vector<GpuPoint> points(60, GpuPoint{.samples = 60, .activity = 50, .memory_peak = 100, .energy_j = 9});
  const std::string bytes = EncodeGpuPoints(points);
  auto short_block = DecodeGpuPoints(bytes, 30);  // the run is longer than the block
  ASSERT_FALSE(short_block.ok());
  EXPECT_NE(short_block.status().message().find("past the block"), std::string::npos);
  auto cut = DecodeGpuPoints(bytes.substr(0, bytes.size() - 1), 60);
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("malformed"), std::string::npos);
  auto few = DecodeGpuPoints(EncodeGpuPoints(std::vector<GpuPoint>(59)), 60);
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("59 points"), std::string::npos);
  std::string bad_activity = bytes;
  bad_activity[2] = static_cast<char>(200);
  EXPECT_FALSE(DecodeGpuPoints(bad_activity, 60).ok());
}

}  // namespace
}  // namespace rota
