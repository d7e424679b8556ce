#include "sim/profile_sim.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <queue>
#include <unordered_set>

#include "base/clock.h"
#include "sched/engine.h"
#include "sched/to_events.h"
#include "server/decisions.h"
#include "server/job_lifecycle.h"

namespace rota::sim {
namespace {

constexpr TimePoint kNever = std::numeric_limits<TimePoint>::max();

// The simulator applies only what the server's code decided on the same
// state: a refusal outside those rules is a bug in the simulator.
void Check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "rota sim: internal error: %s\n", s.ToString().c_str());
    std::abort();
  }
}

}  // namespace

JobSpec ProfileJobSpec(const ClusterConfig& config, const TraceJob& t, size_t index, const TimeSimOptions& options) {
  JobSpec spec;
  spec.name = "j" + std::to_string(index);
  const std::vector<std::string> leaves = LeafQueuePaths(config);
  spec.queue = std::find(leaves.begin(), leaves.end(), t.queue) != leaves.end() ? t.queue : "default";
  spec.priority = t.priority;
  spec.priority_class.clear();
  TaskGroupSpec task;
  task.name = "worker";
  task.replicas = t.replicas;
  task.gpus = t.gpus;
  if (t.cpu > 0) task.cpu = t.cpu;
  if (t.memory > 0) task.memory = t.memory;
  if (t.gpu_models.size() == 1) task.gpu_model = t.gpu_models[0];
  task.command = {"trace-job"};
  spec.tasks.push_back(std::move(task));
  spec.time_limit = t.time_limit;
  spec.preemptible = options.preemptible;
  spec.checkpoint.grace = options.grace;
  return spec;
}

ModelWork ProfileWork(const TraceJob& t, const TimeSimOptions& options) {
  ModelWork w;
  w.duration = t.duration;
  w.checkpoint_interval = t.checkpoint_interval > 0 ? t.checkpoint_interval : options.checkpoint_interval;
  w.grace = options.grace;
  w.gpus = t.TotalGpus();
  return w;
}

StatusOr<TimeSimResult> RunProfileSim(const ClusterConfig& config, const std::vector<NodeSpec>& nodes,
                                      const std::vector<TraceJob>& trace, const TimeSimOptions& options,
                                      ProfileRecord* record) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (options.failure_rate > 0) {
    return InvalidArgumentError("--failures: not simulated with --policy profile yet (the research policies simulate them)");
  }
  if (options.tick <= 0) return InvalidArgumentError("--tick: must be positive");
  ClusterState state(config.topology);
  int64_t total_gpus = 0;
  for (const NodeSpec& n : nodes) {
    Check(state.Apply(NodeAdded{n}));
    total_gpus += n.gpus;
  }
  if (total_gpus == 0) return InvalidArgumentError("--cluster: the cluster has no GPUs");
  for (const std::string& name : config.drained) Check(state.Apply(NodeDrainChanged{name, true}));

  // The server's engine, probe and lifecycle, with its settings.
  sched::EngineOptions engine = sched::EngineOptions::FromConfig(config);
  engine.min_runtime = options.min_runtime;
  ROTA_ASSIGN_OR_RETURN(auto scheduler, sched::Scheduler::Create(config, engine));
  ROTA_ASSIGN_OR_RETURN(auto probe, sched::Scheduler::Create(config, engine));
  ManualClock clock;
  server::JobLifecycle lifecycle(&clock, options.preempt_slack);

  const size_t n = trace.size();
  std::vector<size_t> trace_of;  // job id - 1 -> trace index
  AgentModel agents([&](JobId id) { return ProfileWork(trace[trace_of[id.value() - 1]], options); }, options.save_time);

  TimeSimResult result;
  result.total_gpus = total_gpus;
  result.jobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    JobResult& o = result.jobs[i];
    o.name = trace[i].name;
    o.queue = trace[i].queue;
    o.gpus = trace[i].TotalGpus();
    o.submit = trace[i].submit;
    o.duration = trace[i].duration;
  }

  // Jobs placed (running or evicted and stopping), for time limits and grace.
  std::unordered_set<uint64_t> placed;
  std::vector<JobId> placed_ids;
  // When a time limit or a grace period may run out next (checked lazily).
  std::priority_queue<TimePoint, std::vector<TimePoint>, std::greater<TimePoint>> overdue_at;
  std::vector<Event> decided;
  std::vector<std::pair<std::string, std::vector<api::TaskReport>>> reports;
  sched::CycleResult cycle;
  size_t next_arrival = 0, done = 0, last_progress = 0;
  int64_t allocated = 0;
  int32_t pending = 0, running = 0;
  TimePoint last_cycle = -1;

  // Follows one journaled event: the agents, the counts, the results.
  auto follow = [&](const Event& e) {
    agents.Apply(e);
    if (record != nullptr) record->events.push_back(e);
    if (const auto* b = std::get_if<JobBound>(&e)) {
      const size_t i = trace_of[b->id.value() - 1];
      if (result.jobs[i].first_start < 0) result.jobs[i].first_start = b->at;
      placed.insert(b->id.value());
      allocated += trace[i].TotalGpus();
      --pending;
      ++running;
      if (trace[i].time_limit > 0) overdue_at.push(b->at + trace[i].time_limit + 1);
    } else if (const auto* p = std::get_if<JobPreempting>(&e)) {
      ++result.jobs[trace_of[p->id.value() - 1]].preemptions;
      overdue_at.push(p->at + options.grace + options.preempt_slack + 1);
    } else if (const auto* q = std::get_if<JobRequeued>(&e)) {
      const size_t i = trace_of[q->id.value() - 1];
      placed.erase(q->id.value());
      allocated -= trace[i].TotalGpus();
      ++pending;
      --running;
    } else if (const auto* f = std::get_if<JobFinished>(&e)) {
      const size_t i = trace_of[f->id.value() - 1];
      if (placed.erase(f->id.value()) > 0) {
        allocated -= trace[i].TotalGpus();
        --running;
      } else {
        --pending;
      }
      result.jobs[i].end = f->at;
      ++done;
    } else if (const auto* c = std::get_if<JobCancelled>(&e)) {
      const size_t i = trace_of[c->id.value() - 1];
      if (placed.erase(c->id.value()) > 0) {
        allocated -= trace[i].TotalGpus();
        --running;
      } else {
        --pending;
      }
      result.never.push_back(trace[i].name + ": " + c->reason);
      ++done;
    }
  };

  while (done < n) {
    TimePoint t = next_arrival < n ? trace[next_arrival].submit : kNever;
    t = std::min(t, agents.NextReport());
    while (!overdue_at.empty() && overdue_at.top() <= last_cycle) overdue_at.pop();
    if (!overdue_at.empty()) t = std::min(t, overdue_at.top());
    if (pending > 0 && last_cycle >= 0) t = std::min(t, last_cycle + options.tick);
    if (t == kNever) break;  // nothing runs or arrives: what waits can never run
    clock.Set(t);
    if (record != nullptr) record->steps.push_back(t);
    server::Batch batch{&state};
    // 1. Reports.
    {
      Snapshot snap = state.GetSnapshot();
      agents.TakeDue(snap, t, &reports);
    }
    for (const auto& [node, tasks] : reports) lifecycle.OnTaskReports(batch, node, tasks);
    // 2. Arrivals.
    for (; next_arrival < n && trace[next_arrival].submit == t; ++next_arrival) {
      const size_t i = next_arrival;
      JobRecord probe_job;
      probe_job.id = JobId(trace_of.size() + 1);
      probe_job.spec = ProfileJobSpec(config, trace[i], i, options);
      Status admitted = ValidateNewJobSpec(probe_job.spec);
      if (admitted.ok()) admitted = ResolveJobPolicy(config, &probe_job.spec);
      if (admitted.ok()) {
        Snapshot snap = state.GetSnapshot();
        const sched::PendingReason why = probe->CheckResolvable(snap, probe_job);
        if (!why.ok()) admitted = Status(StatusCode::kOutOfRange, std::string(sched::ReasonCodeName(why.code)) + ": " + why.message);
      }
      if (!admitted.ok()) {
        result.never.push_back(trace[i].name + ": " + std::string(admitted.message()));
        ++done;
        continue;
      }
      trace_of.push_back(i);
      ++pending;
      Check(batch.Apply(JobSubmitted{.id = probe_job.id, .spec = std::move(probe_job.spec), .at = t, .user = "sim"}));
    }
    // 3. Time limits and grace periods.
    {
      placed_ids.clear();
      for (uint64_t id : placed) placed_ids.push_back(JobId(id));
      std::sort(placed_ids.begin(), placed_ids.end());
      server::JobLifecycle::Overdue overdue;
      {
        Snapshot snap = state.GetSnapshot();
        overdue = lifecycle.FindOverdue(snap, placed_ids, t);
      }
      if (!overdue.empty()) lifecycle.EndOverdue(batch, overdue, t);
    }
    for (const Event& e : batch.events) follow(e);
    // 4. One cycle.
    {
      Snapshot snap = state.GetSnapshot();
      const auto begin = std::chrono::steady_clock::now();
      scheduler->RunCycle(snap, t, &cycle);
      result.cycle_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
      decided.clear();
      sched::ToEvents(cycle, snap, t, &decided);
    }  // the snapshot goes before the first Apply, so nothing is copied
    last_cycle = t;
    server::Batch decisions{&state};
    server::ApplyDecisions(decisions, decided, lifecycle);
    for (const Event& e : decisions.events) follow(e);

    if (result.samples.empty() || result.samples.back().allocated_gpus != allocated ||
        result.samples.back().pending != pending || result.samples.back().running != running) {
      result.samples.push_back({t, allocated, pending, running});
    }
    // Nothing runs or will arrive and the cycle decided nothing: what still
    // waits never runs here (its queue's ceiling, a drained node).
    if (running == 0 && next_arrival == n && decisions.events.empty() && agents.NextReport() == kNever) break;
    if (options.progress && done * 100 / n != last_progress) {
      last_progress = done * 100 / n;
      options.progress(static_cast<double>(done) / static_cast<double>(n));
    }
  }

  for (size_t id = 0; id < trace_of.size(); ++id) {
    JobResult& o = result.jobs[trace_of[id]];
    o.lost_gpu_seconds = agents.lost_gpu_seconds(JobId(id + 1));
  }
  {
    Snapshot snap = state.GetSnapshot();
    for (size_t id = 0; id < trace_of.size(); ++id) {
      // Requeues other than after an eviction (the model's jobs never fail:
      // an evicted gang that did not stop within its grace).
      JobResult& o = result.jobs[trace_of[id]];
      if (const JobRecord* job = snap.FindJob(JobId(id + 1))) o.restarts = std::max(0, job->restarts - o.preemptions);
    }
  }
  result.summary = Summarize(result.jobs, result.samples, total_gpus);
  Summary& s = result.summary;
  s.cycles = static_cast<int64_t>(result.cycle_ms.size());
  if (!result.cycle_ms.empty()) {
    std::vector<double> c = result.cycle_ms;
    s.cycle_p50_ms = Percentile(c, 50);
    s.cycle_p99_ms = Percentile(c, 99);
  }
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  if (s.wall_s > 0) s.sim_days_per_wall_s = s.makespan_s / 86400.0 / s.wall_s;
  return result;
}

}  // namespace rota::sim
