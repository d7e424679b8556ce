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

// Two 8-GPU nodes: n-0 held until 60m (time limit), n-1 free but for 4 GPUs
// held until 30m. A 2 x 8-GPU gang waits for both; a 4-GPU job behind it
// with a short or a long time limit.

struct Busy {
  ClusterConfig config = testing::Nodes(2);
  ClusterState st = MakeCluster(config);
  const TimePoint now = 0;
  explicit Busy(Duration follower_limit) {
    JobSpec a = GpuJob("a", 1, 8);
    a.time_limit = 60 * kMinute;
    StartJob(st, 1, a, {0}, 0xff, 0);
    JobSpec b = GpuJob("b", 1, 4);
    b.time_limit = 30 * kMinute;
    StartJob(st, 2, b, {1}, 0x0f, 0);
    JobSpec gang = GpuJob("gang", 2, 8);
    gang.priority = 1000;
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(3), gang, 1}).ok());
    JobSpec small = GpuJob("small", 1, 4);
    small.time_limit = follower_limit;
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(4), small, 2}).ok());
  }
};

TEST(Reserve, TheFirstBlockedJobHoldsGpusFromWhenTimeLimitsEnd) {
  Busy c(/*follower*/ 0);
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].job, JobId(3));
  EXPECT_EQ(r.reservations[0].start, 60 * kMinute);
  // The follower has no time limit: it may not take n-1's free GPUs the gang counts on.
  EXPECT_TRUE(r.placed.empty());
  bool small_reserved = false;
  for (const Waiting& w : r.pending) small_reserved = small_reserved || (w.job == JobId(4) && w.reason.code == ReasonCode::kReserved);
  EXPECT_TRUE(small_reserved);
}

TEST(Reserve, AJobThatEndsBeforeTheReservationBackfills) {
  Busy c(/*follower*/ 45 * kMinute);  // ends at 45m, before the gang's 60m
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.reservations.size(), 1u);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(4));
}

TEST(Reserve, BeyondTheWindowNothingIsHeld) {
  Busy c(/*follower*/ 0);
  CycleResult r;
  MakeScheduler(c.config, {.reservation_window = 30 * kMinute})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.reservations.empty());
  ASSERT_EQ(r.placed.size(), 1u);  // the follower takes n-1's free GPUs
  bool explained = false;
  for (const Waiting& w : r.pending) {
    explained = explained || (w.job == JobId(3) && w.reason.expected_start == 60 * kMinute &&
                              w.reason.message.find("beyond the reservation window (30m)") != std::string::npos);
  }
  EXPECT_TRUE(explained);
}

// A cycle that holds nothing for a job beyond the window says when that may
// change: when its earliest start comes within the window.
TEST(Reserve, BeyondTheWindowTheCycleSaysWhenItWouldHold) {
  Busy c(/*follower*/ 0);
  ASSERT_TRUE(c.st.Apply(JobCancelled{JobId(4), 3, "test"}).ok());
  CycleResult r;
  MakeScheduler(c.config, {.reservation_window = 30 * kMinute})->RunCycle(c.st.GetSnapshot(), c.now + 5 * kMinute, &r);
  EXPECT_TRUE(r.reservations.empty());
  EXPECT_TRUE(r.placed.empty());
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_EQ(r.unchanged_until, 30 * kMinute);  // 60m - 30m
  // Within the window it is held for (and a cycle that decides promises nothing).
  MakeScheduler(c.config, {.reservation_window = 30 * kMinute})->RunCycle(c.st.GetSnapshot(), 30 * kMinute, &r);
  EXPECT_EQ(r.reservations.size(), 1u);
}

TEST(Reserve, DepthZeroOrNoClockOrNoActionHoldNothing) {
  Busy c(/*follower*/ 0);
  CycleResult r;
  MakeScheduler(c.config, {.reservation_depth = 0})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.reservations.empty());
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), &r);
  EXPECT_TRUE(r.reservations.empty());
  ClusterConfig without = c.config;
  without.profile.actions = {"allocate", "preempt"};
  MakeScheduler(without)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.reservations.empty());
}

}  // namespace
}  // namespace rota::sched
