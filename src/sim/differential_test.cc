// Simulation equals production: one trace and one config through
// `rota sim --policy profile` (RunProfileSim) and through the real
// controller (virtual clock, in-memory store, emulated agents from the same
// AgentModel, driven at the simulator's step times) journal the same job
// events, in the same order, at the same times. A driver that diverges (its
// own copy of a rule, a step in another order) fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "api/agent_protocol.h"
#include "base/clock.h"
#include "base/rng.h"
#include "server/controller.h"
#include "sim/profile_sim.h"
#include "store/memory_store.h"

namespace rota::sim {
namespace {

// 4 nodes of 8 GPUs in two racks; prod is guaranteed 16 GPUs, research 8,
// and research may borrow what prod leaves idle.
ClusterConfig Config() {
  ClusterConfig c;
  c.topology = {"nvlink", "node", "rack", "spine"};
  c.node_groups.push_back({.name = "n", .count = 4, .gpus = 8, .gpu_model = "H100", .cpu = 64000,
                           .memory = 512 * 1024, .nodes_per_rack = 2});
  c.queues.push_back({.name = "prod", .weight = 2, .quota = {{"H100", 16}}});
  c.queues.push_back({.name = "research", .quota = {{"H100", 8}}});
  c.fair_share_half_life = 3600 * kMicrosPerSecond;
  return c;
}

// Jobs of both queues over a few hours: gangs of 1-16 GPUs, prod at a higher
// priority than research (so it preempts research's borrowed GPUs), some
// with time limits (reservations, backfill), all checkpointing.
std::vector<TraceJob> Trace(int jobs, uint64_t seed) {
  Rng rng(seed);
  std::vector<TraceJob> out;
  TimePoint t = 0;
  static const int32_t kGpus[] = {1, 1, 2, 4, 8, 8, 16};
  for (int i = 0; i < jobs; ++i) {
    TraceJob j;
    j.name = "t" + std::to_string(i);
    t += static_cast<TimePoint>(rng.Uniform(600)) * kMicrosPerSecond;
    j.submit = t;
    j.duration = static_cast<Duration>(300 + rng.Uniform(7200)) * kMicrosPerSecond;
    const int32_t g = kGpus[rng.Uniform(std::size(kGpus))];
    j.gpus = std::min(g, 8);
    j.replicas = g / j.gpus;
    const bool prod = rng.Uniform(3) == 0;
    j.queue = prod ? "prod" : "research";
    j.priority = prod ? 900 : 100;
    j.checkpoint_interval = static_cast<Duration>(600 + rng.Uniform(1200)) * kMicrosPerSecond;
    if (rng.Uniform(2) == 0) j.time_limit = j.duration + static_cast<Duration>(rng.Uniform(1800)) * kMicrosPerSecond;
    out.push_back(std::move(j));
  }
  return out;
}

// A job event as one line ("" for any other event): what the drivers must agree on.
std::string Line(const Event& e) {
  std::ostringstream s;
  if (const auto* sub = std::get_if<JobSubmitted>(&e)) {
    s << "submitted " << sub->id.value() << " " << sub->spec.name << " " << sub->spec.queue << " @" << sub->at;
  } else if (const auto* bnd = std::get_if<JobBound>(&e)) {
    s << "bound " << bnd->id.value() << " @" << bnd->at;
    for (const ReplicaPlacement& r : bnd->placement) s << " " << r.replica << ":" << r.node.value() << "/" << r.gpu_mask;
  } else if (const auto* fin = std::get_if<JobFinished>(&e)) {
    s << "finished " << fin->id.value() << " " << static_cast<int>(fin->outcome) << " @" << fin->at << " " << fin->reason;
  } else if (const auto* can = std::get_if<JobCancelled>(&e)) {
    s << "cancelled " << can->id.value() << " @" << can->at << " " << can->reason;
  } else if (const auto* req = std::get_if<JobRequeued>(&e)) {
    s << "requeued " << req->id.value() << " @" << req->at << " " << req->reason;
  } else if (const auto* pre = std::get_if<JobPreempting>(&e)) {
    s << "preempting " << pre->id.value() << " for " << pre->preemptor.value() << " @" << pre->at << " " << pre->reason;
  } else if (const auto* ckp = std::get_if<JobCheckpointed>(&e)) {
    s << "checkpointed " << ckp->id.value() << " @" << ckp->at << " " << ckp->path;
  } else if (const auto* rsz = std::get_if<JobResized>(&e)) {
    s << "resized " << rsz->id.value() << " @" << rsz->at;
  } else if (const auto* rnk = std::get_if<RankRestarted>(&e)) {
    s << "rank-restarted " << rnk->id.value() << " @" << rnk->at;
  }
  return s.str();
}

std::vector<std::string> Lines(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events) {
    if (std::string l = Line(e); !l.empty()) out.push_back(std::move(l));
  }
  return out;
}

// The trace through the real controller at the simulator's step times: at
// each, the emulated agents' reports (one heartbeat per node), then the jobs
// submitted then, then one scheduling cycle (time limits and grace first).
std::vector<std::string> ThroughController(const ClusterConfig& config, const std::vector<TraceJob>& trace,
                                           const TimeSimOptions& options, const std::vector<TimePoint>& steps) {
  ManualClock clock(0);
  server::ControllerOptions o;
  o.config = config;
  o.clock = &clock;
  o.cycle_on_change = false;
  o.schedule_interval = 3600 * kMicrosPerSecond;  // (real time) only ScheduleNow cycles
  o.node_timeout = 1000LL * 24 * 3600 * kMicrosPerSecond;  // emulated agents report only when they have news
  o.min_runtime = options.min_runtime;
  o.preempt_slack = options.preempt_slack;
  auto store = std::make_unique<MemoryStore>();
  MemoryStore* journal = store.get();
  server::Controller c(o, std::move(store));
  EXPECT_TRUE(c.Start().ok());
  for (const NodeState& n : c.snapshot().nodes()) {
    EXPECT_TRUE(c.RegisterNode({n.spec.name, server::Role::kAgent, n.spec.name}, n.spec, true, "").ok());
  }
  std::vector<size_t> trace_of;
  AgentModel agents([&](JobId id) { return ProfileWork(trace[trace_of[id.value() - 1]], options); }, options.save_time);
  size_t seen = 0, next = 0;
  std::vector<Event> events;
  std::vector<std::pair<std::string, std::vector<api::TaskReport>>> reports;
  const server::Principal user{"sim", server::Role::kUser, ""};
  for (TimePoint t : steps) {
    clock.Set(t);
    agents.TakeDue(c.snapshot(), t, &reports);
    for (auto& [node, tasks] : reports) {
      EXPECT_TRUE(c.Heartbeat({node, server::Role::kAgent, node}, {node, {}, tasks}).ok());
    }
    for (; next < trace.size() && trace[next].submit == t; ++next) {
      StatusOr<JobId> id = c.Submit(user, ProfileJobSpec(config, trace[next], next, options));
      if (id.ok()) {
        trace_of.push_back(next);
        EXPECT_EQ(id->value(), trace_of.size());
      }
    }
    c.ScheduleNow();
    // What this step journaled, to the agents.
    size_t k = 0;
    EXPECT_TRUE(journal
                    ->Replay([&](const Event& e) {
                      if (k++ >= seen) {
                        agents.Apply(e);
                        events.push_back(e);
                      }
                      return Status::Ok();
                    })
                    .ok());
    seen = k;
  }
  c.Stop();
  return Lines(events);
}

void ExpectSame(const std::vector<std::string>& sim, const std::vector<std::string>& server) {
  const size_t n = std::min(sim.size(), server.size());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sim[i], server[i]) << "event " << i << " of " << sim.size() << " (simulator) and " << server.size()
                                 << " (controller) is the first to differ";
  }
  EXPECT_EQ(sim.size(), server.size());
}

TEST(Differential, TheSimulatorAndTheControllerJournalTheSameJobEvents) {
  // The default profile, one ordering by attained service (tiresias: a
  // preemptive order, read from JobRecord::attained in both drivers), and
  // the learned order (it ranks from the history the journal's events
  // build, with state kept between cycles).
  ClusterConfig tiresias = Config();
  tiresias.profile.plugins = {{"priority", 1}, {"tiresias", 1}, {"fifo", 1}, {"resource-fit", 1},
                              {"gang", 1},     {"topology", 1}, {"binpack", 1}};
  ClusterConfig learned = tiresias;
  learned.profile.plugins[1] = {"learned", 1};
  for (const auto& [config, seed] : std::vector<std::pair<ClusterConfig, uint64_t>>{
           {Config(), 7}, {Config(), 8}, {Config(), 9}, {tiresias, 7}, {tiresias, 10}, {learned, 7}, {learned, 11}}) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", profile " +
                 (config.profile.plugins.empty() ? "default" : config.profile.plugins[1].name));
    StatusOr<std::vector<NodeSpec>> nodes = ExpandNodes(config);
    ASSERT_TRUE(nodes.ok());
    const std::vector<TraceJob> trace = Trace(150, seed);
    TimeSimOptions options;
    options.policy = "profile";
    options.grace = 60 * kMicrosPerSecond;
    options.min_runtime = 5 * 60 * kMicrosPerSecond;
    ProfileRecord record;
    StatusOr<TimeSimResult> sim = RunProfileSim(config, *nodes, trace, options, &record);
    ASSERT_TRUE(sim.ok()) << sim.status().ToString();
    const std::vector<std::string> sim_lines = Lines(record.events);
    // The scenario exercises what the profile does: placements, evictions
    // through the checkpoint protocol, every job ending.
    auto count = [&](const std::string& prefix) {
      return std::count_if(sim_lines.begin(), sim_lines.end(), [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
    };
    EXPECT_EQ(count("submitted "), 150);
    EXPECT_EQ(count("finished "), 150);
    EXPECT_GT(count("preempting "), 10);
    EXPECT_GT(count("requeued "), 10);
    EXPECT_GT(count("checkpointed "), 100);
    EXPECT_EQ(sim->summary.unfinished, 0);
    EXPECT_EQ(sim->summary.preemptions, count("preempting "));
    // Evicted jobs save on the signal (grace 60 s): little is redone (only
    // by a job whose work ended inside its grace: it exits, and an evicted
    // gang that exits is requeued, as Slurm requeues a preempted job).
    double work_gpu_hours = 0;
    for (const TraceJob& j : trace) work_gpu_hours += static_cast<double>(j.duration * j.TotalGpus()) / kMicrosPerSecond / 3600;
    EXPECT_LT(sim->summary.lost_gpu_hours, 0.005 * work_gpu_hours);

    ExpectSame(sim_lines, ThroughController(config, trace, options, record.steps));
  }
}

TEST(Differential, TheComparisonSeesADifferentPolicy) {
  // The same trace with another minimum run time journals other events:
  // the comparison above is not blind to the policy.
  const ClusterConfig config = Config();
  const std::vector<TraceJob> trace = Trace(80, 7);
  StatusOr<std::vector<NodeSpec>> nodes = ExpandNodes(config);
  ASSERT_TRUE(nodes.ok());
  TimeSimOptions options;
  options.policy = "profile";
  options.grace = 60 * kMicrosPerSecond;
  options.min_runtime = 5 * 60 * kMicrosPerSecond;
  ProfileRecord a, b;
  ASSERT_TRUE(RunProfileSim(config, *nodes, trace, options, &a).ok());
  options.min_runtime = 30 * 60 * kMicrosPerSecond;
  ASSERT_TRUE(RunProfileSim(config, *nodes, trace, options, &b).ok());
  EXPECT_NE(Lines(a.events), Lines(b.events));
  // The learned order decides otherwise than tiresias on the scenario above.
  ClusterConfig tiresias = config, learned = config;
  tiresias.profile.plugins = {{"priority", 1}, {"tiresias", 1}, {"fifo", 1}, {"resource-fit", 1},
                              {"gang", 1},     {"topology", 1}, {"binpack", 1}};
  learned.profile.plugins = tiresias.profile.plugins;
  learned.profile.plugins[1] = {"learned", 1};
  const std::vector<TraceJob> longer = Trace(150, 7);
  options.min_runtime = 5 * 60 * kMicrosPerSecond;
  ProfileRecord t, l;
  ASSERT_TRUE(RunProfileSim(tiresias, *nodes, longer, options, &t).ok());
  ASSERT_TRUE(RunProfileSim(learned, *nodes, longer, options, &l).ok());
  EXPECT_NE(Lines(t.events), Lines(l.events));
}

// Ticks skipped because the engine says nothing can change before a later
// one (CycleResult::unchanged_until: a gang's minimum run time, the learned
// order's ranks, a gang that waits on a checkpoint) change no decision: the
// same job events as with a cycle at every tick (checkpoints aside: the
// agents report them at the next step, the latest of them), with fewer
// cycles. Nor do the cycles not run at steps that bring only checkpoints
// of gangs no decision waits on, before that time. Without decayed fair
// share, which moves with time.
TEST(Differential, SkippedTicksChangeNoDecision) {
  ClusterConfig config = Config();
  config.queues.clear();
  config.fair_share_half_life = 0;
  config.profile.plugins = {{"priority", 1}, {"learned", 1}, {"fifo", 1},   {"resource-fit", 1},
                            {"gang", 1},     {"topology", 1}, {"binpack", 1}};
  StatusOr<std::vector<NodeSpec>> nodes = ExpandNodes(config);
  ASSERT_TRUE(nodes.ok());
  auto decisions = [](const std::vector<Event>& events) {
    std::vector<std::string> out;
    for (const std::string& l : Lines(events)) {
      if (l.rfind("checkpointed ", 0) != 0) out.push_back(l);
    }
    return out;
  };
  // And the default profile (priority, fifo: timeless) with reservations
  // held only within a window, and backfill (half the jobs have limits).
  ClusterConfig windowed = config;
  windowed.profile.plugins.clear();
  windowed.reservation_window = 1800 * kMicrosPerSecond;
  for (const auto& [cfg, seed] : std::vector<std::pair<ClusterConfig, uint64_t>>{
           {config, 7}, {config, 11}, {config, 12}, {windowed, 7}, {windowed, 13}}) {
    SCOPED_TRACE("seed " + std::to_string(seed) + (cfg.profile.plugins.empty() ? ", default profile" : ", learned"));
    const std::vector<TraceJob> trace = Trace(200, seed);
    TimeSimOptions options;
    options.policy = "profile";
    options.grace = 0;  // an eviction loses what was not saved: the learned order weighs it
    options.min_runtime = 5 * 60 * kMicrosPerSecond;
    ProfileRecord skipping, every;
    StatusOr<TimeSimResult> a = RunProfileSim(cfg, *nodes, trace, options, &skipping);
    options.every_tick = true;
    StatusOr<TimeSimResult> b = RunProfileSim(cfg, *nodes, trace, options, &every);
    ASSERT_TRUE(a.ok() && b.ok());
    const std::vector<std::string> lines = decisions(skipping.events);
    ASSERT_EQ(lines, decisions(every.events));
    EXPECT_GT(std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind("preempting ", 0) == 0; }), 5);
    EXPECT_LT(skipping.steps.size(), every.steps.size());
    EXPECT_GT(a->summary.cycles_skipped, 0);
    EXPECT_EQ(b->summary.cycles_skipped, 0);
    for (size_t i = 0; i < trace.size(); ++i) EXPECT_EQ(a->jobs[i].lost_gpu_seconds, b->jobs[i].lost_gpu_seconds) << i;
  }
}

}  // namespace
}  // namespace rota::sim
