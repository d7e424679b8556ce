#include "sim/profile_sim.h"

#include <gtest/gtest.h>

#include <bit>

#include "sim/test_util.h"

namespace rota::sim {
namespace {

constexpr Duration kS = kMicrosPerSecond;

// A single-replica job of `queue` at `priority` that checkpoints every 10 minutes.
TraceJob Job(const std::string& name, int64_t submit_s, int64_t duration_s, int32_t gpus, int32_t priority,
             const std::string& queue = "default") {
  TraceJob j = sim::Job(name, submit_s, duration_s, gpus);
  j.priority = priority;
  j.queue = queue;
  j.checkpoint_interval = 600 * kS;
  return j;
}

std::vector<NodeSpec> OneNode() { return Nodes(1, 8); }

ClusterConfig Config() {
  ClusterConfig c;
  c.topology = {"nvlink", "node"};
  return c;
}

TimeSimOptions Profile() {
  TimeSimOptions o;
  o.policy = "profile";
  o.grace = 60 * kS;
  o.save_time = 30 * kS;
  return o;
}

TEST(ProfileSim, AHigherPriorityJobEvictsThroughTheCheckpointProtocol) {
  // low fills the node; high comes at 1,200 s (past low's 10 minutes of
  // protection) and evicts it: low saves on the signal 30 s later and
  // stops, high runs 600 s, and low resumes from its 1,230 s of work.
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), OneNode(), {Job("low", 0, 3600, 8, 100), Job("high", 1200, 600, 8, 900)}, Profile());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const JobResult& low = r->jobs[0];
  const JobResult& high = r->jobs[1];
  EXPECT_EQ(high.first_start, 1230 * kS);
  EXPECT_EQ(high.end, 1830 * kS);
  EXPECT_EQ(low.preemptions, 1);
  EXPECT_EQ(low.end, (1830 + 3600 - 1230) * kS);
  EXPECT_EQ(low.lost_gpu_seconds, 0);
  EXPECT_EQ(r->summary.preemptions, 1);
  EXPECT_EQ(r->summary.unfinished, 0);
}

TEST(ProfileSim, WithoutAGraceTheEvictedJobKeepsOnlyItsLastCheckpoint) {
  TimeSimOptions o = Profile();
  o.grace = 0;
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), OneNode(), {Job("low", 0, 3600, 8, 100), Job("high", 1200, 600, 8, 900)}, o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // It stops 1 s after the signal, with 1,201 s done and 1,200 s saved.
  EXPECT_EQ(r->jobs[1].first_start, 1201 * kS);
  EXPECT_EQ(r->jobs[0].end, (1801 + 3600 - 1200) * kS);
  EXPECT_DOUBLE_EQ(r->jobs[0].lost_gpu_seconds, 8.0);
}

TEST(ProfileSim, ProtectionDelaysTheEvictionUntilTheMinimumRunTime) {
  // high arrives 100 s after low started: low runs its 10 minutes first.
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), OneNode(), {Job("low", 0, 3600, 8, 100), Job("high", 100, 600, 8, 900)}, Profile());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // The eviction comes at the first cycle past 600 s (a tick every 60 s from 100 s: 640 s).
  EXPECT_EQ(r->jobs[1].first_start, (640 + 30) * kS);
}

TEST(ProfileSim, QueuesQuotasAndRejectionsAreTheServers) {
  ClusterConfig c = Config();
  c.queues.push_back({.name = "a", .quota = {{"V100", 4}}});
  c.queues.push_back({.name = "b", .quota = {{"V100", 4}}});
  TimeSimOptions o = Profile();
  o.preemptible = false;  // no borrowing: each queue holds at most its 4
  StatusOr<TimeSimResult> r = RunTimeSim(
      c, OneNode(), {Job("a1", 0, 1000, 4, 500, "a"), Job("a2", 0, 1000, 4, 500, "a"), Job("b1", 10, 1000, 4, 500, "b"),
                     Job("huge", 20, 100, 16, 500, "a")},
      o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].first_start, 0);
  EXPECT_EQ(r->jobs[1].first_start, 1000 * kS);  // a's quota, though 4 GPUs are idle until b1 comes
  EXPECT_EQ(r->jobs[2].first_start, 10 * kS);
  ASSERT_EQ(r->never.size(), 1u);  // refused at submission, as the server refuses it
  EXPECT_NE(r->never[0].find("huge: "), std::string::npos) << r->never[0];
  EXPECT_EQ(r->summary.unfinished, 1);
}

TEST(ProfileSim, RefusesWhatItDoesNotSimulate) {
  TimeSimOptions o = Profile();
  o.placement = "count";
  EXPECT_EQ(RunTimeSim(Config(), OneNode(), {Job("x", 0, 10, 1, 500)}, o).status().code(), StatusCode::kInvalidArgument);
  o = Profile();
  o.failure_rate = 1e-5;
  EXPECT_EQ(RunTimeSim(Config(), OneNode(), {Job("x", 0, 10, 1, 500)}, o).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rota::sim

namespace rota::sim {
namespace {

// One node of group n (8 V100s), in `*config` and the state returned.
ClusterState OneV100Node(ClusterConfig* config) {
  config->topology = {"nvlink", "node"};
  config->node_groups.push_back({.name = "n", .count = 1, .gpus = 8, .gpu_model = "V100", .cpu = 64000, .memory = 262144});
  ClusterState st(config->topology);
  StatusOr<std::vector<NodeSpec>> nodes = ExpandNodes(*config);
  EXPECT_TRUE(nodes.ok());
  for (const NodeSpec& n : *nodes) EXPECT_TRUE(st.Apply(NodeAdded{n}).ok());
  return st;
}

// One node of group n (8 GPUs); job 1 ran 200 s and finished; job 2 runs
// since now - 100 s with a 1,000 s limit; job 3 waits with a 500 s limit, job
// 4 with none (it runs the median, 200 s).
struct LiveState {
  ClusterConfig config;
  ClusterState state{std::vector<std::string>{"nvlink", "node"}};
  TimePoint now = 10'000 * kS;
  LiveState() {
    config.topology = {"nvlink", "node"};
    config.node_groups.push_back({.name = "n", .count = 1, .gpus = 8, .gpu_model = "V100", .cpu = 64000, .memory = 262144});
    StatusOr<std::vector<NodeSpec>> nodes = ExpandNodes(config);
    EXPECT_TRUE(nodes.ok());
    for (const NodeSpec& n : *nodes) EXPECT_TRUE(state.Apply(NodeAdded{n}).ok());
    auto spec = [](const std::string& name, Duration limit) {
      JobSpec s;
      s.name = name;
      s.time_limit = limit;
      s.tasks.push_back({.name = "w", .replicas = 1, .gpus = 8, .command = {"x"}});
      return s;
    };
    auto all = [&] {
      ReplicaPlacement r;
      r.node = NodeId(0);
      r.gpu_mask = 0xff;
      return std::vector<ReplicaPlacement>{r};
    };
    EXPECT_TRUE(state.Apply(JobSubmitted{.id = JobId(1), .spec = spec("done", 0), .at = 0, .user = "u"}).ok());
    EXPECT_TRUE(state.Apply(JobBound{JobId(1), all(), 1000 * kS}).ok());
    EXPECT_TRUE(state.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 1200 * kS, ""}).ok());
    EXPECT_TRUE(state.Apply(JobSubmitted{.id = JobId(2), .spec = spec("running", 1000 * kS), .at = 0, .user = "u"}).ok());
    EXPECT_TRUE(state.Apply(JobBound{JobId(2), all(), now - 100 * kS}).ok());
    EXPECT_TRUE(state.Apply(JobSubmitted{.id = JobId(3), .spec = spec("limited", 500 * kS), .at = 1, .user = "u"}).ok());
    EXPECT_TRUE(state.Apply(JobSubmitted{.id = JobId(4), .spec = spec("open", 0), .at = 2, .user = "u"}).ok());
  }
};

TEST(Project, EveryPendingJobGetsAnExpectedStartFromTimeLimitsOrTheMedianRun) {
  LiveState live;
  StatusOr<Projection> p = Project(live.config, live.state.GetSnapshot(), live.now, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->default_run, 200 * kS);
  ASSERT_EQ(p->jobs.size(), 2u);
  EXPECT_EQ(p->jobs[0].job, JobId(3));
  EXPECT_EQ(p->jobs[0].start, live.now + 900 * kS);  // when job 2's limit ends
  EXPECT_FALSE(p->jobs[0].estimate);
  EXPECT_EQ(p->jobs[1].start, live.now + 1440 * kS);  // job 3's limit later (1,400 s), on the minute
  EXPECT_FALSE(p->jobs[1].estimate);
  // The projection changes nothing of the live state.
  EXPECT_EQ(live.state.GetSnapshot().FindJob(JobId(3))->state, JobState::kPending);
}

// Without a time limit a job runs what the learned history expects: its
// sweep's typical GPU-time once one of its jobs finished, else the median of
// the finished jobs that ran longer than it has; both are estimates.
TEST(Project, WithoutALimitAJobRunsWhatTheLearnedHistoryExpects) {
  ClusterConfig config;
  ClusterState st = OneV100Node(&config);
  JobSpec open;
  open.name = "open";
  open.tasks.push_back({.name = "w", .replicas = 1, .gpus = 8, .command = {"x"}});
  const std::vector<ReplicaPlacement> all = {{0, 0, NodeId(0), 0xff}};
  // 20 jobs alone (their own sweeps) ran 100 s on 8 GPUs; then job 21 ran
  // 1,000 s, and job 22, of its sweep (10 s later), runs now since 100 s.
  TimePoint t = 0;
  uint64_t id = 1;
  for (; id <= 20; ++id, t += 200 * kS) {
    ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(id), .spec = open, .at = t, .user = "u"}).ok());
    ASSERT_TRUE(st.Apply(JobBound{JobId(id), all, t}).ok());
    ASSERT_TRUE(st.Apply(JobFinished{JobId(id), JobOutcome::kSucceeded, t + 100 * kS, ""}).ok());
  }
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(21), .spec = open, .at = t, .user = "u"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(22), .spec = open, .at = t + 10 * kS, .user = "u"}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(21), all, t + 10 * kS}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(21), JobOutcome::kSucceeded, t + 1010 * kS, ""}).ok());
  const TimePoint now = t + 5000 * kS;
  ASSERT_TRUE(st.Apply(JobBound{JobId(22), all, now - 100 * kS}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(23), .spec = open, .at = now - 1, .user = "u"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(24), .spec = open, .at = now + 100 * kS, .user = "u"}).ok());
  ASSERT_EQ(st.GetSnapshot().FindJob(JobId(22))->sweep, JobId(21));
  StatusOr<Projection> p = Project(config, st.GetSnapshot(), now, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->default_run, 100 * kS);  // the median run, for the ones the history cannot speak for
  EXPECT_EQ(p->learned, 3);
  ASSERT_EQ(p->jobs.size(), 2u);
  // Job 22 runs its sweep's 1,000 s (900 more), not the median's 100 s.
  EXPECT_EQ(p->jobs[0].job, JobId(23));
  EXPECT_GE(p->jobs[0].start, now + 900 * kS);
  EXPECT_LE(p->jobs[0].start, now + 960 * kS);
  EXPECT_TRUE(p->jobs[0].estimate);
  // Job 23 (a sweep of its own, like most) runs the finished jobs' median, about 100 s.
  EXPECT_GE(p->jobs[1].start, p->jobs[0].start + 60 * kS);
  EXPECT_LE(p->jobs[1].start, p->jobs[0].start + 180 * kS);
  EXPECT_TRUE(p->jobs[1].estimate);
}

// An array whose last element ran and ended before the others started:
// the projection keeps that element (the engine starts an array's elements
// once its last is there) without running it again, and projects the rest.
TEST(Project, AnArrayWhoseLastElementEndedFirstIsProjected) {
  ClusterConfig config;
  ClusterState st = OneV100Node(&config);
  JobSpec spec;
  spec.name = "sweep";
  spec.time_limit = 600 * kS;
  spec.tasks.push_back({.name = "w", .replicas = 1, .gpus = 8, .command = {"x"}});
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(1), 3, spec, 0, "u", "", JobId(1), 3}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0xff}}, 10 * kS}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(3), JobOutcome::kFailed, 20 * kS, "main-0 exited with code 1"}).ok());
  const TimePoint now = 30 * kS;
  StatusOr<Projection> p = Project(config, st.GetSnapshot(), now, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->jobs.size(), 2u);
  EXPECT_EQ(p->jobs[0].job, JobId(1));
  EXPECT_EQ(p->jobs[0].start, now);
  EXPECT_EQ(p->jobs[1].job, JobId(2));
  EXPECT_GE(p->jobs[1].start, now + 600 * kS);
}

TEST(Project, AddedNodesAndDrainsChangeTheProjection) {
  LiveState live;
  ProjectOptions more;
  more.change.add_nodes = {{"n", 1}};
  StatusOr<Projection> p = Project(live.config, live.state.GetSnapshot(), live.now, more);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->jobs[0].start, live.now);              // on the new node at once
  EXPECT_EQ(p->jobs[1].start, live.now + 540 * kS);   // when job 3 ends there (500 s, on the minute)
  ProjectOptions drain;
  drain.change.drain = {"n-0"};
  p = Project(live.config, live.state.GetSnapshot(), live.now, drain);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->jobs[0].start, -1);  // nowhere to run within the horizon
  ProjectOptions bad;
  bad.change.add_nodes = {{"gpu", 1}};
  EXPECT_EQ(Project(live.config, live.state.GetSnapshot(), live.now, bad).status().code(), StatusCode::kInvalidArgument);
  bad.change = {};
  bad.change.drain = {"nope"};
  EXPECT_EQ(Project(live.config, live.state.GetSnapshot(), live.now, bad).status().code(), StatusCode::kInvalidArgument);
}

// Fair share in a projection starts from the live scheduler's decayed usage
// (ProjectOptions::usage_history): a queue that used much lately waits
// behind one that did not, as the server would order them. Queue c's job
// holds the node until now + 900 s; a's job came before b's.
TEST(Project, FairShareStartsFromTheSchedulersUsageHistory) {
  LiveState live;
  live.config.queues = {{.name = "a"}, {.name = "b"}, {.name = "c"}};
  live.config.fair_share_half_life = 3600 * kS;
  ClusterState& st = live.state;
  auto spec = [](const std::string& queue) {
    JobSpec s;
    s.name = queue;
    s.queue = queue;
    s.time_limit = 500 * kS;
    s.tasks.push_back({.name = "w", .replicas = 1, .gpus = 8, .command = {"x"}});
    return s;
  };
  // (LiveState's jobs 3 and 4 go: the node's next jobs are a's and b's.)
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(3), 1, ""}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(4), 1, ""}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(5), .spec = spec("a"), .at = 3, .user = "u"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(6), .spec = spec("b"), .at = 4, .user = "u"}).ok());
  std::map<uint64_t, TimePoint> start;
  auto project = [&](const ProjectOptions& o) {
    StatusOr<Projection> p = Project(live.config, st.GetSnapshot(), live.now, o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    for (const ProjectedStart& s : p->jobs) start[s.job.value()] = s.start;
  };
  project({});
  EXPECT_EQ(start[5], live.now + 900 * kS);  // first come (no history: a tie)
  EXPECT_GT(start[6], start[5]);
  ProjectOptions with_history;
  with_history.usage_history = {{"a", 40.0}};  // a held 40 GPUs on average lately
  project(with_history);
  EXPECT_EQ(start[6], live.now + 900 * kS);  // b goes first, as the server would send it
  EXPECT_GT(start[5], start[6]);
}

TEST(Project, AWallBudgetStopsItAndSaysSo) {
  LiveState live;
  ProjectOptions tight;
  tight.wall_budget = 1;  // a microsecond: past it after the first step
  StatusOr<Projection> p = Project(live.config, live.state.GetSnapshot(), live.now, tight);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->cut_short);
  EXPECT_EQ(p->steps, 1);
  EXPECT_EQ(p->jobs[0].start, -1);
  StatusOr<Projection> whole = Project(live.config, live.state.GetSnapshot(), live.now, {});
  ASSERT_TRUE(whole.ok());
  EXPECT_FALSE(whole->cut_short);
}

TEST(Project, AStartAfterAnEstimatedEndIsAnEstimate) {
  LiveState live;
  // A third pending job behind job 4, which has no limit.
  JobSpec s;
  s.name = "after";
  s.tasks.push_back({.name = "w", .replicas = 1, .gpus = 8, .command = {"x"}});
  ASSERT_TRUE(live.state.Apply(JobSubmitted{.id = JobId(5), .spec = s, .at = 3, .user = "u"}).ok());
  StatusOr<Projection> p = Project(live.config, live.state.GetSnapshot(), live.now, {});
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->jobs.size(), 3u);
  EXPECT_FALSE(p->jobs[1].estimate);
  EXPECT_EQ(p->jobs[2].start, live.now + 1680 * kS);  // job 4's 200 s estimate after 1,440 s, on the minute
  EXPECT_TRUE(p->jobs[2].estimate);
}

TEST(Project, ADryRunSaysWhereAndWhenASubmittedJobWouldStart) {
  LiveState live;
  ProjectOptions dry;
  JobSpec s;
  s.name = "dry";
  s.time_limit = 100 * kS;
  s.tasks.push_back({.name = "w", .replicas = 1, .gpus = 4, .command = {"x"}});
  dry.submit = {s};
  dry.user = "u";
  StatusOr<Projection> p = Project(live.config, live.state.GetSnapshot(), live.now, dry);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->jobs.size(), 3u);
  EXPECT_EQ(p->jobs[2].job, JobId(5));  // after the state's ids
  EXPECT_EQ(p->jobs[2].start, live.now + 1680 * kS);  // behind jobs 3 and 4, which take the whole node
  ASSERT_EQ(p->jobs[2].placement.size(), 1u);
  EXPECT_EQ(std::popcount(p->jobs[2].placement[0].gpu_mask), 4);
  EXPECT_TRUE(p->jobs[2].estimate);  // job 4 has no limit
  EXPECT_EQ(live.state.GetSnapshot().FindJob(JobId(5)), nullptr);  // nothing submitted
  s.tasks[0].gpus = 16;  // more than any node: refused as the server refuses it
  dry.submit = {s};
  EXPECT_EQ(Project(live.config, live.state.GetSnapshot(), live.now, dry).status().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace rota::sim
