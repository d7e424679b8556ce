#include "sched/engine.h"

#include <algorithm>

namespace rota::sched {

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const ProfileConfig& config, const Registry& registry) {
  ROTA_ASSIGN_OR_RETURN(Profile profile, Profile::Create(config, registry));
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(profile)));
}

Scheduler::Scheduler(Profile profile)
    : profile_(std::move(profile)), txn_(&ws_), ctx_(&profile_, &ws_, &txn_) {}

bool Scheduler::BuildRequest(const Snapshot& snap, const JobRecord& job, PendingReason* why) {
  const JobSpec& spec = job.spec;
  const Topology& topo = snap.topology();
  request_.job = &job;
  request_.selector = spec.node_selector.empty() ? &empty_labels_ : &spec.node_selector;
  request_.tasks.clear();
  request_.total_gpus = 0;
  request_.total_replicas = 0;
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskGroupSpec& t = spec.tasks[i];
    if (t.gpu_share.shared()) {
      *why = {ReasonCode::kUnsupported, "tasks[" + std::to_string(i) +
                                            "].gpu: MIG slices and GPU fractions are not scheduled yet; ask for whole gpus"};
      return false;
    }
    TaskRequest r;
    r.task = static_cast<uint16_t>(i);
    r.replicas = t.replicas;
    r.gpus = t.gpus;
    r.cpu = t.cpu;
    r.memory = t.memory;
    r.gpu_memory = t.gpu_memory;
    if (!t.gpu_model.empty()) {
      r.model = snap.ModelIndex(t.gpu_model);
      r.model_missing = r.model < 0;
    }
    request_.tasks.push_back(r);
    request_.total_gpus += static_cast<int64_t>(t.replicas) * t.gpus;
    request_.total_replicas += t.replicas;
  }
  const int32_t root = static_cast<int32_t>(topo.domain_levels().size());
  if (spec.topology.level.empty()) {
    request_.level = root;
    request_.required = false;
  } else {
    request_.level = topo.DomainLevelIndex(spec.topology.level);
    request_.required = spec.topology.mode == TopologyMode::kRequired;
    if (request_.level < -1) {
      std::string levels = "node";
      for (const auto& l : topo.domain_levels()) levels += ", " + l;
      *why = {ReasonCode::kInvalid, "topology.level: the cluster has no level '" + spec.topology.level +
                                        "' (levels: " + levels + ", cluster)"};
      return false;
    }
  }
  return true;
}

bool Scheduler::SameShape(const JobRecord& a, const JobRecord& b) const {
  const JobSpec& x = a.spec;
  const JobSpec& y = b.spec;
  if (x.tasks.size() != y.tasks.size() || x.node_selector != y.node_selector ||
      x.topology.level != y.topology.level || x.topology.mode != y.topology.mode) {
    return false;
  }
  for (size_t i = 0; i < x.tasks.size(); ++i) {
    const TaskGroupSpec& s = x.tasks[i];
    const TaskGroupSpec& t = y.tasks[i];
    if (s.replicas != t.replicas || s.gpus != t.gpus || s.cpu != t.cpu || s.memory != t.memory ||
        s.gpu_model != t.gpu_model || s.gpu_memory != t.gpu_memory || s.gpu_share.shared() || t.gpu_share.shared()) {
      return false;
    }
  }
  return true;
}

void Scheduler::RunCycle(const Snapshot& snap, CycleResult* out) {
  out->Clear();
  out->revision = snap.revision();
  ws_.Reset(snap);
  ctx_.NewCycle();
  failures_.clear();

  order_.clear();
  for (const auto& [id, job] : snap.jobs()) {
    if (job->state == JobState::kPending) order_.push_back(job.get());
  }
  std::stable_sort(order_.begin(), order_.end(), [this](const JobRecord* a, const JobRecord* b) {
    for (const JobOrderPlugin* o : profile_.job_orders()) {
      if (int c = o->Compare(*a, *b); c != 0) return c < 0;
    }
    return a->id < b->id;
  });

  const Topology& topo = snap.topology();
  for (const JobRecord* job : order_) {
    PendingReason why;
    if (!BuildRequest(snap, *job, &why)) {
      out->unresolvable.push_back({job->id, std::move(why)});
      continue;
    }
    auto seen = std::find_if(failures_.begin(), failures_.end(),
                             [&](const Failure& f) { return SameShape(*f.job, *job); });
    if (seen != failures_.end()) {
      (seen->unresolvable ? out->unresolvable : out->pending).push_back({job->id, seen->reason});
      continue;
    }

    txn_.Begin();
    bool ok = profile_.placer().Place(ctx_, request_);
    for (const JobReadyPlugin* r : profile_.job_ready()) {
      ok = ok && r->Ready(request_, static_cast<int64_t>(txn_.steps().size()));
    }
    if (ok) {
      out->placed.push_back({job->id, static_cast<uint32_t>(out->replicas.size()),
                             static_cast<uint32_t>(txn_.steps().size())});
      for (const Txn::Step& s : txn_.steps()) {
        out->replicas.push_back({s.task, s.replica, topo.node_at(s.pos), s.mask});
      }
      continue;
    }
    txn_.Rollback();
    PendingReason reason = ExplainUnresolvable(ctx_, request_);
    const bool unresolvable = !reason.ok();
    if (!unresolvable) reason = ExplainPending(ctx_, request_);
    failures_.push_back({job, reason, unresolvable});
    (unresolvable ? out->unresolvable : out->pending).push_back({job->id, std::move(reason)});
  }
}

PendingReason Scheduler::CheckResolvable(const Snapshot& snap, const JobRecord& job) {
  ws_.Reset(snap);
  ctx_.NewCycle();
  PendingReason why;
  if (!BuildRequest(snap, job, &why)) return why;
  return ExplainUnresolvable(ctx_, request_);
}

}  // namespace rota::sched
