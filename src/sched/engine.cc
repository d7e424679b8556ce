#include "sched/engine.h"

#include "sched/fgd.h"

#include <algorithm>
#include <bit>
#include <tuple>

namespace rota::sched {

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const ProfileConfig& config, const Registry& registry) {
  ROTA_ASSIGN_OR_RETURN(Profile profile, Profile::Create(config, registry));
  if (config.share_placement != "fgd" && config.share_placement != "bestfit") {
    return InvalidArgumentError("profile.share_placement: '" + config.share_placement + "' is not fgd or bestfit");
  }
  auto scheduler = std::unique_ptr<Scheduler>(new Scheduler(std::move(profile)));
  scheduler->fgd_ = config.share_placement == "fgd";
  return scheduler;
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
  request_.fractional = false;
  bool whole = false;
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskGroupSpec& t = spec.tasks[i];
    request_.fractional = request_.fractional || t.gpu_share.shared();
    if (t.gpu_share.shared() && !spec.topology.level.empty() && spec.topology.mode == TopologyMode::kRequired) {
      *why = {ReasonCode::kUnsupported,
              "topology: a required level for a job with GPU fractions or MIG slices is not scheduled yet; make it "
              "preferred or drop it"};
      return false;
    }
    whole = whole || t.gpus > 0;
    if (request_.fractional && whole) {
      *why = {ReasonCode::kUnsupported, "tasks[" + std::to_string(i) +
                                            "]: a job with GPU fractions or MIG slices may not also ask for whole GPUs "
                                            "(not scheduled yet)"};
      return false;
    }
    TaskRequest r;
    r.task = static_cast<uint16_t>(i);
    r.replicas = t.replicas;
    r.gpus = t.gpus;
    r.cpu = t.cpu;
    r.memory = t.memory;
    r.gpu_memory = t.gpu_memory;
    r.milli = t.gpu_share.fraction_milli;
    r.share_memory = t.gpu_share.memory;
    r.mig = t.gpu_share.mig_profile.empty() ? nullptr : &t.gpu_share.mig_profile;
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

uint64_t Scheduler::ShapeHash(const JobSpec& spec) const {
  // FNV-1a over the fields SameShape compares.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;
    h *= 1099511628211ULL;
  };
  auto num = [&h](int64_t v) {  // a word at a time (numbers are most of a shape)
    h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 1099511628211ULL;
  };
  mix(spec.topology.level);
  num(static_cast<int64_t>(spec.topology.mode));
  mix(spec.queue);
  num(spec.priority);
  num(spec.preemptible);
  num(spec.elastic_min_replicas);
  for (const auto& [k, v] : spec.node_selector) {
    mix(k);
    mix(v);
  }
  for (const TaskGroupSpec& t : spec.tasks) {
    num(t.replicas);
    num(t.gpus);
    num(t.cpu);
    num(t.memory);
    num(t.gpu_memory);
    mix(t.gpu_model);
  }
  return h;
}

void Scheduler::RecordFailure(const JobRecord* job, const PendingReason& reason, bool unresolvable, bool ends_first) {
  failure_index_.emplace(ShapeHash(job->spec), failures_.size());
  failures_.push_back({job, reason, unresolvable, ends_first, held_.size()});
}

bool Scheduler::SameShape(const JobRecord& a, const JobRecord& b) const {
  const JobSpec& x = a.spec;
  const JobSpec& y = b.spec;
  if (x.tasks.size() != y.tasks.size() || x.node_selector != y.node_selector ||
      x.topology.level != y.topology.level || x.topology.mode != y.topology.mode ||
      // What decides whether it may preempt, and whom:
      x.queue != y.queue || x.priority != y.priority || x.preemptible != y.preemptible ||
      x.elastic_min_replicas != y.elastic_min_replicas) {
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

void Scheduler::RunCycle(const Snapshot& snap, CycleResult* out) { Run(snap, nullptr, out); }

void Scheduler::RunCycle(const Snapshot& snap, TimePoint now, CycleResult* out) { Run(snap, &now, out); }

bool Scheduler::TryPlace(bool keep) {
  txn_.Begin();
  bool ok = profile_.placer().Place(ctx_, request_);
  for (const JobReadyPlugin* r : profile_.job_ready()) {
    ok = ok && r->Ready(request_, static_cast<int64_t>(txn_.steps().size()));
  }
  if (!ok || !keep) txn_.Rollback();
  return ok;
}

void Scheduler::HoldNomination(Nomination& n, bool hold) {
  for (auto& [pos, mask] : n.held) {
    if (hold) {
      mask &= ws_.free_mask(pos);  // what was used meanwhile is gone
      ws_.Take(pos, mask, 0, 0);
    } else {
      ws_.Give(pos, mask, 0, 0);
    }
  }
  n.released = !hold;
}

void Scheduler::ReleaseHeld() {
  for (const auto& [pos, mask] : held_) ws_.Give(pos, mask, 0, 0);
}

void Scheduler::RetakeHeld() {
  for (auto& [pos, mask] : held_) {
    mask &= ws_.free_mask(pos);  // a backfilled job may have taken some: it ends first
    ws_.Take(pos, mask, 0, 0);
  }
}

void Scheduler::SetReleased(const Topology& topo, const JobRecord& job, bool release) {
  auto it = resized_.find(job.id);
  const std::vector<ReplicaPlacement>& placement = it != resized_.end() ? it->second : job.placement;
  SetReplicasReleased(topo, job.spec, placement.data(), placement.size(), release);
}

void Scheduler::SetReplicasReleased(const Topology& topo, const JobSpec& spec, const ReplicaPlacement* first,
                                    size_t count, bool release) {
  for (const ReplicaPlacement* r = first; r != first + count; ++r) {
    if (r->shares_gpu()) continue;  // a shared or MIG GPU is not freed whole by one sharer ending
    const TaskGroupSpec& t = spec.tasks[r->task];
    const uint32_t pos = topo.position_of(r->node);
    const uint64_t mask = r->gpu_mask & ws_.node(pos).healthy_mask;  // a failed GPU stays out of use
    if (release) ws_.Give(pos, mask, t.cpu, t.memory);
    else ws_.Take(pos, mask, t.cpu, t.memory);
  }
}

bool Scheduler::HoldsReservedGpus(const JobRecord& job, const std::vector<Reservation>& reservations) {
  for (const Reservation& res : reservations) {
    for (const ReplicaPlacement& rp : res.replicas) {
      for (const ReplicaPlacement& mine : job.placement) {
        if (rp.node == mine.node && (rp.gpu_mask & mine.gpu_mask) != 0) return true;
      }
    }
  }
  return false;
}

QueueBook::ModelGpus Scheduler::TxnGpusByModel() const {
  QueueBook::ModelGpus add;  // GPUs per model, summed over the gang
  for (const Txn::Step& st : txn_.steps()) {
    const int16_t model = ws_.node(st.pos).model;
    if (model < 0 || st.mask == 0) continue;
    auto it = std::find_if(add.begin(), add.end(), [&](const auto& e) { return e.first == model; });
    if (it == add.end()) add.push_back({model, std::popcount(st.mask)});
    else it->second += std::popcount(st.mask);
  }
  return add;
}

bool Scheduler::QuotaAdmits(const JobRecord& job, int32_t leaf) {
  if (!book_.configured() || leaf < 0) return true;
  std::string why;
  return book_.Admits(leaf, TxnGpusByModel(), book_.MayBorrow(job.spec), &why);
}

void Scheduler::SetElasticReplicas(int32_t k) {
  TaskRequest& t = request_.tasks[0];
  t.replicas = k;
  request_.total_replicas = k;
  request_.total_gpus = static_cast<int64_t>(k) * t.gpus;
}

int32_t Scheduler::MostReplicasThatFit(const JobRecord& job, int32_t lo, int32_t hi) {
  const int32_t leaf = book_.configured() ? book_.LeafIndex(job.spec.queue) : -1;
  int32_t best = 0;
  // Placement and quota are both monotone in the count: binary search.
  while (lo <= hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    SetElasticReplicas(mid);
    const bool ok = TryPlace(true) && QuotaAdmits(job, leaf);
    txn_.Rollback();
    if (ok) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

bool Scheduler::PlaceSmaller(const JobRecord& job) {
  const int32_t best = MostReplicasThatFit(job, job.spec.elastic_min_replicas, request_.tasks[0].replicas - 1);
  if (best == 0) {
    SetElasticReplicas(job.spec.elastic_min_replicas);  // what it needs at least: reasons and preemption count that
    return false;
  }
  SetElasticReplicas(best);
  return TryPlace(true);
}

bool Scheduler::ShrinkElastic(const Snapshot& snap, const JobRecord& job, const TimePoint* now, CycleResult* out) {
  const Topology& topo = snap.topology();
  struct Candidate {
    const JobRecord* job;
    std::vector<ReplicaPlacement> placement;  // current, replicas in order
    size_t surplus;
  };
  std::vector<Candidate> candidates;
  for (const JobRecord* r : elastic_running_) {
    if (r->id == job.id || victim_set_.count(r->id) || r->spec.priority > job.spec.priority) {
      continue;
    }
    if (r->spec.priority == job.spec.priority &&
        (now == nullptr || *now - std::max(r->started_at, r->resized_at) < min_runtime_)) {
      continue;
    }
    // Across queues, only a queue borrowing beyond its guarantee gives up replicas.
    if (book_.configured() && r->spec.queue != job.spec.queue) {
      const int32_t leaf = book_.LeafIndex(r->spec.queue);
      if (leaf < 0 || !book_.Borrowing(leaf)) continue;
    }
    // GPUs a reservation counts on stay with their gang (as for preemption).
    if (HoldsReservedGpus(*r, out->reservations)) continue;
    auto it = resized_.find(r->id);
    std::vector<ReplicaPlacement> p = it != resized_.end() ? it->second : r->placement;
    const size_t min = static_cast<size_t>(r->spec.elastic_min_replicas);
    if (p.size() <= min) continue;
    std::sort(p.begin(), p.end(), [](const ReplicaPlacement& a, const ReplicaPlacement& b) { return a.replica < b.replica; });
    candidates.push_back({r, std::move(p), 0});
    candidates.back().surplus = candidates.back().placement.size() - min;
  }
  if (candidates.empty()) return false;
  // Lowest priority first, then the most surplus.
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tuple(a.job->spec.priority, -static_cast<int64_t>(a.surplus), a.job->id) <
           std::tuple(b.job->spec.priority, -static_cast<int64_t>(b.surplus), b.job->id);
  });
  // Its highest replicas go first.
  auto release = [&](const Candidate& c, size_t k, bool give) {
    SetReplicasReleased(topo, c.job->spec, c.placement.data() + c.placement.size() - k, k, give);
  };
  size_t last = candidates.size();
  for (size_t i = 0; i < candidates.size(); ++i) {
    release(candidates[i], candidates[i].surplus, true);
    if (TryPlace(false)) {
      last = i;
      break;
    }
  }
  if (last == candidates.size()) {
    for (const Candidate& c : candidates) release(c, c.surplus, false);
    return false;
  }
  // Candidates after `last` were never released: nothing to take back.
  // The last one gives up only as many replicas as needed.
  Candidate& c = candidates[last];
  release(c, c.surplus, false);
  size_t lo = 1, hi = c.surplus;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    release(c, mid, true);
    const bool fits = TryPlace(false);
    release(c, mid, false);
    if (fits) hi = mid;
    else lo = mid + 1;
  }
  c.surplus = lo;
  release(c, c.surplus, true);
  if (!TryPlace(true)) {  // cannot happen: the same placement fitted above
    for (size_t i = 0; i <= last; ++i) release(candidates[i], candidates[i].surplus, false);
    return false;
  }
  for (size_t i = 0; i <= last; ++i) {
    Candidate& v = candidates[i];
    v.placement.resize(v.placement.size() - v.surplus);
    out->resizes.push_back({v.job->id, v.placement,
                            "shrunk by " + std::to_string(v.surplus) + " replica(s) to " +
                                std::to_string(v.placement.size()) + " for job " + std::to_string(job.id.value()),
                            job.id});
    resized_[v.job->id] = v.placement;
  }
  return true;
}

void Scheduler::UndoShrinks(const Snapshot& snap, size_t mark, CycleResult* out) {
  const Topology& topo = snap.topology();
  while (out->resizes.size() > mark) {
    const Resize& r = out->resizes.back();
    const JobRecord* job = snap.FindJob(r.job);
    // Back to what it held before this shrink: the previous resize of it this cycle, or the snapshot's.
    std::vector<ReplicaPlacement> before = job->placement;
    for (size_t i = mark; i-- > 0;) {
      if (out->resizes[i].job == r.job) {
        before = out->resizes[i].replicas;
        break;
      }
    }
    std::vector<ReplicaPlacement> removed;
    for (const ReplicaPlacement& p : before) {
      if (std::find(r.replicas.begin(), r.replicas.end(), p) == r.replicas.end()) removed.push_back(p);
    }
    SetReplicasReleased(topo, job->spec, removed.data(), removed.size(), false);
    if (before == job->placement) resized_.erase(r.job);
    else resized_[r.job] = before;
    out->resizes.pop_back();
  }
}

void Scheduler::GrowElastic(const Snapshot& snap, const TimePoint* now, CycleResult* out) {
  const Topology& topo = snap.topology();
  std::vector<const JobRecord*> growing;
  for (const JobRecord* r : elastic_running_) {
    if (victim_set_.count(r->id) || resized_.count(r->id)) continue;
    if (static_cast<int64_t>(r->placement.size()) >= r->spec.TotalReplicas()) continue;
    // New replicas are placed on their own: they could not be kept in the running ones' domain.
    if (r->spec.topology.mode == TopologyMode::kRequired && !r->spec.topology.level.empty()) continue;
    if (now != nullptr && *now - std::max(r->started_at, r->resized_at) < min_runtime_) continue;
    growing.push_back(r);
  }
  std::sort(growing.begin(), growing.end(), [](const JobRecord* a, const JobRecord* b) {
    return std::tie(b->spec.priority, a->id) < std::tie(a->spec.priority, b->id);
  });
  for (const JobRecord* r : growing) {
    PendingReason why;
    if (!BuildRequest(snap, *r, &why)) continue;
    const int32_t leaf = book_.configured() ? book_.LeafIndex(r->spec.queue) : -1;
    const int32_t missing = request_.tasks[0].replicas - static_cast<int32_t>(r->placement.size());
    const int32_t best = MostReplicasThatFit(*r, 1, missing);
    if (best == 0) continue;
    SetElasticReplicas(best);
    if (!TryPlace(true)) continue;
    if (leaf >= 0) {
      book_.Charge(leaf, TxnGpusByModel());
      ChargeResources(leaf);
    }
    // The new replicas take the lowest replica indices the gang lacks.
    std::vector<bool> used(static_cast<size_t>(r->spec.tasks[0].replicas), false);
    for (const ReplicaPlacement& p : r->placement) used[p.replica] = true;
    std::vector<ReplicaPlacement> grown = r->placement;
    uint32_t next = 0;
    for (const Txn::Step& st : txn_.steps()) {
      while (used[next]) ++next;
      used[next] = true;
      grown.push_back({0, next, topo.node_at(st.pos), st.mask});
    }
    std::sort(grown.begin(), grown.end(), [](const ReplicaPlacement& a, const ReplicaPlacement& b) { return a.replica < b.replica; });
    out->resizes.push_back({r->id, grown,
                            "grew by " + std::to_string(best) + " replica(s) to " + std::to_string(grown.size()) +
                                " into free GPUs",
                            JobId()});
    resized_[r->id] = std::move(grown);
  }
}

bool Scheduler::EarliestStart(const Snapshot& snap, TimePoint now, TimePoint* start, std::vector<Txn::Step>* steps) {
  const Topology& topo = snap.topology();
  // GPUs promised to an earlier reservation this cycle stay out of reach
  // even when the job on them ends: no two reservations count on one GPU.
  auto release = [&](size_t from, size_t to, bool give) {
    for (size_t i = from; i < to; ++i) {
      const JobRecord& job = *endings_[i].job;
      if (promised_.empty()) {
        SetReleased(topo, job, give);
        continue;
      }
      auto resized = resized_.find(job.id);  // a job resized this cycle holds what it holds now
      for (ReplicaPlacement r : resized != resized_.end() ? resized->second : job.placement) {
        if (r.shares_gpu()) continue;
        auto it = promised_.find(topo.position_of(r.node));
        if (it != promised_.end()) r.gpu_mask &= ~it->second;
        SetReplicasReleased(topo, job.spec, &r, 1, give);
      }
    }
  };
  // The smallest prefix of endings whose release lets the job fit (binary
  // search: releasing more never makes a fit impossible in practice, and the
  // answer is checked by placing).
  size_t lo = 1, hi = endings_.size();
  release(0, hi, true);
  const bool fits_at_all = TryPlace(false);
  release(0, hi, false);
  if (endings_.empty() || !fits_at_all) return false;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    release(0, mid, true);
    const bool fits = TryPlace(false);
    release(0, mid, false);
    if (fits) hi = mid;
    else lo = mid + 1;
  }
  release(0, lo, true);
  const bool fits = TryPlace(true);
  if (fits) *steps = txn_.steps();
  txn_.Rollback();
  release(0, lo, false);
  if (!fits) return false;
  *start = std::max(now, endings_[lo - 1].end);
  return true;
}

void Scheduler::Run(const Snapshot& snap, const TimePoint* now, CycleResult* out) {
  out->Clear();
  out->revision = snap.revision();
  ws_.Reset(snap);
  ctx_.NewCycle();
  failures_.clear();
  failure_index_.clear();
  preemption_searches_ = 0;
  victims_.clear();
  victim_set_.clear();
  held_.clear();
  promised_.clear();
  first_reservation_ = 0;
  endings_.clear();
  if (now != nullptr && reservation_depth_ > 0) {
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->state != JobState::kRunning || job->spec.time_limit <= 0) continue;
      endings_.push_back({std::max(*now, job->started_at + job->spec.time_limit), job.get()});
    }
    std::sort(endings_.begin(), endings_.end(), [](const Ending& a, const Ending& b) {
      return std::tie(a.end, a.job->id) < std::tie(b.end, b.job->id);
    });
  }

  order_.clear();
  frac_.clear();
  mig_.clear();
  mig_demand_built_ = false;
  resized_.clear();
  snap_ = &snap;
  typical_built_ = false;
  making_room_for_.clear();
  running_.clear();
  elastic_running_.clear();
  for (const auto& [id, job] : snap.live_jobs()) {
    if (job->state == JobState::kPending) order_.push_back(job.get());
    if (job->state == JobState::kRunning) running_.push_back(job.get());
    if (job->state == JobState::kRunning && job->spec.elastic()) elastic_running_.push_back(job.get());
    if (job->state == JobState::kPreempting) making_room_for_.emplace(job->preempted_for, id);
  }
  std::stable_sort(order_.begin(), order_.end(), [this](const JobRecord* a, const JobRecord* b) {
    for (const JobOrderPlugin* o : profile_.job_orders()) {
      if (int c = o->Compare(*a, *b); c != 0) return c < 0;
    }
    return a->id < b->id;
  });

  // Nominations: GPUs freed for a preemptor stay out of the pool for jobs of
  // lower priority while gangs are still stopping for it (and a little after).
  nominations_.clear();
  if (now != nullptr) {
    const Topology& t = snap.topology();
    for (const JobRecord* j : order_) {
      if (j->nominated.empty() || (making_room_for_.count(j->id) == 0 && *now - j->nominated_at >= nomination_ttl_)) {
        continue;
      }
      Nomination n{j, {}, false};
      for (const ReplicaPlacement& p : j->nominated) {
        const uint32_t pos = t.position_of(p.node);
        const uint64_t mask = p.gpu_mask & ws_.free_mask(pos);
        if (mask == 0) continue;
        ws_.Take(pos, mask, 0, 0);
        n.held.push_back({pos, mask});
      }
      if (!n.held.empty()) nominations_.push_back(std::move(n));
    }
  }

  // With queues: bucket the ordered jobs by leaf queue for fair-share picking.
  const bool fair = book_.configured();
  size_t next_plain = 0;
  size_t no_queue_head = 0;
  if (fair) {
    book_.Reset(snap);
    by_queue_.assign(by_queue_.size(), {});
    no_queue_.clear();
    for (uint32_t i = 0; i < order_.size(); ++i) {
      const int32_t leaf = book_.LeafIndex(order_[i]->spec.queue);
      if (leaf < 0) {
        no_queue_.push_back(i);
        continue;
      }
      if (by_queue_.size() <= static_cast<size_t>(leaf)) by_queue_.resize(leaf + 1);
      by_queue_[leaf].push_back(i);
    }
    queue_head_.assign(by_queue_.size(), 0);
  }
  auto next = [&]() -> const JobRecord* {
    if (!fair) return next_plain < order_.size() ? order_[next_plain++] : nullptr;
    if (no_queue_head < no_queue_.size()) return order_[no_queue_[no_queue_head++]];
    return NextFair();
  };

  const Topology& topo = snap.topology();
  int32_t examined = 0;
  // Jobs are examined by priority: a nomination is let go for the first job
  // of its nominee's priority or higher (its nominee included). The nominee
  // examined last holds its GPUs again, for lower jobs, unless it was placed
  // or all of its victims have stopped (then holding would only idle them).
  Nomination* nominee = nullptr;
  auto settle_nominee = [&] {
    if (nominee == nullptr) return;
    const bool placed = !out->placed.empty() && out->placed.back().job == nominee->job->id;
    if (!placed && making_room_for_.count(nominee->job->id) > 0) HoldNomination(*nominee, true);
    nominee = nullptr;
  };
  while (const JobRecord* job = next()) {
    settle_nominee();
    if (max_jobs_ > 0 && examined++ >= max_jobs_) break;
    for (Nomination& n : nominations_) {
      if (!n.released && n.job->spec.priority <= job->spec.priority) HoldNomination(n, false);
      if (n.job == job) nominee = &n;
    }
    PendingReason why;
    if (!BuildRequest(snap, *job, &why)) {
      out->unresolvable.push_back({job->id, std::move(why)});
      continue;
    }
    // Backfill: a job that ends before the first reservation starts may use
    // the reserved GPUs; any other job must go around them.
    const bool ends_first = !held_.empty() && now != nullptr && job->spec.time_limit > 0 &&
                            *now + job->spec.time_limit <= first_reservation_;
    // A placement shape that already failed this cycle fails again (nothing
    // is freed within a cycle) - after its quota check, which is its own.
    const Failure* seen = nullptr;
    auto lookup = [&] {
      if (failures_.empty()) return;
      for (auto [it, end] = failure_index_.equal_range(ShapeHash(job->spec)); it != end && seen == nullptr; ++it) {
        const Failure& f = failures_[it->second];
        if (f.ends_first == ends_first && f.held == held_.size() && SameShape(*f.job, *job)) seen = &f;
      }
    };

    // GPU fractions and MIG slices: the sharing path (quotas count them as GPUs rounded up).
    if (request_.fractional) {
      PendingReason frac_why;
      bool never = false;
      const size_t first = out->replicas.size();
      const size_t first_reconf = out->reconfigurations.size();
      if (!PlaceFractional(topo, out, &frac_why, &never)) {
        (never ? out->unresolvable : out->pending).push_back({job->id, frac_why});
        continue;
      }
      if (fair) {
        // Admission: its shares count as whole GPUs (rounded up) of the model they landed on.
        const int32_t leaf = book_.LeafIndex(job->spec.queue);
        const int16_t model = ws_.node(topo.position_of(out->replicas[first].node)).model;
        const QueueBook::ModelGpus add = {{model, static_cast<int32_t>(job->spec.GpuEquivalent())}};
        if (leaf >= 0 && model >= 0 && RefuseOverQuota(*job, leaf, add, out)) {
          // Undo the placement: the Txn, the shares, reconfigurations and the output.
          RollbackShares(0);
          out->replicas.resize(first);
          out->reconfigurations.resize(first_reconf);
          out->placed.pop_back();
          continue;
        }
        if (leaf >= 0 && model >= 0) book_.Charge(leaf, add);
        if (leaf >= 0) ChargeResources(leaf);
      }
      continue;
    }

    // Quota first when the GPU model is known without placing (the job names
    // it, or the cluster has one): a job over its queue's limit waits for
    // quota, whatever capacity frees up.
    if (fair) {
      const int32_t leaf = book_.LeafIndex(job->spec.queue);
      int16_t model = snap.gpu_models().size() == 1 ? 0 : -1;
      for (const TaskRequest& t : request_.tasks) {
        if (t.gpus > 0 && t.model >= 0) model = t.model;
      }
      if (leaf >= 0 && model >= 0 && request_.total_gpus > 0 &&
          RefuseOverQuota(*job, leaf, {{model, request_.total_gpus}}, out)) {
        continue;
      }
    }

    lookup();
    if (seen != nullptr && making_room_for_.count(job->id) == 0 && nominee == nullptr) {
      (seen->unresolvable ? out->unresolvable : out->pending).push_back({job->id, seen->reason});
      continue;
    }
    if (ends_first) ReleaseHeld();
    bool ok = TryPlace(/*keep=*/true);
    // An elastic job starts smaller rather than not at all.
    if (!ok && job->spec.elastic()) ok = PlaceSmaller(*job);
    // Surplus replicas of elastic jobs of no higher priority give way first.
    const size_t shrink_mark = out->resizes.size();
    if (!ok && !elastic_running_.empty()) ok = ShrinkElastic(snap, *job, now, out);
    if (ok && fair) {
      // Admission: the placement must fit the queues' quotas too.
      const int32_t leaf = book_.LeafIndex(job->spec.queue);
      const QueueBook::ModelGpus add = TxnGpusByModel();
      if (leaf >= 0 && RefuseOverQuota(*job, leaf, add, out)) {
        // Undo first, so reserved GPUs it had taken go back to being held.
        txn_.Rollback();
        UndoShrinks(snap, shrink_mark, out);
        if (ends_first) RetakeHeld();
        continue;
      }
      if (leaf >= 0) {
        book_.Charge(leaf, add);
        ChargeResources(leaf);
      }
    }
    if (ends_first) RetakeHeld();
    if (ok) {
      out->placed.push_back({job->id, static_cast<uint32_t>(out->replicas.size()),
                             static_cast<uint32_t>(txn_.steps().size())});
      for (const Txn::Step& s : txn_.steps()) {
        out->replicas.push_back({s.task, s.replica, topo.node_at(s.pos), s.mask});
      }
      continue;
    }
    PendingReason reason = ExplainUnresolvable(ctx_, request_);
    const bool unresolvable = !reason.ok();
    if (!unresolvable) {
      reason = ExplainPending(ctx_, request_);
      // Held back only by a reservation?
      if (!held_.empty() && !ends_first) {
        ReleaseHeld();
        const bool would_fit = TryPlace(false);
        RetakeHeld();
        if (would_fit) {
          const Duration gap = first_reservation_ - *now;
          reason = {ReasonCode::kReserved,
                    "fits now only on GPUs reserved for a higher job that starts in " + FormatDuration(gap) +
                        "; a time_limit of at most " + FormatDuration(gap) + " would let it backfill"};
        }
      }
      // Held back only by GPUs nominated for a higher job that preempted for them?
      if (reason.code != ReasonCode::kReserved && nominee == nullptr) {
        std::string for_jobs;
        for (Nomination& n : nominations_) {
          if (n.released) continue;
          HoldNomination(n, false);
          n.released = false;  // only looked at
          for_jobs += (for_jobs.empty() ? "" : ", ") + std::to_string(n.job->id.value());
        }
        if (!for_jobs.empty()) {
          const bool would_fit = TryPlace(false);
          for (Nomination& n : nominations_) {
            if (!n.released) HoldNomination(n, true);
          }
          if (would_fit) {
            reason = {ReasonCode::kReserved, "fits now only on GPUs freed by preemption for higher-priority job(s) " +
                                                 for_jobs + ", held for them until they start"};
          }
        }
      }
      // Room already being made for it: wait for those gangs to stop.
      std::string making_room;
      for (auto [it, end] = making_room_for_.equal_range(job->id); it != end; ++it) {
        making_room += (making_room.empty() ? "" : ", ") + std::to_string(it->second.value());
      }
      if (!making_room.empty()) {
        out->pending.push_back({job->id, {ReasonCode::kPreempting, "waiting for preempted job(s) " + making_room +
                                                                       " to checkpoint and stop"}});
        continue;
      }
      // Preemption: evict cheaper preemptible gangs if that lets it fit now.
      if (now != nullptr && preemption_ && reason.code != ReasonCode::kReserved &&
          preemption_searches_++ < max_preemption_searches_) {
        std::vector<const JobRecord*> victims = ChooseVictims(snap, *job, *now, &out->reservations);
        if (!victims.empty()) {
          std::string names;
          for (const JobRecord* v : victims) {
            const std::string cause = job->spec.queue == v->spec.queue
                                        ? "preempted for job " + std::to_string(job->id.value()) + " (priority " +
                                              std::to_string(job->spec.priority) + " > " +
                                              std::to_string(v->spec.priority) + ")"
                                        : "preempted to return borrowed capacity to queue " + job->spec.queue +
                                              " (job " + std::to_string(job->id.value()) + ")";
            out->preemptions.push_back({v->id, job->id, cause, v->spec.checkpoint.signal, v->spec.checkpoint.grace});
            victims_.push_back(v->id);
            victim_set_.insert(v->id);
            names += (names.empty() ? "" : ", ") + std::to_string(v->id.value());
          }
          reason = {ReasonCode::kPreempting, "preempting job" + std::string(victims.size() > 1 ? "s " : " ") + names +
                                                 " to make room; it starts when they have checkpointed and stopped"};
          out->pending.push_back({job->id, std::move(reason)});
          continue;
        }
      }
      // A reservation for the first blocked jobs.
      TimePoint start = 0;
      std::vector<Txn::Step> steps;
      const bool found = now != nullptr && static_cast<int32_t>(out->reservations.size()) < reservation_depth_ &&
                         reason.code != ReasonCode::kReserved && EarliestStart(snap, *now, &start, &steps);
      if (found && reservation_window_ > 0 && start - *now > reservation_window_) {
        reason.expected_start = start;
        reason.message += "; earliest start in " + FormatDuration(start - *now) + ", beyond the reservation window (" +
                          FormatDuration(reservation_window_) + "): nothing is held for it";
      } else if (found) {
        Reservation r{job->id, start, {}};
        for (const Txn::Step& st : steps) {
          r.replicas.push_back({st.task, st.replica, topo.node_at(st.pos), st.mask});
          promised_[st.pos] |= st.mask;
          const uint64_t free_now = st.mask & ws_.free_mask(st.pos);
          if (free_now != 0) {
            ws_.Take(st.pos, free_now, 0, 0);
            held_.push_back({st.pos, free_now});
          }
        }
        first_reservation_ = out->reservations.empty() ? start : std::min(first_reservation_, start);
        out->reservations.push_back(std::move(r));
        reason.expected_start = start;
        reason.message += "; reserved: expected to start in " + FormatDuration(start - *now) +
                          ", when running jobs reach their time limits";
        // Its reason is its own: later jobs of the same shape get their own search.
        (unresolvable ? out->unresolvable : out->pending).push_back({job->id, std::move(reason)});
        continue;
      }
    }
    RecordFailure(job, reason, unresolvable, ends_first);
    (unresolvable ? out->unresolvable : out->pending).push_back({job->id, std::move(reason)});
  }
  settle_nominee();
  // What is left free goes to elastic jobs below their replicas.
  GrowElastic(snap, now, out);
}

std::vector<const JobRecord*> Scheduler::ChooseVictims(const Snapshot& snap, const JobRecord& job, TimePoint now,
                                                       const std::vector<Reservation>* reservations) {
  const Topology& topo = snap.topology();
  const bool queues = book_.configured();
  const int32_t my_leaf = queues ? book_.LeafIndex(job.spec.queue) : -1;
  // Reclaiming across queues needs the job's GPU model (to check its guarantee).
  int16_t model = snap.gpu_models().size() == 1 ? 0 : -1;
  for (const TaskRequest& t : request_.tasks) {
    if (t.gpus > 0 && t.model >= 0) model = t.model;
  }
  const bool may_reclaim = my_leaf >= 0 && model >= 0 &&
                           book_.WithinGuarantee(my_leaf, {{model, request_.total_gpus}});
  struct Candidate {
    int64_t cost;  // GPU-microseconds of work since it started (lost if it has not checkpointed)
    const JobRecord* job;
  };
  std::vector<Candidate> candidates;
  for (const JobRecord* r : running_) {
    const JobId id = r->id;
    if (!book_.MayBorrow(r->spec)) continue;
    if (now - r->started_at < min_runtime_) continue;
    const auto recent = std::count_if(r->preempted_at.begin(), r->preempted_at.end(),
                                      [&](TimePoint t) { return now - t < 3600 * kMicrosPerSecond; });
    if (recent >= max_per_hour_) continue;
    if (victim_set_.count(id) || resized_.count(id)) continue;
    // No eviction cycles: never evict a job this one was (recently) evicted for.
    if (std::find(job.preempted_by.begin(), job.preempted_by.end(), id) != job.preempted_by.end()) continue;
    // Evicting a gang whose GPUs a reservation counts on would only hand
    // them to a job that the reservation's owner should go before.
    if (HoldsReservedGpus(*r, *reservations)) continue;
    bool eligible = r->spec.queue == job.spec.queue && r->spec.priority < job.spec.priority;
    if (!eligible && may_reclaim && r->spec.queue != job.spec.queue) {
      const int32_t leaf = book_.LeafIndex(r->spec.queue);
      eligible = leaf >= 0 && book_.Borrowing(leaf);
    }
    if (!eligible) continue;
    // Lost work: its GPUs x the time since it last saved (its start, or its
    // last reported checkpoint in this run).
    const TimePoint saved = std::max(r->started_at, r->last_checkpoint_at);
    candidates.push_back({r->spec.GpuEquivalent() * std::max<Duration>(0, now - saved), r});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.cost, a.job->id) < std::tie(b.cost, b.job->id);
  });
  auto set = [&](const JobRecord& r, bool release) { SetReleased(topo, r, release); };
  // The shortest cheapest-first prefix of `list` whose eviction lets the job
  // fit: doubling, then binary search (a few placements, not one per victim).
  // Returns its length, 0 if none fits; leaves nothing released.
  size_t released = 0;
  const std::vector<Candidate>* list = &candidates;
  auto set_prefix = [&](size_t k) {
    for (; released < k; ++released) set(*(*list)[released].job, true);
    for (; released > k; --released) set(*(*list)[released - 1].job, false);
  };
  auto shortest_prefix = [&]() -> size_t {
    size_t hi = 1;
    bool fits = false;
    while (!list->empty()) {
      set_prefix(std::min(hi, list->size()));
      fits = TryPlace(false);
      if (fits || hi >= list->size()) break;
      hi *= 2;
    }
    if (!fits) {
      set_prefix(0);
      return 0;
    }
    size_t lo = hi / 2 + 1;
    hi = std::min(hi, list->size());
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      set_prefix(mid);
      if (TryPlace(false)) hi = mid;
      else lo = mid + 1;
    }
    set_prefix(0);
    return hi;
  };
  // Prefer victims in one domain (innermost level above the node: a rack)
  // over GPUs scattered across the cluster: try each domain's candidates
  // alone, cheapest total first; only if none suffices, all of them.
  std::vector<Candidate> local;
  if (!topo.domain_levels().empty() && candidates.size() > 1) {
    std::map<int32_t, std::vector<Candidate>> by_domain;
    for (const Candidate& c : candidates) {
      int32_t d = -1;
      for (const ReplicaPlacement& p : c.job->placement) {
        const int32_t pd = topo.DomainOf(topo.position_of(p.node), 0);
        d = d == -1 || d == pd ? pd : -2;  // -2: the gang itself spans domains
      }
      if (d >= 0) by_domain[d].push_back(c);
    }
    int64_t best_cost = INT64_MAX;
    int tried = 0;
    for (auto& [d, group] : by_domain) {
      if (group.size() == candidates.size() || ++tried > 8) break;  // one domain holds them all: same as global
      list = &group;
      const size_t k = shortest_prefix();
      if (k == 0) continue;
      int64_t cost = 0;
      for (size_t i = 0; i < k; ++i) cost += group[i].cost;
      if (cost < best_cost) {
        best_cost = cost;
        local.assign(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
  }
  size_t hi = 0;
  if (!local.empty()) {
    list = &local;
    hi = local.size();
  } else {
    list = &candidates;
    hi = shortest_prefix();
  }
  const bool fits = hi > 0;
  std::vector<const JobRecord*> victims;
  if (!fits) return victims;
  set_prefix(hi);
  // Keep only the victims whose GPUs the job's placement actually uses:
  // scattered GPUs elsewhere are not evicted for nothing.
  TryPlace(true);
  std::vector<std::pair<uint32_t, uint64_t>> used;
  for (const Txn::Step& st : txn_.steps()) used.push_back({st.pos, st.mask});
  txn_.Rollback();
  for (size_t i = 0; i < hi; ++i) {
    const JobRecord& v = *(*list)[i].job;
    bool overlaps = false;
    for (const ReplicaPlacement& p : v.placement) {
      const uint32_t pos = topo.position_of(p.node);
      for (const auto& [upos, umask] : used) overlaps = overlaps || (upos == pos && (umask & p.gpu_mask) != 0);
    }
    if (overlaps) victims.push_back(&v);
  }
  set_prefix(0);
  // Check the trimmed set; fall back to the whole prefix if it does not hold.
  for (const JobRecord* v : victims) set(*v, true);
  const bool trimmed_fits = TryPlace(false);
  for (const JobRecord* v : victims) set(*v, false);
  if (!trimmed_fits) {
    victims.clear();
    for (size_t i = 0; i < hi; ++i) victims.push_back((*list)[i].job);
  }
  return victims;
}

bool Scheduler::RefuseOverQuota(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add, CycleResult* out) {
  const bool may_borrow = book_.MayBorrow(job.spec);
  std::string why_not, never;
  if (book_.Admits(leaf, add, may_borrow, &why_not)) return false;
  const bool impossible = !book_.Admits(leaf, add, may_borrow, &never, /*empty=*/true);
  PendingReason quota{impossible ? ReasonCode::kExceedsQuota : ReasonCode::kQuota,
                      "needs " + std::to_string(request_.total_gpus) + " GPUs; " + (impossible ? never : why_not)};
  (impossible ? out->unresolvable : out->pending).push_back({job.id, std::move(quota)});
  return true;
}

const JobRecord* Scheduler::NextFair() {
  // Highest priority first; among equals, the queue with the lowest weighted
  // share; then the earlier job in the profile's order.
  int32_t best = -1;
  for (size_t q = 0; q < by_queue_.size(); ++q) {
    if (queue_head_[q] >= by_queue_[q].size()) continue;
    if (best < 0) {
      best = static_cast<int32_t>(q);
      continue;
    }
    const JobRecord* a = order_[by_queue_[q][queue_head_[q]]];
    const JobRecord* b = order_[by_queue_[best][queue_head_[best]]];
    if (a->spec.priority != b->spec.priority) {
      if (a->spec.priority > b->spec.priority) best = static_cast<int32_t>(q);
      continue;
    }
    const double sa = book_.Share(static_cast<int32_t>(q));
    const double sb = book_.Share(best);
    if (sa != sb) {
      if (sa < sb) best = static_cast<int32_t>(q);
      continue;
    }
    if (by_queue_[q][queue_head_[q]] < by_queue_[best][queue_head_[best]]) best = static_cast<int32_t>(q);
  }
  if (best < 0) return nullptr;
  return order_[by_queue_[best][queue_head_[best]++]];
}

void Scheduler::ChargeResources(int32_t leaf) {
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  for (const TaskRequest& t : request_.tasks) {
    cpu += t.cpu * t.replicas;
    memory += t.memory * t.replicas;
  }
  book_.ChargeResources(leaf, cpu, memory);
}

bool Scheduler::ShareCouldFit(const TaskRequest& task, uint32_t pos) const {
  const NodeState& n = ws_.node(pos);
  if (task.mig != nullptr) {
    if (n.mig_mask == 0 || n.mig_geometry->ProfileIndex(*task.mig) < 0) return false;
    if (task.model >= 0 && n.model != task.model) return false;
  }
  if (task.milli > 0) {
    if (n.spec.gpus == 0) return false;
    if (task.model >= 0 && n.model != task.model) return false;
    if (task.gpu_memory > 0 && n.spec.gpu_memory < task.gpu_memory) return false;
    if (task.share_memory > 0 && n.spec.gpu_memory > 0 && n.spec.gpu_memory < task.share_memory) return false;
  }
  TaskRequest cpu_part = task;  // the filters see the replica's CPU and memory, no whole GPUs
  cpu_part.gpus = 0;
  cpu_part.model = -1;
  for (const FilterPlugin* f : profile_.filters()) {
    if (f->Filter(request_, cpu_part, ws_.View(pos)).fit == FilterResult::kNever) return false;
  }
  return n.spec.cpu >= task.cpu && n.spec.memory >= task.memory;
}

Scheduler::MigView Scheduler::MigState(uint32_t pos, int32_t gpu) const {
  if (auto it = mig_.find(static_cast<uint64_t>(pos) << 6 | static_cast<uint64_t>(gpu)); it != mig_.end()) {
    return {&it->second.layout, it->second.used};
  }
  const NodeState& n = ws_.node(pos);
  return {&n.mig_layout[gpu], n.mig_used[gpu]};
}

bool Scheduler::FindMigInstance(const TaskRequest& task, uint32_t pos, int32_t* gpu, int32_t* start,
                                int32_t* fullness) const {
  const NodeState& n = ws_.node(pos);
  const int32_t profile = n.mig_geometry->ProfileIndex(*task.mig);
  bool found = false;
  for (uint64_t m = n.mig_mask & n.healthy_mask; m != 0; m &= m - 1) {
    const int32_t g = std::countr_zero(m);
    const MigView use = MigState(pos, g);
    int32_t used_slots = 0;
    for (const MigInstance& i : *use.layout) {
      if ((use.used >> i.start) & 1) used_slots += std::popcount(MigSlotMask(*n.mig_geometry, i));
    }
    for (const MigInstance& i : *use.layout) {
      if (i.profile != profile || ((use.used >> i.start) & 1) != 0) continue;
      // Best fit: the GPU with the most of its slots in use.
      if (!found || used_slots > *fullness) {
        found = true;
        *fullness = used_slots;
        *gpu = g;
        *start = i.start;
      }
      break;
    }
  }
  return found;
}

bool Scheduler::PlanMigLayout(const TaskRequest& task, uint32_t pos, int32_t* gpu, MigLayout* layout) {
  const NodeState& n = ws_.node(pos);
  if (n.spec.mig_fixed) return false;  // the driver's layouts, used as they are
  const MigGeometry& geo = *n.mig_geometry;
  const int32_t profile = geo.ProfileIndex(*task.mig);
  if (!mig_demand_built_) {
    mig_demand_built_ = true;
    mig_demand_.clear();
    for (const JobRecord* j : order_) {
      for (const TaskGroupSpec& t : j->spec.tasks) {
        for (int32_t r = 0; r < t.replicas && !t.gpu_share.mig_profile.empty() && mig_demand_.size() < 64; ++r) {
          mig_demand_.push_back(&t.gpu_share.mig_profile);
        }
      }
      if (mig_demand_.size() >= 64) break;
    }
  }
  // An idle MIG GPU, preferring one whose instances no pending job wants.
  int32_t best = -1, best_wanted = INT32_MAX;
  for (uint64_t m = n.mig_mask & n.healthy_mask; m != 0; m &= m - 1) {
    const int32_t g = std::countr_zero(m);
    const MigView use = MigState(pos, g);
    if (use.used != 0) continue;
    int32_t wanted = 0;
    for (const MigInstance& i : *use.layout) {
      for (const std::string* d : mig_demand_) wanted += *d == geo.profiles[i.profile].name;
    }
    if (wanted < best_wanted) {
      best_wanted = wanted;
      best = g;
    }
  }
  if (best < 0) return false;
  // The request first, then the cycle's other pending demand, then the
  // largest profiles that still fit: no slot is left unpartitioned.
  layout->clear();
  uint8_t occupied = 0;
  auto add = [&](int32_t p) {
    const int32_t s = MigFirstFreeStart(geo, p, occupied);
    if (s < 0) return;
    layout->push_back({static_cast<int8_t>(p), static_cast<int8_t>(s)});
    occupied |= MigSlotMask(geo, layout->back());
  };
  add(profile);
  for (const std::string* d : mig_demand_) {
    if (const int32_t p = geo.ProfileIndex(*d); p >= 0) add(p);
  }
  for (int32_t p = static_cast<int32_t>(geo.profiles.size()) - 1; p >= 0; --p) {
    while (MigFirstFreeStart(geo, p, occupied) >= 0) add(p);
  }
  std::sort(layout->begin(), layout->end(), [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  *gpu = best;
  return true;
}

void Scheduler::RollbackShares(size_t mark) {
  txn_.Rollback();
  while (share_undo_.size() > mark) {
    ShareUndo& u = share_undo_.back();
    if (u.mig) {
      if (u.existed) mig_[u.key] = std::move(u.mig_use);
      else mig_.erase(u.key);
    } else {
      if (u.existed) frac_[u.key] = u.frac;
      else frac_.erase(u.key);
    }
    share_undo_.pop_back();
  }
}

void Scheduler::BuildTypicalMix() {
  typical_built_ = true;
  typical_.clear();
  // The live jobs' task shapes, weighted by replicas: what FGD expects to
  // have to place next. The 32 most common.
  std::map<std::tuple<int64_t, int32_t, int32_t, int16_t>, int64_t> weight;
  for (const auto& [id, j] : snap_->live_jobs()) {
    for (const TaskGroupSpec& t : j->spec.tasks) {
      if (!t.gpu_share.mig_profile.empty()) continue;  // MIG instances live on MIG GPUs
      const int32_t milli = t.gpu_share.fraction_milli > 0 ? t.gpu_share.fraction_milli : (t.gpus > 0 ? 1000 : 0);
      const int32_t num = t.gpu_share.fraction_milli > 0 ? 1 : t.gpus;
      const int16_t model = t.gpu_model.empty() ? -1 : snap_->ModelIndex(t.gpu_model);
      weight[{t.cpu, milli, num, model}] += t.replicas;
    }
  }
  std::vector<std::pair<int64_t, std::tuple<int64_t, int32_t, int32_t, int16_t>>> shapes;
  for (const auto& [shape, w] : weight) shapes.push_back({w, shape});
  std::stable_sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (shapes.size() > 32) shapes.resize(32);
  int64_t kept = 0;
  for (const auto& s : shapes) kept += s.first;
  for (const auto& [w, shape] : shapes) {
    const auto& [cpu, milli, num, model] = shape;
    TypicalTask t{cpu, milli, num, std::vector<bool>(snap_->gpu_models().size(), model < 0),
                  static_cast<double>(w) / static_cast<double>(kept)};
    if (model >= 0) t.access[model] = true;
    typical_.push_back(std::move(t));
  }
}

bool Scheduler::PlaceFractional(const Topology& topo, CycleResult* out, PendingReason* why, bool* never) {
  txn_.Begin();
  share_undo_.clear();
  const size_t first = out->replicas.size();
  const size_t first_reconf = out->reconfigurations.size();
  auto rollback = [&] {
    RollbackShares(0);
    out->replicas.resize(first);
    out->reconfigurations.resize(first_reconf);
  };
  bool any_node = false;  // some node could hold a replica if the cluster were empty
  for (const TaskRequest& task : request_.tasks) {
    TaskRequest cpu_part = task;  // the filters see the replica's CPU and memory, no whole GPUs
    cpu_part.gpus = 0;
    cpu_part.model = -1;
    for (int32_t rep = 0; rep < task.replicas; ++rep) {
      uint32_t best_pos = UINT32_MAX;
      int32_t best_gpu = -1, best_left = INT32_MAX;
      int32_t mig_start = -1, mig_full = -1;
      double best_delta = 0;
      for (uint32_t pos = 0; pos < ws_.size(); ++pos) {
        const NodeState& n = ws_.node(pos);
        if (!ShareCouldFit(task, pos)) continue;
        any_node = true;
        if (!ws_.schedulable(pos) || !ctx_.Fits(request_, cpu_part, pos)) continue;
        if (task.mig != nullptr) {
          int32_t g = -1, start = -1, full = -1;
          if (FindMigInstance(task, pos, &g, &start, &full) && full > mig_full) {
            mig_full = full;
            best_pos = pos;
            best_gpu = g;
            mig_start = start;
          }
          continue;
        }
        if (task.milli == 0) {  // a CPU-only task of the gang: the first node that fits
          best_pos = pos;
          break;
        }
        const uint64_t free = ws_.free_mask(pos);
        // Each GPU's shares in use, or -1 when it takes no share (held whole,
        // MIG, unhealthy).
        int32_t used[kMaxGpusPerNode];
        MemoryMiB used_memory[kMaxGpusPerNode];
        bool any = false;
        for (int32_t g = 0; g < n.spec.gpus; ++g) {
          const uint64_t bit = uint64_t{1} << g;
          used[g] = -1;
          used_memory[g] = 0;
          if ((n.healthy_mask & bit) == 0) continue;
          const uint64_t key = static_cast<uint64_t>(pos) << 6 | static_cast<uint64_t>(g);
          if (auto it = frac_.find(key); it != frac_.end()) {
            used[g] = it->second.milli;
            used_memory[g] = it->second.memory;
          } else if ((n.shared_mask & bit) != 0 && (n.allocated_mask & bit) == 0) {
            used[g] = n.milli_used(g);
            used_memory[g] = n.memory_shared(g);
          } else if ((free & bit) != 0) {
            used[g] = 0;
          }
          any = any || (used[g] >= 0 && used[g] + task.milli <= 1000);
        }
        if (!any) continue;
        // FGD: the GPU whose share least grows the node's fragmentation for
        // the cycle's typical task mix; best fit breaks ties.
        double frag_before = 0;
        int32_t left_now[kMaxGpusPerNode];
        if (fgd_) {
          if (!typical_built_) BuildTypicalMix();
          for (int32_t g = 0; g < n.spec.gpus; ++g) left_now[g] = used[g] < 0 ? 0 : 1000 - used[g];
          frag_before = NodeFragmentation(typical_, ws_.View(pos).free_cpu, left_now, n.spec.gpus, n.model);
        }
        for (int32_t g = 0; g < n.spec.gpus; ++g) {
          if (used[g] < 0 || used[g] + task.milli > 1000) continue;
          if (n.spec.gpu_memory > 0 && used_memory[g] + task.share_memory > n.spec.gpu_memory) continue;
          const int32_t left = 1000 - used[g] - task.milli;
          double delta = 0;
          if (fgd_) {
            left_now[g] -= task.milli;
            delta = NodeFragmentation(typical_, ws_.View(pos).free_cpu - task.cpu, left_now, n.spec.gpus, n.model) -
                    frag_before;
            left_now[g] += task.milli;
          }
          if (best_pos == UINT32_MAX || delta < best_delta || (delta == best_delta && left < best_left)) {
            best_delta = delta;
            best_left = left;
            best_pos = pos;
            best_gpu = g;
          }
        }
      }
      // No free instance of the profile anywhere: re-partition an idle MIG GPU.
      if (task.mig != nullptr && best_pos == UINT32_MAX) {
        for (uint32_t pos = 0; pos < ws_.size() && best_pos == UINT32_MAX; ++pos) {
          if (!ShareCouldFit(task, pos) || !ws_.schedulable(pos) || !ctx_.Fits(request_, cpu_part, pos)) continue;
          int32_t g = -1;
          MigLayout layout;
          if (!PlanMigLayout(task, pos, &g, &layout)) continue;
          const NodeState& n = ws_.node(pos);
          const uint64_t key = static_cast<uint64_t>(pos) << 6 | static_cast<uint64_t>(g);
          const MigView before = MigState(pos, g);
          auto it = mig_.find(key);
          share_undo_.push_back({true, key, {}, it != mig_.end() ? it->second : MigUse{}, it != mig_.end()});
          out->reconfigurations.push_back({topo.node_at(pos), g, FormatMigLayout(*n.mig_geometry, layout),
                                           FormatMigLayout(*n.mig_geometry, *before.layout)});
          mig_[key] = {std::move(layout), 0};
          int32_t full = -1;
          FindMigInstance(task, pos, &best_gpu, &mig_start, &full);
          best_pos = pos;
        }
      }
      if (best_pos == UINT32_MAX) {
        rollback();
        const std::string share = task.mig != nullptr ? "a MIG " + *task.mig + " instance"
                                  : task.milli > 0    ? FormatMilliCpu(task.milli) + " of a GPU"
                                                      : "CPU only";
        if (!any_node) {
          *never = true;
          *why = {ReasonCode::kNoMatchingNodes,
                  "needs " + share + (task.share_memory > 0 ? " with " + FormatMemoryMiB(task.share_memory) : "") +
                      " per replica; " +
                      (task.mig != nullptr ? "no node has a MIG-mode GPU offering that profile"
                                           : "no node has a matching GPU")};
        } else {
          *why = {ReasonCode::kInsufficientGpus,
                  "needs " + std::to_string(task.replicas) + " replicas x " + share +
                      (task.share_memory > 0 ? " (" + FormatMemoryMiB(task.share_memory) + ")" : "") + "; " +
                      std::to_string(rep) +
                      (task.mig != nullptr ? " fit now (free instances of the profile, or idle MIG GPUs to re-partition)"
                                           : " fit now on shared or free GPUs")};
        }
        return false;
      }
      const NodeState& n = ws_.node(best_pos);
      uint64_t mask = 0;
      const uint64_t key = static_cast<uint64_t>(best_pos) << 6 | static_cast<uint64_t>(best_gpu);
      if (task.mig != nullptr) {
        auto it = mig_.find(key);
        share_undo_.push_back({true, key, {}, it != mig_.end() ? it->second : MigUse{}, it != mig_.end()});
        const MigView now = MigState(best_pos, best_gpu);
        MigUse use{*now.layout, static_cast<uint8_t>(now.used | (1u << mig_start))};
        mig_[key] = std::move(use);
        mask = uint64_t{1} << best_gpu;
        txn_.Place({task.task, static_cast<uint32_t>(rep), best_pos, 0, task.cpu, task.memory});
      } else if (task.milli > 0) {
        const uint64_t bit = uint64_t{1} << best_gpu;
        auto it = frac_.find(key);
        share_undo_.push_back({false, key, it != frac_.end() ? it->second : FracUse{}, {}, it != frac_.end()});
        FracUse use = it != frac_.end() ? it->second : FracUse{n.milli_used(best_gpu), n.memory_shared(best_gpu)};
        use.milli += task.milli;
        use.memory += task.share_memory;
        frac_[key] = use;
        mask = bit;
        // A free GPU that takes its first share leaves the whole-GPU pool.
        txn_.Place({task.task, static_cast<uint32_t>(rep), best_pos, (ws_.free_mask(best_pos) & bit), task.cpu, task.memory});
      } else {
        txn_.Place({task.task, static_cast<uint32_t>(rep), best_pos, 0, task.cpu, task.memory});
      }
      out->replicas.push_back(
          {task.task, static_cast<uint32_t>(rep), topo.node_at(best_pos), mask, task.milli, task.mig ? mig_start : -1});
    }
  }
  out->placed.push_back({request_.job->id, static_cast<uint32_t>(first), static_cast<uint32_t>(out->replicas.size() - first)});
  return true;
}

PendingReason Scheduler::CheckResolvable(const Snapshot& snap, const JobRecord& job) {
  ws_.Reset(snap);
  ctx_.NewCycle();
  PendingReason why;
  if (!BuildRequest(snap, job, &why)) return why;
  if (request_.fractional) {
    // Some node must have a GPU of the model and memory the share asks for.
    for (const TaskRequest& t : request_.tasks) {
      bool any = false;
      for (uint32_t pos = 0; pos < ws_.size() && !any; ++pos) any = ShareCouldFit(t, pos);
      if (!any) {
        return {ReasonCode::kNoMatchingNodes,
                "tasks[" + std::to_string(t.task) + "]: needs " +
                    (t.mig != nullptr ? "a MIG " + *t.mig + " instance"
                     : t.milli > 0    ? FormatMilliCpu(t.milli) + " of a GPU" +
                                         (t.share_memory > 0 ? " with " + FormatMemoryMiB(t.share_memory) : "")
                                      : std::string("its CPU and memory")) +
                    (t.mig != nullptr ? "; no node has a MIG-mode GPU offering that profile (and the selector, CPU and memory)"
                                      : "; no node matches (GPU model and memory, selector, CPU and memory)")};
      }
    }
    return {};
  }
  return ExplainUnresolvable(ctx_, request_);
}

}  // namespace rota::sched
