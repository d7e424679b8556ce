#include "core/right_size.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

constexpr TimePoint kNow = 1'800'000'000LL * kMicrosPerSecond;

// One attempt of an hour on `gpus` whole GPUs of `model`, each sampled 3,600
// times: 90% of the samples at `busy_pct`, the rest at `top_pct`.
UsageRecord Attempt(std::string model, MemoryMiB gpu_memory, int32_t gpus, int32_t busy_pct, int32_t top_pct,
                    MemoryMiB peak, TimePoint ended_at = kNow) {
  UsageRecord r;
  r.job = JobId(1);
  r.gpu_model = std::move(model);
  r.gpu_memory = gpu_memory;
  r.gpus = gpus;
  r.replicas = 1;
  r.cpu = 4000;
  r.started_at = ended_at - 3600 * kMicrosPerSecond;
  r.ended_at = ended_at;
  r.activity.Add(busy_pct, int64_t{3240} * gpus);
  r.activity.Add(top_pct, int64_t{360} * gpus);
  r.gpu_memory_peak = peak;
  return r;
}

TEST(ActivityHistogram, PercentilesAreBucketEdgesAndMeansBucketMiddles) {
  ActivityHistogram h;
  EXPECT_EQ(h.Percentile(90), -1);
  h.Add(12, 90);   // bucket [10, 15)
  h.Add(100, 10);  // the 100% bucket
  EXPECT_EQ(h.Percentile(50), 15);
  EXPECT_EQ(h.Percentile(90), 15);
  EXPECT_EQ(h.Percentile(95), 100);
  EXPECT_EQ(h.Mean(), (90 * 125 + 10 * 1000) / 100 / 10 + 0);  // 12.5 x 0.9 + 100 x 0.1 = 21.25
  ActivityHistogram other;
  other.Add(100, 900);
  h.Merge(other);
  EXPECT_EQ(h.Percentile(50), 100);
}

TEST(RightSize, AnUnderUsedGpuFitsTheSmallestMigInstanceThatHoldsItsPeakAndActivity) {
  // Peak 9.8 GiB + 15% = 11.3 GiB: more than 1g.10gb holds; activity p90 15%
  // + 15% = 18% of a GPU: more than a 1g instance's 1/7 (14.3%). 2g.20gb
  // (2/7 = 28.6%, 20 GiB) holds both.
  const UsageRecord r = Attempt("H100", 80 * 1024, 1, 12, 30, 10035);
  const RightSize s = RecommendShape({&r}, kNow, {});
  ASSERT_TRUE(s.recommended) << s.summary;
  EXPECT_EQ(s.shape, "gpu: {mig: 2g.20gb}");
  EXPECT_EQ(s.summary, "peak 9.8 GiB of 80.0 GiB, GPU activity p90 15%: fits gpu: {mig: 2g.20gb}");
  EXPECT_EQ(s.fit_mig, "2g.20gb");
  EXPECT_GE(s.fit_memory, 10035);
}

TEST(RightSize, EightLightGpusFoldOntoFewer) {
  // p90 15% on each of 8 GPUs, +15%: 138% of one GPU, so 2; their peaks
  // folded, 8 x 8 GiB + 15% = 73.6 GiB, fit on one 80 GiB GPU.
  const UsageRecord r = Attempt("H100", 80 * 1024, 8, 10, 40, 8 * 1024);
  const RightSize s = RecommendShape({&r}, kNow, {});
  ASSERT_TRUE(s.recommended) << s.summary;
  EXPECT_EQ(s.shape, "gpus: 2");
  EXPECT_EQ(s.fit_gpus, 2);
}

TEST(RightSize, AModelWithoutMigGetsAFractionWithAMemoryBound) {
  // 5% -> the [5, 10) bucket, p90 10%, +15% = 11.5%: 0.15 of a GPU in
  // twentieths; 4 GiB + 15% = 4.6 GiB, bound at 5 GiB.
  const UsageRecord r = Attempt("L40S", 48 * 1024, 1, 5, 8, 4 * 1024);
  const RightSize s = RecommendShape({&r}, kNow, {});
  ASSERT_TRUE(s.recommended) << s.summary;
  EXPECT_EQ(s.shape, "gpu: {fraction: 0.15, memory: 5Gi}");
}

TEST(RightSize, ABusyOrBarelyMeasuredJobGetsNone) {
  const UsageRecord busy = Attempt("H100", 80 * 1024, 4, 95, 100, 70 * 1024);
  const RightSize b = RecommendShape({&busy}, kNow, {});
  EXPECT_FALSE(b.recommended) << b.summary;
  EXPECT_EQ(b.summary, "peak 70.0 GiB of 80.0 GiB per GPU on 4 GPUs, GPU activity p90 100%: the shape held fits");
  UsageRecord brief = Attempt("H100", 80 * 1024, 1, 2, 3, 1024);
  brief.activity = {};
  brief.activity.Add(2, 60);  // a minute: too little to say anything
  EXPECT_FALSE(RecommendShape({&brief}, kNow, {}).recommended);
  EXPECT_EQ(RecommendShape({&brief}, kNow, {}).activity_p90, -1);
  EXPECT_EQ(RecommendShape({&brief}, kNow, {}).summary, "measured for 1m of the 5m a recommendation needs");
  // Memory that needs the whole GPU keeps it, however idle.
  const UsageRecord full = Attempt("H100", 80 * 1024, 1, 2, 3, 75 * 1024);
  EXPECT_FALSE(RecommendShape({&full}, kNow, {}).recommended);
}

TEST(RightSize, RecentAttemptsOutweighOldOnes) {
  // A month-old busy attempt and an idle one from today: the old one's
  // weight is 2^-30 of the new one's (the floor of 1 in 1024), so the p90 is
  // today's. Its peak is older than three half-lives and is left out.
  const UsageRecord old = Attempt("H100", 80 * 1024, 1, 100, 100, 70 * 1024, kNow - 30 * 24 * 3600 * kMicrosPerSecond);
  const UsageRecord today = Attempt("H100", 80 * 1024, 1, 3, 4, 3 * 1024);
  const RightSize s = RecommendShape({&old, &today}, kNow, {});
  EXPECT_EQ(s.activity_p90, 5);
  EXPECT_EQ(s.gpu_memory_peak, 3 * 1024);
  EXPECT_EQ(s.shape, "gpu: {mig: 1g.10gb}");
}

}  // namespace
}  // namespace rota
