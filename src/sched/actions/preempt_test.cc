#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::kMinute;
using testing::MakeCluster;
using testing::MakeScheduler;
using testing::StartJob;

JobSpec Low(std::string name, int32_t gpus) {
  JobSpec s = GpuJob(std::move(name), 1, gpus);
  s.priority = 100;
  s.preemptible = true;
  return s;
}

JobSpec High(std::string name, int32_t gpus) {
  JobSpec s = GpuJob(std::move(name), 1, gpus);
  s.priority = 1000;
  return s;
}

// One 8-GPU node held by two 4-GPU low jobs; a high 4-GPU job arrives.
ClusterConfig OneNode() {
  ClusterConfig config;
  config.node_groups.push_back(Group("n", 1, 8));
  return config;
}

struct TwoLow {
  ClusterConfig config = OneNode();
  ClusterState st = MakeCluster(config);
  TimePoint now = 1000 * kMinute;
  TwoLow(TimePoint first_started, TimePoint second_started) {
    StartJob(st, 1, Low("old", 4), {0}, 0x0f, first_started);
    StartJob(st, 2, Low("young", 4), {0}, 0xf0, second_started);
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(3), High("urgent", 4), now - 1}).ok());
  }
};

TEST(Preempt, EvictsTheGangThatLosesTheLeastWork) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 980 * kMinute);  // 4 x 100m vs 4 x 20m
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(2));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(3));
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kPreempting);
}

TEST(Preempt, ACheckpointMakesAnOldGangTheCheaperVictim) {
  // Without checkpoints young loses less (4 x 50m against 4 x 100m).
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 950 * kMinute);
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(2));
  // old saved a minute ago: it loses 4 x 1m now, and goes instead.
  ASSERT_TRUE(c.st.Apply(JobCheckpointed{JobId(1), 999 * kMinute, ""}).ok());
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(1));
}

TEST(Preempt, NeverBeforeTheMinimumRuntimeNorWithoutAClock) {
  TwoLow c(/*old*/ 995 * kMinute, /*young*/ 996 * kMinute);  // 5 and 4 minutes
  CycleResult r;
  auto s = MakeScheduler(c.config);
  s->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kInsufficientGpus);
  // With a 3-minute minimum both may go; without a clock, never.
  auto short_min = MakeScheduler(c.config, {.min_runtime = 3 * kMinute});
  short_min->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_EQ(r.preemptions.size(), 1u);
  short_min->RunCycle(c.st.GetSnapshot(), &r);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(Preempt, AtMostThePerHourCapOfEvictionsOfOneGang) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 900 * kMinute);
  CycleResult r;
  // Cap 0: no gang may be evicted at all.
  MakeScheduler(c.config, {.max_preemptions_per_hour = 0})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  MakeScheduler(c.config, {.max_preemptions_per_hour = 1})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_EQ(r.preemptions.size(), 1u);
}

TEST(Preempt, TheSearchBudgetBoundsHowManyBlockedJobsLookForVictims) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 900 * kMinute);
  CycleResult r;
  MakeScheduler(c.config, {.max_preemption_searches = 0})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(Preempt, AProfileWithoutItNeverEvicts) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 900 * kMinute);
  c.config.profile.actions = {"allocate", "reserve"};
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kInsufficientGpus);
}

TEST(Preempt, ANonPreemptibleGangIsNeverAVictim) {
  ClusterConfig config;
  config.node_groups.push_back(Group("n", 1, 8));
  ClusterState st = MakeCluster(config);
  JobSpec pinned = GpuJob("pinned", 1, 8);
  pinned.priority = 100;  // low, but not preemptible
  StartJob(st, 1, pinned, {0}, 0xff, 0);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), High("urgent", 8), 10}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), 1000 * kMinute, &r);
  EXPECT_TRUE(r.preemptions.empty());
}

}  // namespace
}  // namespace rota::sched
