#include "server/services.h"

#include "base/thread_name.h"

#include <algorithm>
#include <chrono>

namespace rota::server {

void ServiceManager::Start() {
  thread_ = NamedThread("rota-services", [this] {
    std::unique_lock<std::mutex> lock(stop_mu_);
    while (!stop_) {
      lock.unlock();
      Tick();
      lock.lock();
      stop_cv_.wait_for(lock, std::chrono::microseconds(tick_), [this] { return stop_; });
    }
  });
}

void ServiceManager::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServiceManager::Tick() {
  std::lock_guard<std::mutex> run(run_mu_);
  const Snapshot snap = controller_->snapshot();
  // The live facts (addresses, telemetry) of the nodes running services
  // only: copying every node's each tick cost a 12,500-node cluster more
  // than all its services did.
  std::vector<std::string> service_nodes;
  for (const JobRecord* job : snap.LiveServices()) {
    if (job->state != JobState::kRunning) continue;
    for (const ReplicaPlacement& r : job->placement) service_nodes.push_back(snap.node(r.node).spec.name);
  }
  const std::map<std::string, NodeLive> live =
      service_nodes.empty() ? std::map<std::string, NodeLive>{} : controller_->nodes_live(service_nodes);
  const TimePoint now = controller_->clock().Now();
  std::vector<RouterService> services;
  std::map<JobId, std::pair<double, int32_t>> gpu_memory;  // (used fraction, replicas read)
  for (const JobRecord* job : snap.LiveServices()) {
    const JobId id = job->id;
    RouterService rs{job->spec().name, id, job->spec().service.readiness, {}, job->spec().service.metrics_path, {}};
    for (const MetricTarget& m : job->spec().service.autoscale.metrics) rs.metrics.push_back(m.name);
    double used = 0, total = 0;
    int32_t read = 0;  // replicas with a reading
    if (job->state == JobState::kRunning) {
      for (const ReplicaPlacement& r : job->placement) {
        const NodeState& node = snap.node(r.node);
        auto l = live.find(node.spec.name);
        const std::string host = l != live.end() && !l->second.address.empty() ? l->second.address : node.spec.name;
        rs.backends.push_back({id, r.task, r.replica, job->ReplicaAttempt(r.replica), host,
                               job->spec().service.port + static_cast<int32_t>(r.replica)});
        if (l == live.end()) continue;
        bool any = false;
        for (const GpuTelemetry& g : l->second.gpus) {
          if (g.index >= 0 && g.index < 64 && ((r.gpu_mask >> g.index) & 1) && node.spec.gpu_memory > 0) {
            used += static_cast<double>(g.memory_used);
            total += static_cast<double>(node.spec.gpu_memory);
            any = true;
          }
        }
        read += any;
      }
    }
    if (total > 0) gpu_memory[id] = {used / total, read};
    services.push_back(std::move(rs));
  }
  std::map<std::string, RouterStats> stats;
  if (router_ != nullptr) {
    router_->Update(services);
    stats = router_->TakeStats();
    for (const RouterUnhealthy& u : router_->TakeUnhealthy()) {
      controller_->RestartReplica(u.job, u.task, u.replica, u.attempt, u.reason).IgnoreError();
    }
  }
  std::map<JobId, ServiceStatus> next;
  for (const RouterService& rs : services) {
    const JobRecord* job = snap.FindJob(rs.job);
    ServiceStatus& st = next[rs.job];
    if (auto it = stats.find(rs.name); it != stats.end()) st.signals = it->second;
    if (auto it = gpu_memory.find(rs.job); it != gpu_memory.end()) std::tie(st.gpu_memory, st.memory_replicas) = it->second;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto it = status_.find(rs.job); it != status_.end()) st.last = it->second.last;
    }
    if (job->state != JobState::kRunning) continue;
    if (Roll(*job, st, now)) continue;
    if (!job->spec().service.autoscale.enabled()) continue;
    Scaler& entry = scalers_[rs.job];
    if (entry.autoscaler == nullptr || !(entry.spec == job->spec().service)) {
      entry.spec = job->spec().service;
      entry.autoscaler = std::make_unique<sched::Autoscaler>(job->spec().service);
    }
    sched::Autoscaler* scaler = entry.autoscaler.get();
    scaler->Observe({now, st.signals.inflight_avg, st.gpu_memory, st.signals.metrics, st.memory_replicas});
    const int32_t current = job->DesiredReplicas();
    sched::AutoscaleDecision d = scaler->Decide(now, current, router_ != nullptr ? st.signals.ready : current);
    if (d.desired != current) {
      if (controller_->ScaleService(rs.job, d.desired, d.reason).ok()) st.last = d;
    } else if (st.last.desired == 0) {
      st.last = d;
    }
  }
  for (auto it = scalers_.begin(); it != scalers_.end();) {
    it = next.count(it->first) ? std::next(it) : scalers_.erase(it);
  }
  for (auto it = rollouts_.begin(); it != rollouts_.end();) {
    it = next.count(it->first) ? std::next(it) : rollouts_.erase(it);
  }
  std::lock_guard<std::mutex> lock(mu_);
  status_ = std::move(next);
}

bool ServiceManager::EndSurge(const JobRecord& job) {
  // (Where an apply raised min to the extra one, it stays: the autoscaler's again.)
  const int32_t back = std::max(job.spec().service.min_replicas, job.DesiredReplicas() - 1);
  if (job.last_scale_reason.rfind("rolling update: one replica over", 0) != 0 || back >= job.DesiredReplicas()) return false;
  controller_->ScaleService(job.id, back, "rolling update done").IgnoreError();
  return true;
}

bool ServiceManager::Roll(const JobRecord& job, ServiceStatus& st, TimePoint now) {
  const JobId id = job.id;
  size_t old = 0;
  const ReplicaPlacement* first_old = nullptr;
  for (const ReplicaPlacement& r : job.placement) {
    if (!job.OnOldSpec(r.replica)) continue;
    ++old;
    if (first_old == nullptr || r.replica < first_old->replica) first_old = &r;
  }
  auto it = rollouts_.find(id);
  // Every replica on the new spec and no update under way, yet the extra
  // one still asked for: its scale back was refused (a full disk), or the
  // server stopped before it.
  if (old == 0 && it == rollouts_.end()) return EndSurge(job);
  const std::string of = std::to_string(job.placement.size() - old) + " of " + std::to_string(job.placement.size()) +
                         " replicas on the new spec";
  if (it == rollouts_.end()) {
    Rollout r;
    // (A server restarted mid-update finds the extra replica's count as
    // desired: it starts from there, without another extra.)
    r.base = job.DesiredReplicas();
    if (job.last_scale_reason.rfind("rolling update: one replica over", 0) == 0) {
      r.base = std::max(job.spec().service.min_replicas, r.base - 1);
      r.surged = true;
      rollouts_[id] = r;
      st.rollout = "rolling update: resuming (" + of + ")";
      return true;
    }
    if (r.base < job.spec().service.max_replicas &&
        controller_->ScaleService(id, r.base + 1, "rolling update: one replica over while replicas are replaced").ok()) {
      r.surged = true;
    }
    rollouts_[id] = r;
    st.rollout = "rolling update: starting (" + of + ")";
    return true;
  }
  Rollout& r = it->second;
  if (r.draining) {
    // Restart it once its requests are answered (or after 30 s).
    bool idle = true;
    if (router_ != nullptr) {
      for (const RouterEndpoint& e : router_->Endpoints(job.spec().name)) {
        if (e.replica == r.replica && e.attempt == r.attempt && e.outstanding > 0) idle = false;
      }
    }
    if (idle || now - r.drain_since > 30 * kMicrosPerSecond) {
      controller_->RestartReplica(id, r.task, r.replica, r.attempt, "replaced by the rolling update").IgnoreError();
      r.draining = false;
    }
    st.rollout = "rolling update: replacing replica " + std::to_string(r.replica) + " (" + of + ")";
    return true;
  }
  if (old == 0) {
    EndSurge(job);
    rollouts_.erase(it);
    st.rollout = "";
    return true;
  }
  // The next one only once every placed replica is ready (and the extra one placed).
  const size_t want = static_cast<size_t>(r.surged ? r.base + 1 : r.base);
  const bool all_ready = router_ == nullptr || st.signals.ready >= static_cast<int32_t>(job.placement.size());
  if (job.placement.size() < std::min(want, static_cast<size_t>(job.spec().service.max_replicas)) || !all_ready) {
    if (r.waiting_since == 0) r.waiting_since = now;
    // No room for the extra replica within a minute: replace in place.
    if (r.surged && all_ready && now - r.waiting_since > 60 * kMicrosPerSecond &&
        controller_->ScaleService(id, r.base, "rolling update: no room for an extra replica; replacing in place").ok()) {
      r.surged = false;
    }
    st.rollout = "rolling update: waiting for every replica to be ready (" + of + ")";
    return true;
  }
  r.waiting_since = 0;
  r.task = first_old->task;
  r.replica = first_old->replica;
  r.attempt = job.ReplicaAttempt(first_old->replica);
  r.drain_since = now;
  r.draining = true;
  if (router_ != nullptr) router_->Drain(id, r.replica, r.attempt);
  st.rollout = "rolling update: draining replica " + std::to_string(r.replica) + " (" + of + ")";
  return true;
}

std::map<JobId, ServiceStatus> ServiceManager::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return status_;
}

}  // namespace rota::server
