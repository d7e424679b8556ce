#include "sched/plan.h"

#include "sched/to_events.h"

#include <algorithm>
#include <map>
#include <set>

namespace rota::sched {

namespace {
std::vector<int32_t> Gpus(uint64_t mask) {
  std::vector<int32_t> out;
  for (int32_t g = 0; g < 64; ++g) {
    if ((mask >> g) & 1) out.push_back(g);
  }
  return out;
}

// The instant the plan is made at: the file's `now`, or the latest time it
// gives (at least a day into the epoch, so that a job counted as having run
// the minimum runtime started after it).
TimePoint PlanNow(const JobList& list) {
  if (list.has_now) return list.now;
  TimePoint now = 24 * 3600 * kMicrosPerSecond;
  for (const JobListEntry& j : list.jobs) now = std::max({now, j.started_at, j.last_checkpoint});
  return now;
}

// Binds running job `id` (jobs[i] of the file) where the file says.
Status BindRunning(ClusterState& state, const JobListEntry& pj, const JobSpec& spec, JobId id, const std::string& path,
                   TimePoint now, Duration min_runtime) {
  Snapshot snap = state.GetSnapshot();
  const int64_t placed = static_cast<int64_t>(pj.placement.size());
  if (spec.elastic() ? placed < spec.elastic_min_replicas || placed > spec.TotalReplicas()
                     : placed != spec.TotalReplicas()) {
    return InvalidArgumentError(path + ".placement: " + std::to_string(pj.placement.size()) + " entries for " +
                                (spec.elastic() ? std::to_string(spec.elastic_min_replicas) + ".." : "") +
                                std::to_string(spec.TotalReplicas()) + " replicas (one per running replica)");
  }
  // Without a start, it has run exactly the minimum runtime: it may be preempted.
  JobBound bound{id, {}, pj.started_at != 0 ? pj.started_at : now - min_runtime};
  size_t k = 0;
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    for (int32_t r = 0; r < spec.tasks[t].replicas && k < pj.placement.size(); ++r, ++k) {
      const ReplicaLocation& p = pj.placement[k];
      const std::string ppath = path + ".placement[" + std::to_string(k) + "]";
      const NodeState* node = snap.FindNode(p.node);
      if (node == nullptr) return InvalidArgumentError(ppath + ".node: no node named '" + p.node + "'");
      uint64_t mask = 0;
      for (int32_t g : p.gpus) {
        if (g < 0 || g >= node->spec.gpus) {
          return InvalidArgumentError(ppath + ".gpus: node '" + p.node + "' has no GPU " + std::to_string(g));
        }
        mask |= 1ULL << g;
      }
      bound.placement.push_back({static_cast<uint16_t>(t), static_cast<uint32_t>(r), node->id, mask,
                                 spec.tasks[t].gpu_share.fraction_milli, p.mig_start});
    }
  }
  if (Status s = state.Apply(bound); !s.ok()) return InvalidArgumentError(path + ".placement: " + std::string(s.message()));
  if (pj.last_checkpoint != 0) {
    if (Status s = state.Apply(JobCheckpointed{id, pj.last_checkpoint, ""}); !s.ok()) {
      return InvalidArgumentError(path + ".last_checkpoint: " + std::string(s.message()));
    }
  }
  return Status::Ok();
}

// What one cycle decided, in the plan's terms (names, not ids).
void RecordCycle(const CycleResult& result, const Snapshot& snap, const std::vector<std::string>& names,
                 PlanOutput* out_ptr) {
  PlanOutput& out = *out_ptr;
  for (const Waiting& w : result.unresolvable) {
    out.rejected.push_back({names[w.job.value() - 1], std::string(ReasonCodeName(w.reason.code)), w.reason.message});
  }
  for (const Reconfiguration& r : result.reconfigurations) {
    out.reconfigurations.push_back({snap.node(r.node).spec.name, r.gpu, r.before, r.layout});
  }
  std::map<JobId, int32_t> size;  // a job resized twice in a cycle goes from its first resize's size
  for (const Resize& r : result.resizes) {
    const JobRecord* job = snap.FindJob(r.job);
    auto [it, first] = size.emplace(r.job, static_cast<int32_t>(job->placement.size()));
    out.resizes.push_back({job->spec().name, it->second, static_cast<int32_t>(r.replicas.size()), r.reason});
    it->second = static_cast<int32_t>(r.replicas.size());
  }
  for (const Placed& p : result.placed) {
    const JobRecord* job = snap.FindJob(p.job);
    for (uint32_t k = p.first; k < p.first + p.count; ++k) {
      const ReplicaPlacement& r = result.replicas[k];
      out.placements.push_back(
          {job->spec().name, job->spec().tasks[r.task].name, r.replica, snap.node(r.node).spec.name, Gpus(r.gpu_mask),
           r.gpu_milli,
           r.mig_start >= 0 ? job->spec().tasks[r.task].gpu_share.mig_profile + "@" + std::to_string(r.mig_start) : ""});
    }
  }
  for (const Preemption& p : result.preemptions) {
    out.preemptions.push_back({names[p.victim.value() - 1], names[p.preemptor.value() - 1], p.reason, p.signal, p.grace});
  }
}

}  // namespace

StatusOr<PlanOutput> RunPlan(const ClusterConfig& cluster, const JobList& list, const PlanOptions& plan_options) {
  const std::vector<JobListEntry>& jobs = list.jobs;
  ROTA_ASSIGN_OR_RETURN(std::vector<NodeSpec> nodes, ExpandNodes(cluster));
  EngineOptions options = EngineOptions::FromConfig(cluster);
  options.name_jobs = plan_options.name_jobs;
  ROTA_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler, Scheduler::Create(cluster, options));
  const TimePoint now = PlanNow(list);
  ClusterState state(cluster.topology);
  for (NodeSpec& n : nodes) ROTA_RETURN_IF_ERROR(state.Apply(NodeAdded{std::move(n)}));
  for (const std::string& name : cluster.drained) ROTA_RETURN_IF_ERROR(state.Apply(NodeDrainChanged{name, true}));

  PlanOutput out;
  out.absolute_times = list.has_now;
  std::vector<std::string> names;  // by JobId - 1
  std::set<std::string> seen;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const JobListEntry& pj = jobs[i];
    const std::string path = "jobs[" + std::to_string(i) + "]";
    if (!seen.insert(pj.spec.name).second) {
      return InvalidArgumentError(path + ".name: duplicate job name '" + pj.spec.name + "'");
    }
    const JobId id(i + 1);
    names.push_back(pj.spec.name);
    JobSpec spec = pj.spec;
    if (Status s = ValidateNewJobSpec(spec); !s.ok()) {
      out.rejected.push_back({spec.name, "Invalid", std::string(s.message())});
      continue;
    }
    if (Status s = ResolveJobPolicy(cluster, &spec); !s.ok()) {
      out.rejected.push_back({spec.name, "Invalid", std::string(s.message())});
      continue;
    }
    // Submission order is file order, all submitted by `now`.
    const TimePoint submitted = now - static_cast<TimePoint>(jobs.size() - i);
    ROTA_RETURN_IF_ERROR(state.Apply(JobSubmitted{id, spec, submitted}));
    if (!pj.running) continue;
    ROTA_RETURN_IF_ERROR(BindRunning(state, pj, spec, id, path, now, options.min_runtime));
  }

  // Schedule until a cycle binds nothing.
  CycleResult result;
  while (true) {
    Snapshot snap = state.GetSnapshot();
    scheduler->RunCycle(snap, now, &result);
    ++out.cycles;
    RecordCycle(result, snap, names, &out);
    // The decisions as the server would journal them (a job the plan placed
    // starts now: a later cycle sees it just started).
    for (Event& e : ToEvents(result, snap, now)) ROTA_RETURN_IF_ERROR(state.Apply(std::move(e)));
    if (result.placed.empty() && result.resizes.empty()) break;
  }
  for (const Waiting& w : result.pending) {
    out.pending.push_back({names[w.job.value() - 1], std::string(ReasonCodeName(w.reason.code)), w.reason.message,
                           w.reason.expected_start, w.reason.expected_start != 0 ? w.reason.expected_start - now : 0});
  }
  Snapshot snap = state.GetSnapshot();
  for (const Reservation& r : result.reservations) {
    PlanOutput::Reserved res{names[r.job.value() - 1], r.start, r.start - now, {}};
    const JobRecord* job = snap.FindJob(r.job);
    for (const ReplicaPlacement& p : r.replicas) {
      res.replicas.push_back({job->spec().name, job->spec().tasks[p.task].name, p.replica, snap.node(p.node).spec.name,
                              Gpus(p.gpu_mask)});
    }
    out.reservations.push_back(std::move(res));
  }
  return out;
}

}  // namespace rota::sched
