#include "server/gpu_history.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "core/usage_record.h"

namespace rota::server {
namespace {

constexpr TimePoint kSecond = kMicrosPerSecond;
constexpr TimePoint kDay0 = 1'800'057'600LL * kSecond;  // a UTC midnight

// A 10 s report window of one GPU: every sample at `pct`.
api::GpuTelemetry Window(int32_t index, int32_t pct, MemoryMiB peak, int64_t energy_mj) {
  api::GpuTelemetry g;
  g.index = index;
  g.samples = 10;
  g.activity.assign(ActivityHistogram::kBuckets, 0);
  g.activity[ActivityHistogram::Bucket(pct)] = 10;
  g.memory_peak = peak;
  g.energy_mj = energy_mj;
  return g;
}

using Key = std::tuple<std::string, int32_t, int32_t, TimePoint>;

// What a store would hold after `blocks` are written in order.
void Write(std::map<Key, GpuHistoryBlock>* stored, const std::vector<GpuHistoryBlock>& blocks) {
  for (const GpuHistoryBlock& b : blocks) (*stored)[{b.node, b.gpu, b.step_s, b.start}] = b;
}

TEST(GpuHistoryRecorder, MinutesFillHoursAndHoursFillTheDay) {
  GpuHistoryRecorder rec;
  std::map<Key, GpuHistoryBlock> stored;
  // Two hours and a half of reports every 10 s: GPU 0 at 90% for its first
  // hour and 10% after; GPU 1 idle; written every 5 minutes.
  const TimePoint end = kDay0 + 9000 * kSecond;
  for (TimePoint t = kDay0 + 10 * kSecond; t <= end; t += 10 * kSecond) {
    const bool first_hour = t <= kDay0 + 3600 * kSecond;
    rec.Fold("n-0", 8, {Window(0, first_hour ? 90 : 10, first_hour ? 60'000 : 20'000, 3'000'000), Window(1, 0, 0, 600'000)},
             t);
    if ((t - kDay0) % (300 * kSecond) == 0) Write(&stored, rec.Take(t));
  }
  Write(&stored, rec.Take(end + 60 * kSecond));
  EXPECT_EQ(rec.gpus(), 2u);
  // Three minute blocks per GPU (hours 0, 1 and the half of 2) and a day block.
  ASSERT_EQ(stored.size(), 8u);
  const GpuHistoryBlock& h0 = stored.at({"n-0", 0, 60, kDay0});
  // The first report of each minute lands on the minute's start (t = 60 s is
  // minute 1), so minute 0 has 5 windows and the others 6.
  EXPECT_EQ(h0.points[0].samples, 50);
  for (size_t m = 1; m < 60; ++m) {
    EXPECT_EQ(h0.points[m].samples, 60) << m;
    EXPECT_EQ(h0.points[m].activity, 93) << m;  // the 90-95% bucket's middle, rounded
    EXPECT_EQ(h0.points[m].memory_peak, 60'000);
    EXPECT_EQ(h0.points[m].energy_j, 18'000);   // 6 x 3,000 J
  }
  const GpuHistoryBlock& h1 = stored.at({"n-0", 0, 60, kDay0 + 3600 * kSecond});
  EXPECT_EQ(h1.points[1].activity, 13);
  EXPECT_EQ(h1.points[1].memory_peak, 20'000);
  const GpuHistoryBlock& h2 = stored.at({"n-0", 0, 60, kDay0 + 7200 * kSecond});
  EXPECT_EQ(h2.points[29].samples, 60);
  EXPECT_EQ(h2.points[30].samples, 10);  // t = 9000 s: the last minute's one window
  EXPECT_EQ(h2.points[31].samples, 0);
  const GpuHistoryBlock& day = stored.at({"n-0", 0, 3600, kDay0});
  EXPECT_EQ(day.points[0], Rollup(h0.points));
  EXPECT_EQ(day.points[1], Rollup(h1.points));
  EXPECT_EQ(day.points[2], Rollup(h2.points));
  EXPECT_EQ(day.points[1].energy_j, 360 * 3'000);
  EXPECT_EQ(day.points[3].samples, 0);
  EXPECT_EQ(stored.at({"n-0", 1, 3600, kDay0}).points[0].activity, 3);
  // Nothing changed: nothing to write.
  EXPECT_TRUE(rec.Take(end + 120 * kSecond).empty());
}

TEST(GpuHistoryRecorder, ARestartExtendsTheHourInsteadOfOverwritingIt) {
  std::map<Key, GpuHistoryBlock> stored;
  {
    GpuHistoryRecorder rec;
    for (TimePoint t = kDay0 + 10 * kSecond; t <= kDay0 + 1200 * kSecond; t += 10 * kSecond) {
      rec.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, t);
    }
    Write(&stored, rec.Take(kDay0 + 1260 * kSecond));
  }
  GpuHistoryRecorder again;
  std::vector<GpuHistoryBlock> current;
  for (const auto& [key, b] : stored) current.push_back(b);
  again.Warm(current, kDay0 + 1300 * kSecond);
  for (TimePoint t = kDay0 + 1800 * kSecond; t <= kDay0 + 1900 * kSecond; t += 10 * kSecond) {
    again.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, t);
  }
  Write(&stored, again.Take(kDay0 + 2000 * kSecond));
  const GpuHistoryBlock& hour = stored.at({"n-0", 0, 60, kDay0});
  EXPECT_EQ(hour.points[10].samples, 60);  // from before the restart
  EXPECT_EQ(hour.points[25].samples, 0);   // the server was down
  EXPECT_EQ(hour.points[30].samples, 60);  // after it
  EXPECT_EQ(stored.at({"n-0", 0, 3600, kDay0}).points[0], Rollup(hour.points));
}

TEST(GpuHistoryRecorder, AClockSteppedBackNeitherReopensNorDuplicatesABlock) {
  GpuHistoryRecorder rec;
  std::map<Key, GpuHistoryBlock> stored;
  size_t taken = 0;
  auto take = [&](TimePoint now) {
    std::vector<GpuHistoryBlock> blocks = rec.Take(now);
    std::set<Key> keys;
    for (const GpuHistoryBlock& b : blocks) EXPECT_TRUE(keys.insert({b.node, b.gpu, b.step_s, b.start}).second) << b.start;
    taken += blocks.size();
    Write(&stored, blocks);
  };
  const TimePoint ten = kDay0 + 10 * 3600 * kSecond;
  for (TimePoint t = ten - 600 * kSecond; t < ten; t += 10 * kSecond) rec.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, t);
  rec.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, ten + 5 * kSecond);   // 10:00:05
  rec.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, ten - 2 * kSecond);   // NTP steps back to 09:59:58
  rec.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, ten + 30 * kSecond);  // and on
  rec.Fold("n-0", 8, {Window(0, 50, 1000, 1000)}, ten + 70 * kSecond);
  take(ten + 200 * kSecond);
  const GpuHistoryBlock& nine = stored.at({"n-0", 0, 60, ten - 3600 * kSecond});
  EXPECT_EQ(nine.points[59].samples, 60);  // 09:59 as it was
  EXPECT_EQ(nine.points[50].samples, 60);
  const GpuHistoryBlock& now = stored.at({"n-0", 0, 60, ten});
  EXPECT_EQ(now.points[0].samples, 30);  // 10:00: its two windows and the stepped-back one
  EXPECT_EQ(now.points[1].samples, 10);
  EXPECT_GT(taken, 0u);
}

TEST(GpuHistoryRecorder, AStopMidMinuteWritesItAndTheNextStartAddsToIt) {
  std::map<Key, GpuHistoryBlock> stored;
  {
    GpuHistoryRecorder rec;
    rec.Fold("n-0", 8, {Window(0, 90, 2000, 3000)}, kDay0 + 610 * kSecond);
    rec.Fold("n-0", 8, {Window(0, 90, 4000, 3000)}, kDay0 + 620 * kSecond);
    Write(&stored, rec.Take(kDay0 + 625 * kSecond, /*all=*/true));  // the server stops
  }
  EXPECT_EQ(stored.at({"n-0", 0, 60, kDay0}).points[10].samples, 20);
  GpuHistoryRecorder again;
  std::vector<GpuHistoryBlock> current;
  for (const auto& [key, b] : stored) current.push_back(b);
  again.Warm(current, kDay0 + 630 * kSecond);
  again.Fold("n-0", 8, {Window(0, 10, 1000, 1000)}, kDay0 + 640 * kSecond);  // the same minute
  Write(&stored, again.Take(kDay0 + 700 * kSecond));
  const GpuPoint& p = stored.at({"n-0", 0, 60, kDay0}).points[10];
  EXPECT_EQ(p.samples, 30);
  EXPECT_EQ(p.activity, (93 * 20 + 13 * 10 + 15) / 30);  // both parts, weighted
  EXPECT_EQ(p.memory_peak, 4000);
  EXPECT_EQ(p.energy_j, 7);
}

TEST(GpuHistoryRecorder, TheMinuteUnderWayShowsInReadsBeforeItIsWritten) {
  GpuHistoryRecorder rec;
  rec.Fold("n-0", 8, {Window(0, 70, 5000, 2000)}, kDay0 + 70 * kSecond);
  api::GpuTelemetry exact = Window(0, 70, 5000, 2000);
  exact.activity_sum = 700;  // the agent's exact sum: no bucket middle
  rec.Fold("n-1", 8, {exact}, kDay0 + 70 * kSecond);
  // MIG mode: samples without utilisation; a window without samples is skipped.
  api::GpuTelemetry mig;
  mig.index = 1;
  mig.samples = 10;
  mig.memory_peak = 300;
  api::GpuTelemetry none;
  none.index = 2;
  rec.Fold("n-0", 8, {mig, none}, kDay0 + 80 * kSecond);
  auto minutes = rec.Current("n-0", GpuHistoryBlock::kMinute, kDay0 + 90 * kSecond);
  ASSERT_EQ(minutes.size(), 2u);
  EXPECT_EQ(minutes[0].gpu, 0);
  EXPECT_EQ(minutes[0].points[1].samples, 10);
  EXPECT_EQ(minutes[0].points[1].activity, 73);
  EXPECT_EQ(minutes[0].points[1].energy_j, 2);
  EXPECT_EQ(minutes[1].points[1].activity, -1);
  auto hours = rec.Current("n-0", GpuHistoryBlock::kHour, kDay0 + 90 * kSecond);
  ASSERT_EQ(hours.size(), 2u);
  EXPECT_EQ(hours[0].points[0].samples, 10);
  EXPECT_EQ(rec.Current("n-1", GpuHistoryBlock::kMinute, kDay0 + 90 * kSecond)[0].points[1].activity, 70);
  EXPECT_TRUE(rec.Current("n-2", GpuHistoryBlock::kMinute, kDay0).empty());
  // A GPU the node does not have (an agent naming index 9 of 8) is not kept.
  rec.Fold("n-3", 8, {Window(9, 50, 1, 1), Window(-1, 50, 1, 1)}, kDay0 + 70 * kSecond);
  EXPECT_TRUE(rec.Current("n-3", GpuHistoryBlock::kMinute, kDay0 + 90 * kSecond).empty());
}

}  // namespace
}  // namespace rota::server
