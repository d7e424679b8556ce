#include "server/job_lifecycle.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"
#include "server/decisions.h"

namespace rota::server {
namespace {

using sched::testing::GpuJob;
using sched::testing::Group;
using sched::testing::MakeCluster;

// One 8-GPU node "n-0" with job 1 (2 replicas, GPUs 0 and 1) running.
struct Running {
  ManualClock clock{1000 * kMicrosPerSecond};
  ClusterConfig config = Config();
  ClusterState st = MakeCluster(config);
  JobLifecycle lifecycle{&clock, 30 * kMicrosPerSecond};
  static ClusterConfig Config() {
    ClusterConfig c;
    c.node_groups.push_back(Group("n", 1, 8));
    return c;
  }
  explicit Running(JobSpec spec = GpuJob("j", 2, 1)) {
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(1), spec, 0}).ok());
    EXPECT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 1}, {0, 1, NodeId(0), 2}}, 10}).ok());
  }
  // Reports `tasks` from n-0 in one batch; the events it journaled.
  std::vector<Event> Report(std::vector<api::TaskReport> tasks) {
    Batch batch{&st};
    lifecycle.OnTaskReports(batch, "n-0", tasks);
    return batch.events;
  }
  const JobRecord& job() { return *st.GetSnapshot().FindJob(JobId(1)); }
};

api::TaskReport Exit(uint32_t replica, int32_t code) {
  return {.job = JobId(1), .task = 0, .replica = replica, .attempt = 0, .exited = true, .exit_code = code};
}

// Job 1 of Running, with a 60 s grace, stopping (Requeue): since `since` on
// the wall clock, noted at `steady` on the steady one.
struct Stopping : Running {
  TimePoint since = 0, steady = 0;
  Stopping() : Running(Graced()) {
    Batch batch{&st};
    lifecycle.Requeue(batch, job(), "requeued by alice", false);
    EXPECT_EQ(job().state, JobState::kPreempting);
    since = job().preempting_since;
    steady = clock.Steady();
  }
  static JobSpec Graced() {
    JobSpec spec = GpuJob("j", 2, 1);
    spec.checkpoint.grace = 60 * kMicrosPerSecond;
    return spec;
  }
  // A replica seen running `after` the stop was noted, on the steady clock.
  JobLifecycle::SeenRunningMap SeenAfter(Duration after) const { return {{JobId(1), {.steady = steady + after}}}; }
  // EndOverdue at `wall`, `after` the stop was noted on the steady clock: its batch.
  Batch EndAfter(const JobLifecycle::Overdue& overdue, TimePoint wall, Duration after,
                 const JobLifecycle::SeenRunningMap* seen = nullptr) {
    Batch batch{&st};
    lifecycle.EndOverdue(batch, overdue, wall, steady + after, seen);
    return batch;
  }
};

// A stopping job whose grace is past the admin's limit (stored before the
// limit was lowered) waits the limit, not its own grace: its nodes stop its
// tasks at the limit too (the agent takes the grace from the server's latest
// answer).
TEST(JobLifecycle, AStopWaitsAtMostTheGraceLimit) {
  JobSpec spec = GpuJob("j", 2, 1);
  spec.checkpoint.grace = 3600 * kMicrosPerSecond;
  Running r(spec);
  JobLifecycle limited{&r.clock, 30 * kMicrosPerSecond, 0, 120 * kMicrosPerSecond};
  Batch batch{&r.st};
  limited.Requeue(batch, r.job(), "requeued by alice", false);
  ASSERT_EQ(r.job().state, JobState::kPreempting);
  const TimePoint since = r.job().preempting_since;
  const std::vector<JobId> ids = {JobId(1)};
  EXPECT_TRUE(limited.FindOverdue(r.st.GetSnapshot(), ids, since + 150 * kMicrosPerSecond).empty());
  EXPECT_EQ(limited.FindOverdue(r.st.GetSnapshot(), ids, since + 151 * kMicrosPerSecond).unstopped.size(), 1u);
  // Without a limit, its own hour.
  EXPECT_TRUE(r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, since + 3630 * kMicrosPerSecond).empty());
  EXPECT_EQ(r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, since + 3631 * kMicrosPerSecond).unstopped.size(), 1u);
}

// A stop's grace is measured on the steady clock too, from when this server
// saw it begin: the wall clock stepped forward (the journal's times) does
// not end a stop while its replicas may still be saving.
TEST(JobLifecycle, AStepOfTheWallClockEndsNoStopEarly) {
  Stopping r;
  ASSERT_EQ(r.job().state, JobState::kPreempting);
  const TimePoint since = r.since;
  const TimePoint steady = r.steady;  // (the stop noted at it)
  const std::vector<JobId> ids = {JobId(1)};
  const TimePoint stepped = since + 3600 * kMicrosPerSecond;  // the wall clock, an hour on
  const auto overdue = r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, stepped);
  ASSERT_EQ(overdue.unstopped.size(), 1u);  // (by the wall clock)
  Batch early{&r.st};
  r.lifecycle.EndOverdue(early, overdue, stepped, steady + 5 * kMicrosPerSecond);
  EXPECT_TRUE(early.events.empty()) << "a stop ended 5 s into its 60 s grace";
  Batch late{&r.st};
  r.lifecycle.EndOverdue(late, overdue, stepped, steady + 91 * kMicrosPerSecond);
  ASSERT_EQ(late.events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JobRequeued>(late.events[0]));
  // A replica seen running 30 s in: from then, on the steady clock too.
  Stopping seen_r;
  const auto seen_overdue = seen_r.lifecycle.FindOverdue(seen_r.st.GetSnapshot(), ids, stepped);
  ASSERT_EQ(seen_overdue.unstopped.size(), 1u);
  const auto seen = seen_r.SeenAfter(30 * kMicrosPerSecond);
  EXPECT_TRUE(seen_r.EndAfter(seen_overdue, stepped, 91 * kMicrosPerSecond, &seen).events.empty())
      << "a stop ended 61 s after a replica was seen running";
  EXPECT_EQ(seen_r.EndAfter(seen_overdue, stepped, 121 * kMicrosPerSecond, &seen).events.size(), 1u);
}

// The wall clock stepped an hour back keeps no stop this server saw begin
// past its grace: on the steady clock it is due (SteadyDue), from when a
// replica was last seen running (for at most kStopHold), and the gang is
// requeued though FindOverdue, on the wall clock, finds nothing. Before, its
// GPUs stayed held for the hour.
TEST(JobLifecycle, AWallClockSteppedBackKeepsNoStopPastItsGrace) {
  Stopping r;
  ASSERT_EQ(r.job().state, JobState::kPreempting);
  const TimePoint since = r.since, steady = r.steady;
  const std::vector<JobId> ids = {JobId(1)};
  const TimePoint stepped = since - 3600 * kMicrosPerSecond;  // the wall clock, an hour back
  const auto overdue = r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, stepped);
  ASSERT_TRUE(overdue.empty());  // (by the wall clock)
  // Its grace (60 s) and slack (30 s): not before 90 s on the steady clock.
  EXPECT_FALSE(r.lifecycle.SteadyDue(steady + 29 * kMicrosPerSecond));
  EXPECT_TRUE(r.lifecycle.SteadyDue(steady + 31 * kMicrosPerSecond));  // (looked at from its slack on)
  Batch early{&r.st};
  r.lifecycle.EndOverdue(early, overdue, stepped, steady + 31 * kMicrosPerSecond);
  EXPECT_TRUE(early.events.empty()) << "a stop ended 31 s into its 60 s grace";
  EXPECT_FALSE(r.lifecycle.SteadyDue(steady + 90 * kMicrosPerSecond));
  // A replica seen running 20 s in: from then.
  const auto seen = r.SeenAfter(20 * kMicrosPerSecond);
  EXPECT_TRUE(r.EndAfter(overdue, stepped, 91 * kMicrosPerSecond, &seen).events.empty())
      << "a stop ended 71 s after a replica was seen running";
  Batch late = r.EndAfter(overdue, stepped, 111 * kMicrosPerSecond, &seen);
  ASSERT_EQ(late.events.size(), 1u);
  const auto& requeued = std::get<JobRequeued>(late.events[0]);
  EXPECT_EQ(requeued.id, JobId(1));
  EXPECT_NE(requeued.reason.find("(did not stop within its grace period)"), std::string::npos) << requeued.reason;
  EXPECT_EQ(r.job().state, JobState::kPending);
  // Were the batch refused by the journal (the controller puts the state
  // back, then runs its undo), the stop's record would be back too.
  EXPECT_FALSE(r.lifecycle.Stopping(JobId(1)));
  for (auto it = late.undo.rbegin(); it != late.undo.rend(); ++it) (*it)();
  EXPECT_TRUE(r.lifecycle.Stopping(JobId(1)));
}

// A time limit is measured on the steady clock too, from when this server
// bound the attempt: the wall clock stepped an hour forward (a VM resumed,
// a clock set by hand) does not fail a job 5 s into its minute. A job bound
// before this server started has only the journal's times.
TEST(JobLifecycle, AStepOfTheWallClockEndsNoJobBeforeItsTimeLimit) {
  JobSpec spec = GpuJob("j", 2, 1);
  spec.time_limit = 60 * kMicrosPerSecond;
  Running r(spec);  // job 1, bound at 10 us before this lifecycle: the wall clock's alone
  ASSERT_TRUE(r.st.Apply(JobSubmitted{JobId(2), spec, 0}).ok());
  const TimePoint bound_at = r.clock.Now();
  const TimePoint steady = r.clock.Steady();
  {
    Batch batch{&r.st};
    std::vector<Event> decided = {JobBound{JobId(2), {{0, 0, NodeId(0), 4}, {0, 1, NodeId(0), 8}}, bound_at}};
    ApplyDecisions(batch, decided, r.lifecycle);
    ASSERT_EQ(r.st.GetSnapshot().FindJob(JobId(2))->state, JobState::kRunning);
  }
  const std::vector<JobId> ids = {JobId(1), JobId(2)};
  const TimePoint stepped = bound_at + 3600 * kMicrosPerSecond;  // the wall clock, an hour on
  const auto overdue = r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, stepped);
  ASSERT_EQ(overdue.expired.size(), 2u);  // (by the wall clock)
  Batch early{&r.st};
  r.lifecycle.EndOverdue(early, overdue, stepped, steady + 5 * kMicrosPerSecond);
  ASSERT_EQ(early.events.size(), 1u) << "job 2 failed 5 s into its 60 s limit";
  EXPECT_EQ(std::get<JobFinished>(early.events[0]).id, JobId(1));  // (bound before: the wall clock's)
  Batch late{&r.st};
  r.lifecycle.EndOverdue(late, overdue, stepped, steady + 61 * kMicrosPerSecond);
  ASSERT_EQ(late.events.size(), 1u);
  const auto& ended = std::get<JobFinished>(late.events[0]);
  EXPECT_EQ(ended.id, JobId(2));
  EXPECT_EQ(ended.outcome, JobOutcome::kFailed);
  EXPECT_NE(ended.reason.find("time limit 1m reached"), std::string::npos) << ended.reason;
}

// The wall clock stepped an hour back keeps no job this server bound past
// its time limit: on the steady clock it is due (SteadyDue, read off the
// actor), and ends at its start plus what it ran, not at the stepped time.
TEST(JobLifecycle, AWallClockSteppedBackKeepsNoJobPastItsTimeLimit) {
  JobSpec spec = GpuJob("j", 2, 1);
  spec.time_limit = 60 * kMicrosPerSecond;
  Running r(spec);
  ASSERT_TRUE(r.st.Apply(JobSubmitted{JobId(2), spec, 0}).ok());
  const TimePoint bound_at = r.clock.Now();
  const TimePoint steady = r.clock.Steady();
  EXPECT_FALSE(r.lifecycle.SteadyDue(steady + 3600 * kMicrosPerSecond));  // (nothing bound by it yet)
  {
    Batch batch{&r.st};
    std::vector<Event> decided = {JobBound{JobId(2), {{0, 0, NodeId(0), 4}, {0, 1, NodeId(0), 8}}, bound_at}};
    ApplyDecisions(batch, decided, r.lifecycle);
    ASSERT_EQ(r.st.GetSnapshot().FindJob(JobId(2))->state, JobState::kRunning);
  }
  const TimePoint back = bound_at - 3600 * kMicrosPerSecond + 61 * kMicrosPerSecond;  // 61 s on, an hour back
  const std::vector<JobId> ids = {JobId(2)};
  const auto overdue = r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, back);
  EXPECT_TRUE(overdue.empty());  // (the wall clock says 59 min before it began)
  EXPECT_FALSE(r.lifecycle.SteadyDue(steady + 59 * kMicrosPerSecond));
  Batch early{&r.st};
  r.lifecycle.EndOverdue(early, overdue, back, steady + 59 * kMicrosPerSecond);
  EXPECT_TRUE(early.events.empty());
  ASSERT_TRUE(r.lifecycle.SteadyDue(steady + 61 * kMicrosPerSecond));
  Batch late{&r.st};
  r.lifecycle.EndOverdue(late, overdue, back, steady + 61 * kMicrosPerSecond);
  ASSERT_EQ(late.events.size(), 1u) << "job 2 ran on past its 60 s limit";
  const auto& ended = std::get<JobFinished>(late.events[0]);
  EXPECT_EQ(ended.id, JobId(2));
  EXPECT_EQ(ended.outcome, JobOutcome::kFailed);
  EXPECT_EQ(ended.at, bound_at + 61 * kMicrosPerSecond);
  EXPECT_NE(ended.reason.find("time limit 1m reached"), std::string::npos) << ended.reason;
  EXPECT_FALSE(r.lifecycle.SteadyDue(steady + 3600 * kMicrosPerSecond));  // (none left)
}

TEST(JobLifecycle, AJobSucceedsWhenEveryReplicaHasExitedZero) {
  Running r;
  EXPECT_TRUE(r.Report({Exit(0, 0)}).empty());  // one of two: still running
  const auto events = r.Report({Exit(1, 0)});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobFinished>(events[0]));
  EXPECT_EQ(std::get<JobFinished>(events[0]).outcome, JobOutcome::kSucceeded);
  EXPECT_EQ(r.job().state, JobState::kSucceeded);
}

// A task that ended while no agent ran is reported when an agent finds it,
// with how long ago it ended (its exit file's age, on the node's clock): the
// job ends then, with its last replica, within its attempt; not when it was
// found. A failure while other replicas may still run ends the attempt now.
TEST(JobLifecycle, AnExitFoundLateCountsFromWhenTheTaskEnded) {
  Running r;  // bound at 10 us; now is 1,000 s
  api::TaskReport first = Exit(0, 0), second = Exit(1, 0);
  first.ended_ago = 600 * kMicrosPerSecond;
  second.ended_ago = 700 * kMicrosPerSecond;
  auto events = r.Report({first, second});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobFinished>(events[0]));
  EXPECT_EQ(std::get<JobFinished>(events[0]).at, 400 * kMicrosPerSecond);
  EXPECT_EQ(r.job().finished_at, 400 * kMicrosPerSecond);
  // Not before the attempt began.
  Running early;
  first.ended_ago = 2000 * kMicrosPerSecond;
  second.ended_ago = 0;  // (just now)
  EXPECT_TRUE(early.Report({first}).empty());
  events = early.Report({second});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<JobFinished>(events[0]).at, 1000 * kMicrosPerSecond);
  // A failure with a replica still running (not reported): the attempt ends now.
  Running running;
  first.exit_code = 2;
  events = running.Report({first});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<JobFinished>(events[0]).at, 1000 * kMicrosPerSecond);
  // The last replica's failure, the others ended: when it ended.
  Running last;
  first = Exit(0, 0);
  first.ended_ago = 600 * kMicrosPerSecond;
  second = Exit(1, 3);
  second.ended_ago = 500 * kMicrosPerSecond;
  EXPECT_TRUE(last.Report({first}).empty());
  events = last.Report({second});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<JobFinished>(events[0]).at, 500 * kMicrosPerSecond);
  EXPECT_EQ(std::get<JobFinished>(events[0]).reason, "worker-1 exited with code 3; no restarts left");
}

TEST(JobLifecycle, AFailedReplicaEndsTheAttemptAsThePolicyAllows) {
  Running never;  // restart: never
  auto events = never.Report({Exit(1, 3)});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobFinished>(events[0]));
  EXPECT_EQ(std::get<JobFinished>(events[0]).reason, "worker-1 exited with code 3; no restarts left");
  JobSpec retry = GpuJob("j", 2, 1);
  retry.restart = {RestartPolicy::kOnFailure, 2};
  Running once(retry);
  // (Its other replica ended in the same report: nothing is left to stop.)
  events = once.Report({Exit(0, 1), Exit(1, 143)});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JobRequeued>(events[0]));
  EXPECT_EQ(once.job().state, JobState::kPending);
}

// A rank never runs beside its own next attempt: a gang whose rank failed
// while another still runs stops first (it keeps its GPUs, its tasks leave
// their agents' answers), and is requeued, as the failure counts, once the
// other has stopped. No eviction is recorded.
TEST(JobLifecycle, AGangRestartsOnlyOnceEveryReplicaHasStopped) {
  JobSpec retry = GpuJob("j", 2, 1);
  retry.restart = {RestartPolicy::kOnFailure, 2};
  Running r(retry);
  auto events = r.Report({Exit(0, 1)});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobPreempting>(events[0]));
  EXPECT_TRUE(std::get<JobPreempting>(events[0]).restart);
  EXPECT_EQ(r.job().state, JobState::kPreempting);
  EXPECT_TRUE(r.job().restarting);
  EXPECT_TRUE(r.job().preempted_at.empty());
  EXPECT_EQ(r.job().placement.size(), 2u);  // its GPUs stay held
  EXPECT_EQ(r.job().last_requeue_reason, "worker-0 exited with code 1");
  EXPECT_TRUE(r.Report({Exit(0, 1)}).empty());  // the same exit again
  events = r.Report({Exit(1, 143)});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobRequeued>(events[0]));
  EXPECT_TRUE(std::get<JobRequeued>(events[0]).failed);
  EXPECT_EQ(std::get<JobRequeued>(events[0]).reason, "worker-0 exited with code 1");
  EXPECT_EQ(r.job().state, JobState::kPending);
  EXPECT_EQ(r.job().failed_restarts, 1);
  EXPECT_FALSE(r.job().restarting);
  // A node's full list of what it runs (as of an answer since the stop)
  // that misses the other replica: it stopped. One as of an older answer
  // (the agent may yet start it) proves nothing.
  Running listed(retry);
  ASSERT_EQ(listed.Report({Exit(0, 1)}).size(), 1u);
  const uint64_t stop = listed.st.GetSnapshot().revision();
  Batch older{&listed.st};
  listed.lifecycle.OnTaskReports(older, "n-0", {}, stop - 1);
  EXPECT_TRUE(older.events.empty());
  Batch running{&listed.st};
  listed.lifecycle.OnTaskReports(running, "n-0", {{.job = JobId(1), .replica = 1}}, stop);
  EXPECT_TRUE(running.events.empty());
  Batch missing{&listed.st};
  listed.lifecycle.OnTaskReports(missing, "n-0", {}, stop);
  ASSERT_EQ(missing.events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobRequeued>(missing.events[0]));
  EXPECT_TRUE(std::get<JobRequeued>(missing.events[0]).failed);
  // One whose other replica never reports is requeued once its grace (plus
  // slack) and a fence have both passed: a silent node's copy has stopped.
  Running silent(retry);
  JobLifecycle fenced{&silent.clock, 30 * kMicrosPerSecond, 45 * kMicrosPerSecond};
  Batch batch{&silent.st};
  fenced.Requeue(batch, silent.job(), "requeued by alice", false);
  ASSERT_EQ(silent.job().state, JobState::kPreempting);
  const TimePoint since = silent.job().preempting_since;
  const std::vector<JobId> ids = {JobId(1)};
  EXPECT_TRUE(fenced.FindOverdue(silent.st.GetSnapshot(), ids, since + 44 * kMicrosPerSecond).empty());
  // A replica its node still listed running 40 s in: from then.
  const JobLifecycle::SeenRunningMap seen = {{JobId(1), {.wall = since + 40 * kMicrosPerSecond}}};
  EXPECT_TRUE(fenced.FindOverdue(silent.st.GetSnapshot(), ids, since + 46 * kMicrosPerSecond, &seen).empty());
  EXPECT_TRUE(fenced.FindOverdue(silent.st.GetSnapshot(), ids, since + 85 * kMicrosPerSecond, &seen).empty());
  EXPECT_EQ(fenced.FindOverdue(silent.st.GetSnapshot(), ids, since + 86 * kMicrosPerSecond, &seen).unstopped.size(), 1u);
  // ... but for at most kStopHold past the stop's start.
  const JobLifecycle::SeenRunningMap forever = {{JobId(1), {.wall = since + 3600 * kMicrosPerSecond}}};
  const TimePoint held = since + JobLifecycle::kStopHold + 45 * kMicrosPerSecond;
  EXPECT_TRUE(fenced.FindOverdue(silent.st.GetSnapshot(), ids, held, &forever).empty());
  EXPECT_EQ(fenced.FindOverdue(silent.st.GetSnapshot(), ids, held + kMicrosPerSecond, &forever).unstopped.size(), 1u);
  const auto overdue = fenced.FindOverdue(silent.st.GetSnapshot(), ids, since + 46 * kMicrosPerSecond);
  ASSERT_EQ(overdue.unstopped.size(), 1u);
  Batch late{&silent.st};
  fenced.EndOverdue(late, overdue, since + 46 * kMicrosPerSecond);
  ASSERT_EQ(late.events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobRequeued>(late.events[0]));
  EXPECT_FALSE(std::get<JobRequeued>(late.events[0]).failed);
  EXPECT_EQ(std::get<JobRequeued>(late.events[0]).reason,
            "requeued by alice (did not stop within its grace period)");
}

// Replicas on a node lost past its fence have stopped themselves: the gang
// stops its others, and is requeued once they have (or at once, if none).
TEST(JobLifecycle, ANodeFencedStopsTheGangsOtherReplicasFirst) {
  ManualClock clock{1000 * kMicrosPerSecond};
  ClusterConfig config;
  config.node_groups.push_back(Group("n", 2, 8));
  ClusterState st = MakeCluster(config);
  JobLifecycle lifecycle{&clock, 30 * kMicrosPerSecond};
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), GpuJob("j", 2, 1), 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 1}, {0, 1, NodeId(1), 1}}, 10}).ok());
  Batch batch{&st};
  lifecycle.NodeFenced(batch, *st.GetSnapshot().FindJob(JobId(1)), NodeId(1), "node n-1 lost");
  ASSERT_EQ(batch.events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobPreempting>(batch.events[0]));
  Batch report{&st};
  lifecycle.OnTaskReports(report, "n-0", {Exit(0, 143)});
  ASSERT_EQ(report.events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobRequeued>(report.events[0]));
  EXPECT_EQ(std::get<JobRequeued>(report.events[0]).reason, "node n-1 lost");
  EXPECT_FALSE(std::get<JobRequeued>(report.events[0]).failed);
  // Both nodes fenced, one after the other: requeued with the second.
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 1}, {0, 1, NodeId(1), 1}}, 20}).ok());
  Batch first{&st};
  lifecycle.NodeFenced(first, *st.GetSnapshot().FindJob(JobId(1)), NodeId(0), "node n-0 lost");
  Batch second{&st};
  lifecycle.NodeFenced(second, *st.GetSnapshot().FindJob(JobId(1)), NodeId(1), "node n-1 lost");
  ASSERT_EQ(second.events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JobRequeued>(second.events[0]));
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->state, JobState::kPending);
}

TEST(JobLifecycle, AnElasticJobRestartsOnlyTheFailedRank) {
  JobSpec el = GpuJob("el", 2, 1);
  el.elastic_min_replicas = 1;
  el.restart = {RestartPolicy::kOnFailure, 3};
  Running r(el);
  const auto events = r.Report({{.job = JobId(1), .replica = 1, .exited = true, .exit_code = 9, .exit_reason = "oom"}});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<RankRestarted>(events[0]));
  EXPECT_EQ(std::get<RankRestarted>(events[0]).reason, "worker-1 was OOM-killed; restarted alone");
  EXPECT_EQ(r.job().state, JobState::kRunning);
}

TEST(JobLifecycle, AnEvictedGangIsRequeuedOnceAllItsReplicasStopped) {
  Running r;
  ASSERT_TRUE(r.st.Apply(JobPreempting{JobId(1), 20, JobId(9), "preempted for job 9"}).ok());
  EXPECT_TRUE(r.Report({Exit(0, 143)}).empty());
  const auto events = r.Report({Exit(1, 143)});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JobRequeued>(events[0]));
}

TEST(JobLifecycle, ReportsOfAnotherAttemptOrNodeChangeNothing) {
  Running r;
  api::TaskReport stale = Exit(0, 1);
  stale.attempt = 4;
  EXPECT_TRUE(r.Report({stale}).empty());
  api::TaskReport other = Exit(0, 1);
  other.replica = 7;  // not a replica of the job on this node
  EXPECT_TRUE(r.Report({other}).empty());
}

TEST(JobLifecycle, OnlyANewerCheckpointIsRecorded) {
  Running r;
  api::TaskReport t{.job = JobId(1), .replica = 0, .checkpoint_path = "/ckpt/1", .checkpoint_at = 500};
  ASSERT_EQ(r.Report({t}).size(), 1u);
  EXPECT_EQ(r.job().last_checkpoint_at, 500);
  EXPECT_TRUE(r.Report({t}).empty());  // the same again
  t.checkpoint_at = 5000 * kMicrosPerSecond;  // ahead of the clock: counts as now, once
  t.checkpoint_path = "/ckpt/2";
  ASSERT_EQ(r.Report({t}).size(), 1u);
  EXPECT_EQ(r.job().last_checkpoint_at, r.clock.Now());
  EXPECT_TRUE(r.Report({t}).empty());
}

TEST(JobLifecycle, AFailedGpuRequeuesTheGangsOnItWithoutCountingAgainstThePolicy) {
  Running r;
  Batch batch{&r.st};
  r.lifecycle.OnGpuHealth(batch, "n-0", {.index = 1, .healthy = false, .health_reason = "Xid 79"});
  ASSERT_EQ(batch.events.size(), 2u);
  EXPECT_TRUE(std::holds_alternative<GpuHealthChanged>(batch.events[0]));
  // Its replicas stop first (the agent stops them), then it is requeued.
  ASSERT_TRUE(std::holds_alternative<JobPreempting>(batch.events[1]));
  const auto stopped = r.Report({Exit(0, 143), Exit(1, 143)});
  ASSERT_EQ(stopped.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobRequeued>(stopped[0]));
  EXPECT_EQ(std::get<JobRequeued>(stopped[0]).reason, "GPU 1 on n-0 failed (Xid 79)");
  EXPECT_FALSE(std::get<JobRequeued>(stopped[0]).failed);
  Batch again{&r.st};
  r.lifecycle.OnGpuHealth(again, "n-0", {.index = 1, .healthy = false});  // no change: nothing
  EXPECT_TRUE(again.events.empty());
}

// A replica its node's fence ended (the server answered none of the node's
// reports before the lease ran out: a server restart, a partition) did not
// fail: the gang is requeued as for a lost node, whatever its exit code and
// restart policy, and none of its restarts is used.
TEST(JobLifecycle, AReplicaEndedByItsNodesFenceIsRequeuedNotFailed) {
  Running never;  // restart: never
  api::TaskReport fenced = Exit(1, 128 + 10);
  fenced.exit_reason = std::string(api::kFenced);
  api::TaskReport fenced_too = Exit(0, 128 + 9);  // (its node's other replica: the same fence)
  fenced_too.exit_reason = std::string(api::kFenced);
  auto events = never.Report({fenced, fenced_too});
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(std::holds_alternative<JobRequeued>(events[0]));
  const JobRequeued& requeued = std::get<JobRequeued>(events[0]);
  EXPECT_EQ(requeued.reason,
            "worker-1 was stopped by its node's fence (the server answered none of the node's reports in time)");
  EXPECT_FALSE(requeued.failed);
  EXPECT_EQ(never.job().state, JobState::kPending);
  EXPECT_EQ(never.job().failed_restarts, 0);
  // Exit 0 after the fence's warning (it saved and stopped) is no success either.
  Running saved;
  fenced = Exit(0, 0);
  fenced.exit_reason = std::string(api::kFenced);
  events = saved.Report({fenced, Exit(1, 0)});
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<JobRequeued>(events[0]));
}

TEST(JobLifecycle, TimeLimitsAndUnstoppedEvictionsEnd) {
  JobSpec limited = GpuJob("j", 2, 1);
  limited.time_limit = 60 * kMicrosPerSecond;
  Running r(limited);
  const std::vector<JobId> ids = {JobId(1)};
  EXPECT_TRUE(r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, 50 * kMicrosPerSecond).empty());
  const auto overdue = r.lifecycle.FindOverdue(r.st.GetSnapshot(), ids, 61 * kMicrosPerSecond);
  ASSERT_EQ(overdue.expired.size(), 1u);
  Batch batch{&r.st};
  r.lifecycle.EndOverdue(batch, overdue, 61 * kMicrosPerSecond);
  ASSERT_EQ(batch.events.size(), 1u);
  EXPECT_EQ(std::get<JobFinished>(batch.events[0]).reason, "time limit 1m reached");
}

}  // namespace
}  // namespace rota::server
