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

// The log posterior FitCensoredNormal climbs, written out plainly.
double LogPosterior(const CensoredNormal& d, const std::vector<double>& exact, double mu, double sd) {
  double f = -(mu - d.mu0) * (mu - d.mu0) / (2 * d.tau2) - d.var_weight * (std::log(sd) + d.var0 / (2 * sd * sd));
  for (double x : exact) f += -std::log(sd) - (x - mu) * (x - mu) / (2 * sd * sd);
  for (const auto& [c, count] : d.censored) f += count * std::log(0.5 * std::erfc((c - mu) / (sd * std::sqrt(2.0))));
  return f;
}

// The censored-normal fit: exact values alone give their mean and variance;
// with the largest values censored it still finds the distribution, where
// the exact values alone are far off; it gets there from far away; and where
// most values are censored at nothing (a sweep's waiting jobs) it finds the
// mode fast, not crawling as EM does.
TEST(TimeSimTest, CensoredNormalFitRecoversTheDistribution) {
  CensoredNormal d;
  d.tau2 = 1e12;  // no prior to speak of
  for (double x : {1.0, 2.0, 3.0, 6.0}) {
    d.n += 1;
    d.sum += x;
    d.sq += x * x;
  }
  NormalFit f = FitCensoredNormal(d, {0, 1, 0});
  EXPECT_NEAR(f.mu, 3.0, 1e-6);
  EXPECT_NEAR(f.var, (4 + 1 + 0 + 9) / 4.0, 1e-6);

  // 2,000 draws of N(12, 0.5^2); those above 12.2 known only to exceed 12.2.
  Rng rng(7);
  CensoredNormal c;
  c.tau2 = 1e12;
  c.censored = {{12.2, 0}};
  for (int i = 0; i < 2000; ++i) {
    const double x = 12 + 0.5 * rng.Normal();
    if (x > 12.2) {
      ++c.censored[0].second;
    } else {
      c.n += 1;
      c.sum += x;
      c.sq += x * x;
    }
  }
  ASSERT_GT(c.censored[0].second, 600);  // about a third
  EXPECT_LT(c.sum / c.n, 11.8);           // the exact ones alone: far too short
  for (NormalFit start : {NormalFit{12, 0.25, 0}, NormalFit{0, 10, 0}, NormalFit{30, 0.01, 0}}) {
    f = FitCensoredNormal(c, start);
    EXPECT_NEAR(f.mu, 12.0, 0.05) << "from " << start.mu;
    EXPECT_NEAR(std::sqrt(f.var), 0.5, 0.05) << "from " << start.mu;
    EXPECT_LT(f.iterations, 30) << "from " << start.mu;
  }

  // Sweeps just after their first finish: one finished job; the others
  // running just below it, or waiting (censored at log 1 = 0).
  struct Case {
    double exact;
    std::vector<std::pair<double, int>> censored;
  };
  for (const Case& k : {Case{14, {{0, 1000}}}, Case{9, {{0, 54}, {8.9, 63}}}, Case{9, {{0, 3}, {8.5, 10}, {9.5, 2}}}}) {
    CensoredNormal s;
    s.n = 1;
    s.sum = k.exact;
    s.sq = k.exact * k.exact;
    s.censored = k.censored;
    s.mu0 = 8;
    s.tau2 = 10;
    s.var0 = 0.34;
    s.var_weight = 0.5;
    NormalFit first;
    for (NormalFit start : {NormalFit{k.exact, 0.34, 0}, NormalFit{0, 4, 0}}) {
      f = FitCensoredNormal(s, start);
      EXPECT_LT(f.iterations, 40) << k.exact << " from " << start.mu;
      // A maximum: no step of 1e-3 either way does better.
      const double sd = std::sqrt(f.var), top = LogPosterior(s, {k.exact}, f.mu, sd);
      for (double dm : {-1e-3, 0.0, 1e-3}) {
        for (double ds : {-1e-3, 0.0, 1e-3}) {
          EXPECT_LE(LogPosterior(s, {k.exact}, f.mu + dm, sd + ds), top + 1e-9) << k.exact << " from " << start.mu;
        }
      }
      if (start.mu == 0) {
        EXPECT_NEAR(f.mu, first.mu, 1e-4);
        EXPECT_NEAR(f.var, first.var, 1e-4);
      }
      first = f;
    }
  }

  // All censored: the prior on the mean holds it (no runaway to infinity).
  CensoredNormal all;
  all.censored = {{10.0, 5}};
  all.mu0 = 8;
  all.tau2 = 4;
  all.var0 = 0.34;
  all.var_weight = 0.5;
  f = FitCensoredNormal(all, {10, 0.34, 0});
  EXPECT_GT(f.mu, 10.0);
  EXPECT_LT(f.mu, 16.0);
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
