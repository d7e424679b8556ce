#include <gtest/gtest.h>

#include "sched/plugins/builtin.h"
#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::kMinute;
using testing::MakeCluster;
using testing::MakeScheduler;
using testing::StartJob;

constexpr Duration kSecond = kMicrosPerSecond;

JobSpec Low(std::string name, int32_t gpus) {
  JobSpec s = GpuJob(std::move(name), 1, gpus);
  s.priority = 100;
  s.preemptible = true;
  return s;
}

ClusterConfig LearnedConfig() {
  ClusterConfig c = testing::Nodes(1);
  c.profile.plugins = {{"priority", 1}, {"learned", 1}, {"fifo", 1}, {"resource-fit", 1},
                       {"gang", 1},     {"topology", 1}, {"binpack", 1}};
  return c;
}

// A history: `short_jobs` 1-GPU jobs that ran 100 s and `long_jobs` that ran
// 100,000 s, one after another on GPU 0, each its own sweep (submitted more
// than a minute apart). `*t` moves past them; `*next` is the next id.
void Learn(ClusterState& st, TimePoint* t, uint64_t* next, int short_jobs, int long_jobs) {
  for (int k = 0; k < short_jobs + long_jobs; ++k) {
    const JobId id((*next)++);
    const Duration run = k < short_jobs ? 100 * kSecond : 100'000 * kSecond;
    ASSERT_TRUE(st.Apply(JobSubmitted{id, Low("past", 1), *t}).ok());
    ASSERT_TRUE(st.Apply(JobBound{id, {{0, 0, NodeId(0), 0x1}}, *t + kSecond}).ok());
    ASSERT_TRUE(st.Apply(JobFinished{id, JobOutcome::kSucceeded, *t + kSecond + run}).ok());
    *t += run + 2 * kMinute;
  }
}

// A one-node cluster under the learned order, past Learn's history: `t`
// is when it ends, `next` the next job id.
struct Learnt {
  ClusterConfig config = LearnedConfig();
  ClusterState st = MakeCluster(config);
  TimePoint t = kMinute;
  uint64_t next = 1;
  Learnt(int short_jobs, int long_jobs) { Learn(st, &t, &next, short_jobs, long_jobs); }
};

// Most finished jobs ran 100 GPU-seconds, a quarter 100,000: a newcomer
// (nothing attained) is likely short, a gang that has run 16 minutes on 8
// GPUs is likely long. The learned order puts the newcomer first and evicts
// the gang for it; priority and fifo alone do not.
TEST(Learned, ANewcomerEvictsAGangTheHistorySaysIsLong) {
  Learnt l(30, 10);
  auto& [config, st, t, next] = l;
  ASSERT_EQ(st.GetSnapshot().history().finished, 40);
  const TimePoint now = t + 1000 * kSecond;
  StartJob(st, next, Low("long", 8), {0}, 0xff, t);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(next + 1), Low("new", 8), now - 1}).ok());
  CycleResult r;
  // It has saved nothing yet: evicting it would throw its 16 minutes away.
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  // A checkpoint 1 minute ago: it would lose 8 GPU-minutes.
  ASSERT_TRUE(st.Apply(JobCheckpointed{JobId(next), now - kMinute, ""}).ok());
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(next));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(next + 1));
  ClusterConfig plain = testing::Nodes(1);
  MakeScheduler(plain)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  // Within the minimum run time it may not.
  MakeScheduler(config, {.min_runtime = 20 * kMinute})->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  // A restart (the journal's snapshot replayed) decides the same.
  ClusterState replay(config.topology);
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  MakeScheduler(config)->RunCycle(replay.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(next));
}

// When every job that finished ran long, a gang that has run 16 minutes is
// no more likely to run on than a newcomer: the newcomer waits.
TEST(Learned, WhenEveryJobRanLongANewcomerDoesNotEvict) {
  Learnt l(0, 20);
  auto& [config, st, t, next] = l;
  const TimePoint now = t + 1000 * kSecond;
  StartJob(st, next, Low("long", 8), {0}, 0xff, t);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(next + 1), Low("new", 8), now - 1}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
}

// A sweep's waiting job never evicts its running sibling (nothing tells
// them apart; taking turns only delays both), though another sweep's
// newcomer does; before 16 jobs have finished the order is least attained
// GPU-time first.
TEST(Learned, ASweepsWaitingJobDoesNotEvictItsRunningSibling) {
  ClusterConfig config = LearnedConfig();
  ClusterState st = MakeCluster(config);
  const TimePoint start = 10 * kMinute;
  const TimePoint now = start + 1000 * kSecond;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Low("a1", 8), start - 30 * kSecond}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Low("a2", 8), start - 10 * kSecond}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0xff}}, start}).ok());
  ASSERT_TRUE(st.Apply(JobCheckpointed{JobId(1), now - kMinute, ""}).ok());
  ASSERT_EQ(st.GetSnapshot().FindJob(JobId(2))->sweep, JobId(1));
  CycleResult r;
  auto s = MakeScheduler(config);
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), Low("b", 8), now - 1}).ok());
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(3));
}

// A job that has waited three days since its last attempt ended goes first,
// whatever it has attained.
TEST(Learned, AJobWaitingThreeDaysGoesFirst) {
  Learnt l(30, 10);
  auto& [config, st, t, next] = l;
  // Job `old` ran 16 minutes on 8 GPUs and was requeued at `t`; `fresh` came after.
  const JobId old(next), fresh(next + 1);
  ASSERT_TRUE(st.Apply(JobSubmitted{old, Low("old", 8), t - 1000 * kSecond}).ok());
  ASSERT_TRUE(st.Apply(JobBound{old, {{0, 0, NodeId(0), 0xff}}, t - 1000 * kSecond}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{old, t, "node lost"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{fresh, Low("fresh", 8), t + kMinute}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), t + 24 * 60 * kMinute, &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, fresh);
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), t + 3 * 24 * 60 * kMinute, &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, old);
}

// A job evicts no gang larger than itself (that would free GPUs it does not
// need and send the gang back to wait for a whole set again), unless it is
// starved.
TEST(Learned, AJobEvictsNoGangLargerThanItself) {
  std::unique_ptr<Plugin> p = BuiltinRegistry().Create("learned");
  const auto* order = dynamic_cast<const JobOrderPlugin*>(p.get());
  ASSERT_NE(order, nullptr);
  const JobOrderPlugin::VictimWork larger{0, 3600, true};
  EXPECT_FALSE(order->RankEvicts(-1e-2, -1e-6, larger));
  EXPECT_FALSE(order->RankEvicts(10, 4000, larger));          // least attained first
  EXPECT_TRUE(order->RankEvicts(-1e12 + 5, -2e-4, larger));   // starved
  EXPECT_FALSE(order->RankEvicts(-1e12 + 5, -2e-4, {2000, 3600, true}));  // starved, but it saved too little

  // Through a cycle, past a history where most jobs were short: a 1-GPU
  // newcomer does not evict the 8-GPU gang an 8-GPU newcomer evicts.
  Learnt l(30, 10);
  auto& [config, st, t, next] = l;
  const TimePoint now = t + 1000 * kSecond;
  StartJob(st, next, Low("long", 8), {0}, 0xff, t);
  ASSERT_TRUE(st.Apply(JobCheckpointed{JobId(next), now - kMinute, ""}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(next + 1), Low("small", 1), now - 1}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(next + 2), Low("large", 8), now - 1}).ok());
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(next));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(next + 2));
}

// With nothing to lose, the index must be at least twice the running
// gang's. A starved job, and least attained first before the index is
// ready, evict at any margin.
TEST(Learned, EvictsOnlyForTwiceTheIndex) {
  std::unique_ptr<Plugin> p = BuiltinRegistry().Create("learned");
  const auto* order = dynamic_cast<const JobOrderPlugin*>(p.get());
  ASSERT_NE(order, nullptr);
  EXPECT_TRUE(order->ranks());
  EXPECT_TRUE(order->preemptive());
  const JobOrderPlugin::VictimWork saved{0, 3600};  // it has just saved
  EXPECT_FALSE(order->RankEvicts(-3e-4, -2e-4, saved));  // ranks are minus the index
  EXPECT_TRUE(order->RankEvicts(-4e-4, -2e-4, saved));
  EXPECT_TRUE(order->RankEvicts(-1e12 + 5, -2e-4, saved));  // starved
  EXPECT_TRUE(order->RankEvicts(10, 4000, saved));           // least attained first
  EXPECT_FALSE(order->RankEvicts(4000, 10, saved));
}

// The work a gang would lose counts against the job: it evicts only if
// 1 / its index plus that work is at most 1 / (2 x the gang's index)
// (here 1,000 GPU-seconds + the loss against 5,000).
TEST(Learned, TheWorkAGangWouldLoseCountsAgainstEvictingIt) {
  std::unique_ptr<Plugin> p = BuiltinRegistry().Create("learned");
  const auto* order = dynamic_cast<const JobOrderPlugin*>(p.get());
  ASSERT_NE(order, nullptr);
  EXPECT_TRUE(order->RankEvicts(-1e-3, -1e-4, {3000, 10000}));
  EXPECT_TRUE(order->RankEvicts(-1e-3, -1e-4, {4000, 10000}));
  EXPECT_FALSE(order->RankEvicts(-1e-3, -1e-4, {4001, 10000}));
}

// A gang that has saved less than half of its current attempt is never
// evicted by the order, not even for a starved job or before the index is
// ready: jobs evicted before their first checkpoint again and again would
// make no progress at all. (On Philly's virtual cluster ed69ec, 1,137 1-GPU
// jobs on 8 GPUs, least attained first evicted 28,182 times and the average
// JCT was 4.5x Tiresias'.)
TEST(Learned, AGangThatSavedLessThanHalfItsAttemptIsNotEvicted) {
  std::unique_ptr<Plugin> p = BuiltinRegistry().Create("learned");
  const auto* order = dynamic_cast<const JobOrderPlugin*>(p.get());
  ASSERT_NE(order, nullptr);
  for (const JobOrderPlugin::VictimWork unsaved : {JobOrderPlugin::VictimWork{601, 1200}, {3600, 3600}}) {
    EXPECT_FALSE(order->RankEvicts(-1e-2, -1e-6, unsaved));
    EXPECT_FALSE(order->RankEvicts(-1e12 + 5, -2e-4, unsaved));  // starved
    EXPECT_FALSE(order->RankEvicts(10, 4000, unsaved));           // least attained first
  }
  EXPECT_TRUE(order->RankEvicts(10, 4000, {600, 1200}));  // half saved

  // Through a cycle: before the index is ready (least attained first), a
  // gang that has run 20 minutes on 8 GPUs is evicted for a newcomer only
  // once it has saved more than half of them.
  ClusterConfig config = LearnedConfig();
  ClusterState st = MakeCluster(config);
  const TimePoint start = 10 * kMinute, now = start + 20 * kMinute;
  StartJob(st, 1, Low("running", 8), {0}, 0xff, start);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Low("new", 8), now - 1}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_TRUE(st.Apply(JobCheckpointed{JobId(1), start + 9 * kMinute, ""}).ok());  // 11 of 20 minutes unsaved
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_TRUE(st.Apply(JobCheckpointed{JobId(1), start + 10 * kMinute, ""}).ok());  // 10 of 20
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(1));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(2));

  // A checkpoint of an earlier run saved nothing of this one: a gang that
  // checkpointed, was requeued and started again 20 minutes ago is not
  // evicted.
  ClusterState again = MakeCluster(config);
  StartJob(again, 1, Low("running", 8), {0}, 0xff, start - 2 * kMinute);
  ASSERT_TRUE(again.Apply(JobCheckpointed{JobId(1), start - kMinute, ""}).ok());
  ASSERT_TRUE(again.Apply(JobRequeued{JobId(1), start - kMinute / 2, "node lost"}).ok());
  ASSERT_TRUE(again.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0xff}}, start}).ok());
  ASSERT_TRUE(again.Apply(JobSubmitted{JobId(2), Low("new", 8), now - 1}).ok());
  MakeScheduler(config)->RunCycle(again.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());

  // A gang with a checkpoint grace saves on the eviction signal: it loses
  // nothing, so it may be evicted before any checkpoint.
  ClusterState graced = MakeCluster(config);
  JobSpec saves = Low("running", 8);
  saves.checkpoint.grace = 5 * kMinute;
  StartJob(graced, 1, saves, {0}, 0xff, start);
  ASSERT_TRUE(graced.Apply(JobSubmitted{JobId(2), Low("new", 8), now - 1}).ok());
  MakeScheduler(config)->RunCycle(graced.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(1));
}

}  // namespace
}  // namespace rota::sched
