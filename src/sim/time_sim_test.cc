#include "sim/time_sim.h"

#include <gtest/gtest.h>

#include "base/rng.h"
#include "sim/test_util.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace rota::sim {
namespace {

// The YARN GPU-time distribution shipped with Tiresias (its Gittins input).
std::vector<int64_t> YarnSamples() {
  std::string yarn;
  if (!ReadFile(SharedTraces() + "tiresias-sample/yarn-gput1000.csv", &yarn)) return {};
  auto samples = ParseGpuSeconds(yarn, "yarn-gput1000.csv");
  EXPECT_TRUE(samples.ok()) << samples.status().ToString();
  return samples.ok() ? *samples : std::vector<int64_t>{};
}

// Runs `trace` on `nodes` x 8 GPUs; fails the test on an error.
TimeSimResult MustRun(const std::string& policy, const std::string& placement, int nodes,
                      const std::vector<TraceJob>& trace) {
  TimeSimOptions options;
  options.policy = policy;
  options.placement = placement;
  auto r = RunTimeSim(ClusterConfig{}, Nodes(nodes, 8), trace, options);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(*r) : TimeSimResult{};
}

// The Tiresias simulator's own results (scheme=count) on two Philly virtual
// clusters at two sizes each: our count scheme must agree within 3%.
TEST(TimeSimTest, MatchesTheTiresiasSimulatorOnPhilly) {
  const std::string dir = SharedTraces() + "tiresias-peer-results/";
  std::string summary;
  if (!ReadFile(dir + "summary.csv", &summary)) GTEST_SKIP() << "no " << dir << " (../shared is not here)";
  const std::vector<int64_t> samples = YarnSamples();
  ASSERT_FALSE(samples.empty());
  std::string line;
  const std::map<std::string, std::string> ours = {{"fifo", "fifo"},         {"sjf", "sjf"},
                                                   {"shortest", "srtf"},     {"shortest-gpu", "srtf-gpu"},
                                                   {"dlas", "las"},          {"dlas-gpu", "tiresias"},
                                                   {"dlas-gpu-gittins", "gittins"}};
  std::stringstream ss(summary);
  std::getline(ss, line);
  int compared = 0;
  while (std::getline(ss, line)) {
    std::vector<std::string> f = SplitCsv(line);
    ASSERT_GE(f.size(), 8u);
    const std::string trace_name = f[0], cluster = f[1].substr(0, f[1].find(' ')), peer_policy = f[2];
    const double peer_jct = std::stod(f[4]);
    std::string text;
    ASSERT_TRUE(ReadFile(dir + "inputs/" + trace_name + ".csv", &text));
    auto trace = ParseTrace(TraceFormat::kTiresias, text, trace_name);
    ASSERT_TRUE(trace.ok()) << trace.status().ToString();
    // nXg8: one switch of X nodes with 8 GPUs each.
    const int nodes = std::stoi(cluster.substr(1, cluster.find('g') - 1));
    TimeSimOptions options;
    options.policy = ours.at(peer_policy);
    options.placement = "count";
    if (options.policy == "gittins") options.gittins_samples = samples;
    auto r = RunTimeSim(ClusterConfig{}, Nodes(nodes, 8), *trace, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->summary.unfinished, 0);
    EXPECT_NEAR(r->summary.avg_jct_s, peer_jct, 0.03 * peer_jct) << trace_name << " " << cluster << " " << peer_policy;
    // The count scheme replays the peer's event order: closer than 1%.
    EXPECT_NEAR(r->summary.avg_jct_s, peer_jct, 0.01 * peer_jct) << trace_name << " " << cluster << " " << peer_policy;

    ++compared;
  }
  EXPECT_EQ(compared, 28);
}

// rota's order never reads a job's duration: change one job's duration and
// every decision before that job would have finished stays the same. SRTF,
// which does read durations, fails the same check (so the check can fail).
TEST(TimeSimTest, RotaIsNonClairvoyant) {
  // Overloaded (arrivals at 3x what 16 GPUs serve): jobs wait and preempt.
  std::vector<TraceJob> trace = SyntheticPhilly(600, 16, 3.0, 8, 11);
  auto run = [&](const std::string& policy, const std::vector<TraceJob>& t) {
    TimeSimOptions options;
    options.policy = policy;
    options.placement = "count";
    auto r = RunTimeSim(ClusterConfig{}, Nodes(2, 8), t, options);
    EXPECT_TRUE(r.ok());
    return *r;
  };
  for (const char* policy : {"rota", "srtf"}) {
    const TimeSimResult a = run(policy, trace);
    int changed_runs = 0, tried = 0;
    // Jobs to change: ones that run an hour or more, from the middle on.
    for (size_t x = 200; x < trace.size() && tried < 12; ++x) {
      if (a.jobs[x].first_start < 0 || a.jobs[x].duration < 3600 * kMicrosPerSecond) continue;
      ++tried;
      std::vector<TraceJob> changed = trace;
      changed[x].duration *= 3;
      const TimeSimResult b = run(policy, changed);
      const TimePoint cut = a.jobs[x].end;
      int differ = 0;
      for (size_t i = 0; i < trace.size(); ++i) {
        if (a.jobs[i].first_start >= 0 && a.jobs[i].first_start < cut) differ += a.jobs[i].first_start != b.jobs[i].first_start;
        if (a.jobs[i].end >= 0 && a.jobs[i].end < cut) differ += a.jobs[i].end != b.jobs[i].end;
      }
      if (std::string(policy) == "rota") {
        EXPECT_EQ(differ, 0) << "rota changed decisions made before job " << x << " ended";
      }
      changed_runs += differ > 0;
    }
    EXPECT_EQ(tried, 12);
    if (std::string(policy) == "srtf") {
      EXPECT_GT(changed_runs, 0) << "srtf should react to a longer job at once";
    }
  }
}

// On the Philly inputs of the Tiresias comparison (issue 4's target), rota's
// order closes at least half of the gap between Tiresias and the SRTF oracle
// in average JCT, with a p95 JCT no worse than Tiresias'. At this commit:
// 58.6, 62.8, 52.7 and 55.1% in the order below.
TEST(TimeSimTest, RotaClosesHalfTheGapFromTiresiasToSrtfOnPhilly) {
  const std::string dir = SharedTraces() + "tiresias-peer-results/inputs/";
  std::string text;
  if (!ReadFile(dir + "philly_103959.csv", &text)) GTEST_SKIP() << "no ../shared";
  for (const auto& [name, nodes] : std::vector<std::pair<std::string, int>>{{"philly_103959", 3}, {"philly_103959", 4},
                                                                             {"philly_0e4a51", 6}, {"philly_0e4a51", 8}}) {
    ASSERT_TRUE(ReadFile(dir + name + ".csv", &text));
    auto trace = ParseTrace(TraceFormat::kTiresias, text, name);
    ASSERT_TRUE(trace.ok());
    std::map<std::string, Summary> s;
    for (const char* policy : {"tiresias", "srtf", "rota"}) {
      TimeSimOptions options;
      options.policy = policy;
      options.placement = "count";
      auto r = RunTimeSim(ClusterConfig{}, Nodes(nodes, 8), *trace, options);
      ASSERT_TRUE(r.ok());
      EXPECT_EQ(r->summary.unfinished, 0);
      s[policy] = r->summary;
    }
    const double closed = (s["tiresias"].avg_jct_s - s["rota"].avg_jct_s) / (s["tiresias"].avg_jct_s - s["srtf"].avg_jct_s);
    EXPECT_GE(closed, 0.5) << name << " on " << nodes * 8 << " GPUs";
    EXPECT_LE(s["rota"].p95_jct_s, s["tiresias"].p95_jct_s) << name << " on " << nodes * 8 << " GPUs";
  }
}

// A sweep's waiting jobs never preempt its running ones: nothing tells
// siblings apart, and taking turns only delays them all. A job of another
// sweep still preempts.
TEST(TimeSimTest, RotaDoesNotSwitchBetweenSiblings) {
  // Three 10-hour jobs submitted together on 2 GPUs.
  std::vector<TraceJob> trace = {Job("a1", 0, 36000, 1), Job("a2", 1, 36000, 1), Job("a3", 2, 36000, 1)};
  TimeSimOptions options;
  options.placement = "count";
  auto two = RunTimeSim(ClusterConfig{}, Nodes(1, 2), trace, options);
  ASSERT_TRUE(two.ok());
  for (const JobResult& j : two->jobs) EXPECT_EQ(j.preemptions, 0) << j.name;
  EXPECT_EQ(two->jobs[2].first_start, 36000 * kMicrosPerSecond);
  EXPECT_EQ(two->jobs[2].end, 72000 * kMicrosPerSecond);

  // An hour in, a one-hour job of its own: it goes first (least attained).
  trace.push_back(Job("b", 3600, 3600, 1));
  auto mixed = RunTimeSim(ClusterConfig{}, Nodes(1, 2), trace, options);
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->jobs[3].first_start, 3600 * kMicrosPerSecond);
  EXPECT_EQ(mixed->jobs[3].end, 7200 * kMicrosPerSecond);
  int preemptions = 0;
  for (const JobResult& j : mixed->jobs) preemptions += j.preemptions;
  EXPECT_EQ(preemptions, 1);
}

TEST(TimeSimTest, StrictFifoBlocksBehindTheHead) {
  // 8 GPUs: a runs (4), b needs 8 and waits for a, c (1 GPU) must not jump b.
  std::vector<TraceJob> trace = {Job("a", 0, 100, 4), Job("b", 1, 100, 8), Job("c", 2, 10, 1)};
  for (const char* placement : {"count", "topology"}) {
    const TimeSimResult r = MustRun("fifo", placement, 1, trace);
    ASSERT_EQ(r.jobs.size(), 3u);
    EXPECT_EQ(r.jobs[1].first_start, 100 * kMicrosPerSecond) << placement;
    EXPECT_EQ(r.jobs[2].first_start, 200 * kMicrosPerSecond) << placement;
    EXPECT_EQ(r.jobs[2].end, 210 * kMicrosPerSecond) << placement;
  }
}

TEST(TimeSimTest, SrtfPreemptsForAShorterJob) {
  std::vector<TraceJob> trace = {Job("long", 0, 1000, 8), Job("short", 10, 10, 8)};
  for (const char* placement : {"count", "topology"}) {
    const TimeSimResult r = MustRun("srtf", placement, 1, trace);
    ASSERT_EQ(r.jobs.size(), 2u);
    EXPECT_EQ(r.jobs[1].end, 20 * kMicrosPerSecond) << placement;
    EXPECT_EQ(r.jobs[0].preemptions, 1) << placement;
    // Checkpointed on the signal: no work lost, ends after 1010 s.
    EXPECT_EQ(r.jobs[0].end, 1010 * kMicrosPerSecond) << placement;
    EXPECT_EQ(r.summary.preemptions, 1);
  }
}

TEST(TimeSimTest, ReplicasNeedNodesOnTheEngineButNotWhenCounting) {
  // Two nodes with 4 free GPUs each: a 2 x 4 gang fits; one 8-GPU replica does not.
  std::vector<TraceJob> trace = {Job("a", 0, 100, 4), Job("b", 0, 100, 4), Job("c", 0, 100, 4),
                                 Job("d", 0, 100, 4), Job("e", 1, 50, 8), Job("f", 1, 50, 4, 2)};
  trace[1].duration = 200 * kMicrosPerSecond;
  trace[3].duration = 200 * kMicrosPerSecond;
  TimeSimOptions options;
  options.policy = "sjf";
  options.placement = "topology";
  auto r = RunTimeSim(ClusterConfig{}, Nodes(4, 4), trace, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->never.size(), 1u);
  EXPECT_EQ(r->never[0].substr(0, 3), "e: ");
  EXPECT_EQ(r->jobs[4].end, -1);
  // f (2 x 4) waits for two whole nodes: a and c end at 100 s.
  EXPECT_EQ(r->jobs[5].first_start, 100 * kMicrosPerSecond);
  EXPECT_EQ(r->jobs[5].end, 150 * kMicrosPerSecond);
  options.placement = "count";
  r = RunTimeSim(ClusterConfig{}, Nodes(4, 4), trace, options);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->never.empty());  // counting: 8 GPUs of 16
  EXPECT_GE(r->jobs[4].end, 0);
}

TEST(TimeSimTest, AJobNoNodeCanHoldIsReportedNotRun) {
  std::vector<TraceJob> trace = {Job("ok", 0, 10, 8), Job("huge", 0, 10, 16)};
  TimeSimOptions options;
  options.policy = "fifo";
  options.placement = "topology";
  auto r = RunTimeSim(ClusterConfig{}, Nodes(1, 8), trace, options);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->summary.unfinished, 1);
  ASSERT_EQ(r->never.size(), 1u);
  EXPECT_NE(r->never[0].find("huge"), std::string::npos);
}

TEST(TimeSimTest, FailuresRestartFromCheckpointsAndEveryJobFinishes) {
  std::vector<TraceJob> trace = SyntheticPhilly(400, 64, 0.7, 16, 3);
  for (TraceJob& j : trace) j.checkpoint_interval = 600 * kMicrosPerSecond;
  for (const char* placement : {"count", "topology"}) {
    TimeSimOptions options;
    options.policy = "tiresias";
    options.placement = placement;
    options.failure_rate = 2e-2;  // far above real rates, to see many
    auto a = RunTimeSim(ClusterConfig{}, Nodes(8, 8), trace, options);
    auto b = RunTimeSim(ClusterConfig{}, Nodes(8, 8), trace, options);
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(a->summary.unfinished, 0) << placement;
    EXPECT_GT(a->summary.restarts, 0) << placement;
    EXPECT_GT(a->summary.lost_gpu_hours, 0) << placement;
    EXPECT_LT(a->summary.goodput_pct, 100) << placement;
    // Work lost per restart is below one checkpoint interval of the job's GPUs.
    for (const JobResult& o : a->jobs) EXPECT_LE(o.lost_gpu_seconds, o.restarts * 600.0 * o.gpus + 1e-6) << o.name;
    // Same input and seed: the same run.
    for (size_t i = 0; i < a->jobs.size(); ++i) EXPECT_EQ(a->jobs[i].end, b->jobs[i].end);
  }
}

TEST(TimeSimTest, GittinsTableMatchesTheTiresiasAnchors) {
  const std::vector<int64_t> samples = YarnSamples();
  if (samples.empty()) GTEST_SKIP() << "no ../shared";
  GittinsTable t(samples, 3250);
  EXPECT_NEAR(t.Index(0), 299.555, 1e-3);
  EXPECT_NEAR(t.Index(121), 299.0826, 1e-3);
  EXPECT_NEAR(t.Index(1000), 191.5015, 1e-3);
  EXPECT_NEAR(t.Index(3250), 87.4444, 1e-3);
  EXPECT_NEAR(t.Index(18000), 11.4791, 1e-3);
  EXPECT_EQ(t.Index(11'348'376), 0);
}

TEST(TimeSimTest, UnknownPolicyOrPlacementIsAPreciseError) {
  std::vector<TraceJob> trace = {Job("a", 0, 10, 1)};
  TimeSimOptions options;
  options.policy = "lottery";
  auto r = RunTimeSim(ClusterConfig{}, Nodes(1, 8), trace, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--policy: unknown policy 'lottery'"), std::string::npos);
  options.policy = "fifo";
  options.placement = "fgd";
  r = RunTimeSim(ClusterConfig{}, Nodes(1, 8), trace, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--placement"), std::string::npos);
}

}  // namespace
}  // namespace rota::sim
