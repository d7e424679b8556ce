#include "sim/profile_sim.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <queue>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "base/clock.h"
#include "sched/autoscale.h"
#include "sched/engine.h"
#include "sched/learned.h"
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

// One run of the production profile: the server's engine, probe and job
// lifecycle over one state, driven step by step (the header's order).
class ProfileDriver {
 public:
  ProfileDriver(const ClusterConfig& config, const TimeSimOptions& options, std::function<ModelWork(JobId)> work,
                std::function<void(const Event&)> follow)
      : config_(config),
        options_(options),
        state_(config.topology),
        lifecycle_(&clock_, options.preempt_slack),
        agents_(std::move(work), options.save_time),
        follow_(std::move(follow)) {}

  Status Create() {
    sched::EngineOptions engine = sched::EngineOptions::FromConfig(config_);
    engine.min_runtime = options_.min_runtime;
    ROTA_ASSIGN_OR_RETURN(scheduler_, sched::Scheduler::Create(config_, engine));
    ROTA_ASSIGN_OR_RETURN(probe_, sched::Scheduler::Create(config_, engine));
    return Status::Ok();
  }
  ClusterState& state() { return state_; }
  AgentModel& agents() { return agents_; }
  void SetUsageHistory(const std::map<std::string, double>& average_gpus) { scheduler_->SetUsageHistory(average_gpus); }
  const std::vector<double>& cycle_ms() const { return cycle_ms_; }
  int64_t skipped() const { return skipped_; }
  TimePoint last_cycle() const { return last_cycle_; }
  bool last_cycle_decided() const { return last_decided_; }
  // The next tick a cycle is needed at, `tick` after the last step or a
  // whole number of ticks later (kNever: none): a cycle that decided nothing
  // decides nothing while the state stays as it is until the engine's
  // unchanged_until, or a checkpoint of a gang that waits on one (the
  // agents report checkpoints at the next step).
  TimePoint NextTick(Duration tick) const {
    TimePoint quiet = last_cycle_ + tick;
    if (!options_.every_tick && !last_decided_ && cycle_.unchanged_until > 0) {
      quiet = cycle_.unchanged_until;
      for (JobId id : cycle_.waits_on_checkpoint) quiet = std::min(quiet, agents_.NextCheckpoint(id));
    }
    if (quiet <= last_cycle_ + tick) return last_cycle_ + tick;
    if (quiet == kNever) return kNever;
    return last_cycle_ + (quiet - last_cycle_ + tick - 1) / tick * tick;
  }

  // Applies an event of the starting state (nodes, jobs already live): the
  // agents and the driver follow it, the caller's hook does not.
  Status Seed(const Event& e) {
    ROTA_RETURN_IF_ERROR(state_.Apply(e));
    Track(e);
    return Status::Ok();
  }

  // Admits a job as the server does (ValidateNewJobSpec, ResolveJobPolicy,
  // CheckResolvable): journals it, or says why it is refused. An array's
  // element carries its array (`array` as JobSubmitted's, else none).
  Status Submit(server::Batch& batch, JobId id, JobSpec spec, TimePoint t, const std::string& user,
                const ArrayRange* array = nullptr, JobId array_id = JobId()) {
    ROTA_RETURN_IF_ERROR(ValidateNewJobSpec(spec));
    ROTA_RETURN_IF_ERROR(ResolveJobPolicy(config_, &spec));
    JobRecord probe;
    probe.id = id;
    probe.SetSpec(std::move(spec));
    {
      Snapshot snap = state_.GetSnapshot();
      const sched::PendingReason why = probe_->CheckResolvable(snap, probe);
      if (!why.ok()) return Status(StatusCode::kOutOfRange, std::string(sched::ReasonCodeName(why.code)) + ": " + why.message);
    }
    JobSubmitted e{.id = id, .spec = std::move(probe.spec()), .at = t, .user = user};
    if (array != nullptr && array->is_array()) {
      e.array = array_id;
      e.array_count = array->count;
      e.array_first_index = array->first_index;
      e.array_max_running = array->max_running;
    }
    Check(batch.Apply(std::move(e)));
    return Status::Ok();
  }

  // When a report, a time limit or a grace period is due next (kNever: none).
  TimePoint NextDue() { return std::min(agents_.NextReport(), NextOverdue()); }
  // When a time limit or a grace period may run out next (kNever: none):
  // those that came due by the last cycle were ended by it.
  TimePoint NextOverdue() {
    while (!overdue_at_.empty() && overdue_at_.top() <= last_cycle_) overdue_at_.pop();
    return overdue_at_.empty() ? kNever : overdue_at_.top();
  }

  // One step at `t`: reports, `arrivals` (submissions into the batch), time
  // limits and grace periods, one cycle.
  void Step(TimePoint t, const std::function<void(server::Batch&)>& arrivals) {
    clock_.Set(t);
    server::Batch batch{&state_};
    {
      Snapshot snap = state_.GetSnapshot();
      agents_.TakeDue(snap, t, &reports_);
    }
    for (const auto& [node, tasks] : reports_) lifecycle_.OnTaskReports(batch, node, tasks);
    if (arrivals) arrivals(batch);
    // Time limits and grace periods: only when one may run out by now (a
    // job's comes due after the last cycle's time, which ended those due
    // then); most steps have none, and the walk reads every placed job.
    if (NextOverdue() <= t) {
      placed_ids_.assign(placed_.begin(), placed_.end());  // (in id order: a set)
      server::JobLifecycle::Overdue overdue;
      {
        Snapshot snap = state_.GetSnapshot();
        overdue = lifecycle_.FindOverdue(snap, placed_ids_, t);
      }
      if (!overdue.empty()) lifecycle_.EndOverdue(batch, overdue, t);
    }
    for (const Event& e : batch.events) Follow(e);
    if (Unchanged(batch.events, t)) {
      last_cycle_ = t;  // (as if it ran: the ticks and time limits count from here)
      ++skipped_;
      return;
    }
    {
      Snapshot snap = state_.GetSnapshot();
      const auto begin = std::chrono::steady_clock::now();
      scheduler_->RunCycle(snap, t, &cycle_);
      cycle_ms_.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
      decided_.clear();
      sched::ToEvents(cycle_, snap, t, &decided_);
    }  // the snapshot goes before the first Apply, so nothing is copied
    last_cycle_ = t;
    server::Batch decisions{&state_};
    server::ApplyDecisions(decisions, decided_, lifecycle_);
    last_decided_ = !decisions.events.empty();
    for (const Event& e : decisions.events) Follow(e);
  }

 private:
  // Whether this step's cycle would decide nothing (it is not run; the
  // server's would publish nothing): the last cycle decided nothing, the
  // engine said nothing may change before its unchanged_until while the
  // state stays as it is, and all that changed is checkpoints of gangs no
  // decision waits on (CycleResult::waits_on_checkpoint). A fifth of the
  // steps of a whole-Philly replay are periodic checkpoints alone.
  bool Unchanged(const std::vector<Event>& events, TimePoint t) const {
    if (options_.every_tick || last_decided_ || t >= cycle_.unchanged_until) return false;
    for (const Event& e : events) {
      const auto* c = std::get_if<JobCheckpointed>(&e);
      if (c == nullptr) return false;
      const auto& waits = cycle_.waits_on_checkpoint;
      if (std::find(waits.begin(), waits.end(), c->id) != waits.end()) return false;
    }
    return true;
  }
  void Follow(const Event& e) {
    Track(e);
    if (follow_) follow_(e);
  }
  // The agents, the placed jobs and when their limits may run out.
  void Track(const Event& e) {
    agents_.Apply(e);
    if (const auto* b = std::get_if<JobBound>(&e); b != nullptr && !b->ended) {
      placed_.insert(b->id);
      const JobRecord* job = state_.GetSnapshot().FindJob(b->id);
      if (job != nullptr && job->spec().time_limit > 0) overdue_at_.push(b->at + job->spec().time_limit + 1);
    } else if (const auto* p = std::get_if<JobPreempting>(&e)) {
      const JobRecord* job = state_.GetSnapshot().FindJob(p->id);
      overdue_at_.push(p->at + (job != nullptr ? job->spec().checkpoint.grace : 0) + options_.preempt_slack + 1);
    } else if (const auto* q = std::get_if<JobRequeued>(&e)) {
      placed_.erase(q->id);
    } else if (const auto* f = std::get_if<JobFinished>(&e)) {
      placed_.erase(f->id);
    } else if (const auto* c = std::get_if<JobCancelled>(&e)) {
      placed_.erase(c->id);
    }
  }

  const ClusterConfig& config_;
  const TimeSimOptions& options_;
  ClusterState state_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::unique_ptr<sched::Scheduler> probe_;  // resolvability at submission, as the server's
  ManualClock clock_;
  server::JobLifecycle lifecycle_;
  AgentModel agents_;
  std::function<void(const Event&)> follow_;
  std::set<JobId> placed_;  // running or evicted and stopping: time limits and grace
  std::vector<JobId> placed_ids_;
  std::priority_queue<TimePoint, std::vector<TimePoint>, std::greater<TimePoint>> overdue_at_;
  std::vector<std::pair<std::string, std::vector<api::TaskReport>>> reports_;
  sched::CycleResult cycle_;
  std::vector<Event> decided_;
  std::vector<double> cycle_ms_;
  int64_t skipped_ = 0;  // steps whose cycle would have decided nothing (Unchanged)
  TimePoint last_cycle_ = -1;
  bool last_decided_ = false;
};

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
  const size_t n = trace.size();
  std::vector<size_t> trace_of;  // job id - 1 -> trace index
  TimeSimResult result;
  result.jobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    JobResult& o = result.jobs[i];
    o.name = trace[i].name;
    o.queue = trace[i].queue;
    o.gpus = trace[i].TotalGpus();
    o.submit = trace[i].submit;
    o.duration = trace[i].duration;
  }
  // The services (ServiceModel): their jobs, submitted at their time, and
  // an autoscaler each, ticked every second as the server's ServiceManager
  // ticks them.
  constexpr size_t kService = std::numeric_limits<size_t>::max();  // (trace_of of a service's job)
  const std::vector<ServiceLoad>& loads = options.services;
  std::vector<ServiceModel> models;
  std::vector<std::unique_ptr<sched::Autoscaler>> scalers;
  std::vector<JobId> service_job(loads.size());
  std::vector<bool> ended(loads.size(), false);  // its load ended: its job is cancelled
  std::vector<int64_t> service_gpus(loads.size(), 0);
  std::unordered_map<uint64_t, size_t> service_of;  // job id -> service
  std::vector<size_t> service_order(loads.size());  // by submit time
  for (size_t k = 0; k < loads.size(); ++k) {
    if (!loads[k].spec.is_service()) return InvalidArgumentError("--services: " + loads[k].spec.name + ": not a service");
    models.emplace_back(loads[k], options.seed * 1'000'003 + k);
    scalers.push_back(std::make_unique<sched::Autoscaler>(loads[k].spec.service));
    service_order[k] = k;
  }
  std::stable_sort(service_order.begin(), service_order.end(),
                   [&](size_t a, size_t b) { return loads[a].submit < loads[b].submit; });
  size_t next_service = 0;
  result.services.resize(loads.size());
  size_t done = 0;
  int64_t allocated = 0;
  int32_t pending = 0, running = 0;
  std::vector<bool> on_gpus(n, false);
  // Follows one journaled event: the counts, the results.
  auto follow = [&](const Event& e) {
    if (record != nullptr) record->events.push_back(e);
    if (!service_of.empty()) {
      if (auto it = service_of.find(EventJob(e).value()); it != service_of.end()) {
        // Its GPUs count as allocated; its replicas go to the model.
        int64_t& held = service_gpus[it->second];
        const std::vector<ReplicaPlacement>* placement = nullptr;
        if (const auto* b = std::get_if<JobBound>(&e)) placement = &b->placement;
        if (const auto* r = std::get_if<JobResized>(&e)) placement = &r->placement;
        if (placement != nullptr || std::holds_alternative<JobRequeued>(e) || std::holds_alternative<JobFinished>(e) ||
            std::holds_alternative<JobCancelled>(e)) {
          int64_t now_held = 0, milli = 0;  // (shares of GPUs summed, rounded up: as quotas count them)
          if (placement != nullptr) {
            for (const ReplicaPlacement& p : *placement) {
              if (p.shares_gpu()) milli += loads[it->second].spec.tasks[p.task].gpu_share.milli();
              else now_held += std::popcount(p.gpu_mask);
            }
          }
          now_held += (milli + 999) / 1000;
          allocated += now_held - held;
          held = now_held;
        }
        models[it->second].Apply(e);
        return;
      }
    }
    auto off = [&](size_t i) {
      if (on_gpus[i]) {
        on_gpus[i] = false;
        allocated -= trace[i].TotalGpus();
        --running;
      } else {
        --pending;
      }
    };
    if (const auto* b = std::get_if<JobBound>(&e)) {
      const size_t i = trace_of[b->id.value() - 1];
      if (result.jobs[i].first_start < 0) result.jobs[i].first_start = b->at;
      on_gpus[i] = true;
      allocated += trace[i].TotalGpus();
      --pending;
      ++running;
    } else if (const auto* p = std::get_if<JobPreempting>(&e)) {
      if (!p->restart) ++result.jobs[trace_of[p->id.value() - 1]].preemptions;
    } else if (const auto* q = std::get_if<JobRequeued>(&e)) {
      off(trace_of[q->id.value() - 1]);
      ++pending;
    } else if (const auto* f = std::get_if<JobFinished>(&e)) {
      const size_t i = trace_of[f->id.value() - 1];
      off(i);
      result.jobs[i].end = f->at;
      ++done;
    } else if (const auto* c = std::get_if<JobCancelled>(&e)) {
      const size_t i = trace_of[c->id.value() - 1];
      off(i);
      result.never.push_back(trace[i].name + ": " + c->reason);
      ++done;
    }
  };
  auto work = [&](JobId id) {
    if (auto it = service_of.find(id.value()); it != service_of.end()) {
      ModelWork w;  // (runs until the load ends: the run ends first)
      w.duration = std::numeric_limits<Duration>::max() / 4;
      w.grace = loads[it->second].spec.checkpoint.grace;
      w.gpus = loads[it->second].spec.TotalGpus();
      return w;
    }
    return ProfileWork(trace[trace_of[id.value() - 1]], options);
  };
  ProfileDriver driver(config, options, work, follow);
  ROTA_RETURN_IF_ERROR(driver.Create());
  int64_t total_gpus = 0;
  for (const NodeSpec& node : nodes) {
    ROTA_RETURN_IF_ERROR(driver.Seed(NodeAdded{node}));
    total_gpus += node.gpus;
  }
  if (total_gpus == 0) return InvalidArgumentError("--cluster: the cluster has no GPUs");
  for (const std::string& name : config.drained) ROTA_RETURN_IF_ERROR(driver.Seed(NodeDrainChanged{name, true}));
  result.total_gpus = total_gpus;

  size_t next_arrival = 0, last_progress = 0;
  Status refused = Status::Ok();
  TimePoint next_tick = kNever;  // the services' next autoscaler tick
  auto service_arrival = [&] { return next_service < loads.size() ? loads[service_order[next_service]].submit : kNever; };
  // The first end of a live service's load (kNever: none live).
  auto next_end = [&] {
    TimePoint end = kNever;
    for (size_t k = 0; k < loads.size(); ++k) {
      if (service_job[k].value() != 0 && !ended[k]) end = std::min(end, loads[k].end());
    }
    return end;
  };
  // What comes in at `t`: the trace's jobs, the services submitted then,
  // each service whose load ended (its job cancelled), and, at a tick, each
  // live service's autoscaler decision (journaled as the server's
  // ServiceManager journals it: placed in this step's cycle).
  TimePoint t = 0;
  bool tick = false;  // this step is a services' tick
  const std::function<void(server::Batch&)> inputs = [&](server::Batch& batch) {
    for (; next_arrival < n && trace[next_arrival].submit == t; ++next_arrival) {
      const size_t i = next_arrival;
      const Status admitted =
          driver.Submit(batch, JobId(trace_of.size() + 1), ProfileJobSpec(config, trace[i], i, options), t, "sim");
      if (!admitted.ok()) {
        result.never.push_back(trace[i].name + ": " + std::string(admitted.message()));
        ++done;
        continue;
      }
      trace_of.push_back(i);
      ++pending;
    }
    for (; next_service < loads.size() && loads[service_order[next_service]].submit == t; ++next_service) {
      const size_t k = service_order[next_service];
      const JobId id(trace_of.size() + 1);
      const Status admitted = driver.Submit(batch, id, loads[k].spec, t, "sim");
      if (!admitted.ok()) {
        refused = InvalidArgumentError("--services: service '" + loads[k].spec.name + "' refused: " + std::string(admitted.message()));
        return;
      }
      trace_of.push_back(kService);
      service_job[k] = id;
      service_of[id.value()] = k;
      if (next_tick == kNever || next_tick <= t) next_tick = (t / kMicrosPerSecond + 1) * kMicrosPerSecond;
    }
    for (size_t k = 0; k < loads.size(); ++k) {
      if (service_job[k].value() == 0 || ended[k]) continue;
      // (Read, then let go of the snapshot before applying: one held
      // across an Apply copies the state.)
      JobState state = JobState::kCancelled;
      int32_t current = 0;
      {
        const Snapshot snap = batch.state->GetSnapshot();
        if (const JobRecord* job = snap.FindJob(service_job[k])) {
          state = job->state;
          current = job->DesiredReplicas();
        }
      }
      if (t >= loads[k].end()) {
        // Its load ended: what it measured, then its job goes (its GPUs
        // go back to the trace's jobs).
        result.services[k] = models[k].Finish(t);
        if (!result.services[k].placed.empty() && result.services[k].placed.back().second != 0) {
          result.services[k].placed.push_back({t, 0});
        }
        ended[k] = true;
        if (Live(state)) {
          Check(batch.Apply(JobCancelled{service_job[k], t, "its simulated load ended"}));
        }
        continue;
      }
      if (!tick) continue;
      const sched::AutoscaleSample sample = models[k].Advance(t);
      if (state == JobState::kRunning) {
        // Replicas that exit now are restarted alone, in place, as the
        // server's lifecycle restarts a service's replica.
        for (uint32_t replica : models[k].Failures(kMicrosPerSecond)) {
          Check(batch.Apply(RankRestarted{service_job[k], 0, replica, t, "exited (simulated failure)"}));
        }
      }
      if (state != JobState::kRunning || !loads[k].spec.service.autoscale.enabled()) continue;
      scalers[k]->Observe(sample);
      const sched::AutoscaleDecision d = scalers[k]->Decide(t, current, models[k].ready());
      if (d.desired == current) continue;
      Check(batch.Apply(ServiceScaled{service_job[k], t, d.desired, d.reason}));
      models[k].Decided(t, current, d.desired, d.panic, d.reason);
    }
  };  // (made once: a step allocates nothing for it)
  const std::function<void(server::Batch&)> no_inputs;
  auto services_live = [&] { return next_service < loads.size() || next_end() != kNever; };
  while (done < n || services_live()) {
    const TimePoint arrival = std::min(next_arrival < n ? trace[next_arrival].submit : kNever, service_arrival());
    t = std::min(arrival, driver.NextDue());
    if (pending > 0 && driver.last_cycle() >= 0) t = std::min(t, driver.NextTick(options.tick));
    const TimePoint end = next_end();
    const bool ticking = end != kNever;  // (a tick a second while a service's load runs)
    if (ticking) t = std::min({t, next_tick, end});
    if (t == kNever) break;  // nothing runs or arrives: what waits can never run
    if (record != nullptr) record->steps.push_back(t);
    tick = ticking && t == next_tick;
    if (tick) next_tick += kMicrosPerSecond;
    driver.Step(t, t == arrival || tick || t == end ? inputs : no_inputs);
    if (!refused.ok()) return refused;
    if (result.samples.empty() || result.samples.back().allocated_gpus != allocated ||
        result.samples.back().pending != pending || result.samples.back().running != running) {
      result.samples.push_back({t, allocated, pending, running});
    }
    // Nothing runs or will arrive and the cycle decided nothing: what still
    // waits never runs here (its queue's ceiling, a drained node).
    if (running == 0 && next_arrival == n && !services_live() && !driver.last_cycle_decided() &&
        driver.NextDue() == kNever) {
      break;
    }
    if (options.progress && n > 0 && done * 100 / n != last_progress) {
      last_progress = done * 100 / n;
      options.progress(static_cast<double>(done) / static_cast<double>(n));
    }
  }
  for (size_t k = 0; k < loads.size(); ++k) {
    if (!ended[k]) result.services[k] = models[k].Finish(t);  // (never submitted: the run ended first)
  }

  {
    Snapshot snap = driver.state().GetSnapshot();
    for (size_t id = 0; id < trace_of.size(); ++id) {
      if (trace_of[id] == kService) continue;
      JobResult& o = result.jobs[trace_of[id]];
      o.lost_gpu_seconds = driver.agents().lost_gpu_seconds(JobId(id + 1));
      // Requeues other than after an eviction (the model's jobs never fail:
      // an evicted gang that did not stop within its grace).
      if (const JobRecord* job = snap.FindJob(JobId(id + 1))) o.restarts = std::max(0, job->restarts - o.preemptions);
    }
  }
  result.cycle_ms = driver.cycle_ms();
  result.cycles_skipped = driver.skipped();
  FinishSummary(&result, total_gpus, wall_start);
  return result;
}

StatusOr<Projection> Project(const ClusterConfig& config, const Snapshot& snap, TimePoint now,
                             const ProjectOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (options.sim.tick <= 0 || options.resolution <= 0 || options.horizon <= 0) {
    return InvalidArgumentError("tick, resolution and horizon must be positive");
  }
  Projection out;
  // The default run time: the median of the finished jobs' among the latest
  // 100,000 submitted (what the cluster runs now, at a bounded cost).
  out.default_run = options.default_run;
  if (out.default_run <= 0) {
    std::vector<Duration> runs;
    const JobTable& jobs = snap.jobs();
    constexpr uint64_t kRecent = 100'000;
    const uint64_t last = jobs.max_id().value();
    for (auto it = last > kRecent ? jobs.upper_bound(JobId(last - kRecent)) : jobs.begin(); it != jobs.end(); ++it) {
      const JobRecord& j = *it->second;
      if (j.state == JobState::kSucceeded && j.started_at > 0 && j.finished_at > j.started_at) {
        runs.push_back(j.finished_at - j.started_at);
      }
    }
    if (!runs.empty()) {
      std::nth_element(runs.begin(), runs.begin() + static_cast<ptrdiff_t>(runs.size() / 2), runs.end());
      out.default_run = runs[runs.size() / 2];
    } else {
      out.default_run = 3600 * kMicrosPerSecond;
    }
  }
  // What each live job runs for, and whether that is an estimate.
  std::unordered_map<uint64_t, ModelWork> work;
  std::unordered_map<uint64_t, bool> estimated;
  std::map<JobId, size_t> index;  // pending job -> out.jobs
  for (const auto& [id, job] : snap.live_jobs()) {
    ModelWork w;
    w.checkpoint_interval = options.sim.checkpoint_interval;
    w.grace = job->spec().checkpoint.grace;
    w.gpus = job->spec().TotalGpus();
    const bool limited = job->spec().time_limit > 0;
    // Without a limit: what the learned history expects of its GPU-time
    // (its sweep's, the finished jobs'), less what it has run; else the
    // median run.
    Duration learned = 0;
    if (!limited && w.gpus > 0 && !job->spec().is_service()) {  // (a service runs on)
      const double attained = static_cast<double>(job->AttainedAt(now)) * static_cast<double>(w.gpus) / kMicrosPerSecond;
      const double total = sched::EstimateGpuSeconds(snap.history(), job->sweep, attained);
      if (total > 0) learned = static_cast<Duration>(total / static_cast<double>(w.gpus) * kMicrosPerSecond) - job->attained;
      if (learned > 0) ++out.learned;
    }
    if (job->state == JobState::kPending) {
      w.duration = limited ? job->spec().time_limit : learned > 0 ? learned : out.default_run;
      index[id] = out.jobs.size();
      out.jobs.push_back({id, -1, false, "", {}});
    } else {
      const Duration elapsed = std::max<Duration>(0, now - job->started_at);
      w.duration = limited       ? job->spec().time_limit
                   : learned > 0 ? std::max(learned, elapsed + kMicrosPerSecond)
                                 : std::max(out.default_run, elapsed + out.default_run / 10);
    }
    work[id.value()] = w;
    estimated[id.value()] = !limited;
  }
  TimePoint first_estimated_end = kNever;
  size_t started = 0;
  auto follow = [&](const Event& e) {
    if (const auto* b = std::get_if<JobBound>(&e)) {
      auto it = index.find(b->id);
      if (it != index.end() && out.jobs[it->second].start < 0) {
        out.jobs[it->second].start = b->at;
        out.jobs[it->second].placement = b->placement;
        out.jobs[it->second].estimate = b->at >= first_estimated_end;
        ++started;
      }
    } else if (const auto* f = std::get_if<JobFinished>(&e)) {
      if (estimated[f->id.value()]) first_estimated_end = std::min(first_estimated_end, f->at);
    } else if (const auto* q = std::get_if<JobRequeued>(&e)) {
      if (estimated[q->id.value()]) first_estimated_end = std::min(first_estimated_end, q->at);
    } else if (const auto* c = std::get_if<JobCancelled>(&e)) {
      auto it = index.find(c->id);
      if (it != index.end() && out.jobs[it->second].start < 0 && out.jobs[it->second].why.empty()) {
        out.jobs[it->second].why = c->reason;
        ++started;
      }
    }
  };
  ProfileDriver driver(
      config, options.sim, [&](JobId id) { return work.at(id.value()); }, follow);
  ROTA_RETURN_IF_ERROR(driver.Create());
  if (!options.usage_history.empty()) driver.SetUsageHistory(options.usage_history);
  ROTA_RETURN_IF_ERROR(CompactState(snap, [&](const Event& e) { return driver.Seed(e); }, /*live_only=*/true));
  // The changes.
  std::map<std::string, int64_t> more_of;  // a group named twice adds both counts
  for (const auto& [group, count] : options.change.add_nodes) more_of[group] += count;
  for (const auto& [group, count] : more_of) {
    ClusterConfig more = config;
    auto g = std::find_if(more.node_groups.begin(), more.node_groups.end(), [&](const NodeGroupConfig& n) { return n.name == group; });
    if (g == more.node_groups.end()) {
      std::string names;
      for (const NodeGroupConfig& n : config.node_groups) names += (names.empty() ? "" : ", ") + n.name;
      return InvalidArgumentError("add_nodes: no node group '" + group + "' in the config" +
                                  (names.empty() ? std::string(" (it declares none)") : " (groups: " + names + ")"));
    }
    if (count < 1 || count > 100'000) return InvalidArgumentError("add_nodes: " + group + ": count must be 1..100000");
    g->count += static_cast<int32_t>(count);
    ROTA_ASSIGN_OR_RETURN(std::vector<NodeSpec> specs, ExpandNodes(more));
    int32_t added = 0;
    for (NodeSpec& n : specs) {
      if (driver.state().GetSnapshot().FindNode(n.name) != nullptr) continue;
      if (n.name.rfind(group + "-", 0) != 0) continue;
      ROTA_RETURN_IF_ERROR(driver.Seed(NodeAdded{std::move(n)}));
      if (++added == count) break;
    }
  }
  for (const std::string& name : options.change.drain) {
    if (driver.state().GetSnapshot().FindNode(name) == nullptr) return InvalidArgumentError("drain: no node '" + name + "'");
    ROTA_RETURN_IF_ERROR(driver.Seed(NodeDrainChanged{name, true, "what-if"}));
  }

  // The dry run's jobs, submitted at the first step.
  const uint64_t first_new = std::max(snap.jobs().max_id().value() + 1, snap.issued_below());  // (no forgotten job's)
  for (size_t k = 0; k < options.submit.size(); ++k) {
    const JobId id(first_new + k);
    ModelWork w;
    w.checkpoint_interval = options.sim.checkpoint_interval;
    w.grace = options.submit[k].checkpoint.grace;
    w.gpus = options.submit[k].TotalGpus();
    w.duration = options.submit[k].time_limit > 0 ? options.submit[k].time_limit : out.default_run;
    work[id.value()] = w;
    estimated[id.value()] = options.submit[k].time_limit <= 0;
    index[id] = out.jobs.size();
    out.jobs.push_back({id, -1, false, "", {}});
  }
  Status refused = Status::Ok();
  auto submit = [&](server::Batch& batch) {
    for (size_t k = 0; k < options.submit.size() && refused.ok(); ++k) {
      refused = driver.Submit(batch, JobId(first_new + k), options.submit[k], now, options.user, &options.submit_array,
                              JobId(first_new));
    }
  };

  const TimePoint end = now + options.horizon;
  // The step at or after `t`, on a whole resolution; coarser further ahead
  // (a 32nd of the distance from now): an estimate hours ahead needs no
  // minute, and each step is a cycle over the whole queue.
  auto resolution = [&](TimePoint t) {
    const Duration far = (t - now) / 32;
    return std::max(options.resolution, (far + options.resolution - 1) / options.resolution * options.resolution);
  };
  auto round_up = [&](TimePoint t) {
    if (t == kNever) return t;
    const Duration r = resolution(t);
    return now + (t - now + r - 1) / r * r;
  };
  TimePoint t = now;
  while (started < out.jobs.size() && t <= end) {
    driver.Step(t, out.steps == 0 && !options.submit.empty() ? std::function<void(server::Batch&)>(submit) : nullptr);
    ++out.steps;
    if (!refused.ok()) return refused;
    if (started == out.jobs.size()) break;
    // Nothing runs (every running job has an end due) and the cycle decided
    // nothing: nothing more will start.
    if (driver.NextDue() == kNever && !driver.last_cycle_decided()) break;
    // Out of wall time (a server bounds what one request may cost): what has
    // not started by now is reported as beyond the projection.
    if (options.wall_budget > 0 &&
        std::chrono::steady_clock::now() - wall_start > std::chrono::microseconds(options.wall_budget)) {
      out.cut_short = true;
      break;
    }
    TimePoint next = round_up(driver.NextDue());
    next = std::min(next, round_up(t + std::max(options.sim.tick, resolution(t))));
    if (next <= t) next = t + resolution(t);
    t = next;
  }
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return out;
}

}  // namespace rota::sim
