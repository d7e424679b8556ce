// Elastic jobs (min_replicas below their replicas) grow and shrink.
//   shrink-elastic (make-room): a job that does not fit takes surplus
//     replicas (above their min) of running elastic jobs: of lower priority
//     at once, of equal priority only once they have run min_runtime since
//     they started or last resized (never without a clock); across queues
//     only from a queue borrowing beyond its guarantee, for a job within its
//     own queue's (QueueBook::MayReclaim, as preempt); never GPUs a
//     reservation counts on. Lowest priority and most surplus first, and the
//     last one gives up only as many replicas as needed.
//   grow-elastic (cycle): what is left free at the end of a cycle goes to
//     running elastic jobs below their replicas, highest priority first,
//     each at most once per min_runtime (a resize restarts the gang).
// An elastic job that does not fit whole starts smaller: allocate's own
// rule, not an action.
#include "sched/actions/action.h"
#include "sched/actions/preempt.h"
#include "sched/plugins/builtin.h"
#include "sched/session.h"
#include "sched/share_place.h"

#include <algorithm>
#include <tuple>

namespace rota::sched {
namespace {

struct Surplus {
  const JobRecord* job;
  std::vector<ReplicaPlacement> placement;  // current, replicas in order
  size_t surplus;                           // replicas above its minimum
};

// When an elastic gang has run its minimum run time since it started or
// was last resized: before, it is neither shrunk for a job of its priority
// nor grown.
TimePoint Settled(const Session& s, const JobRecord& r) {
  return std::max(r.started_at, r.resized_at) + s.options().min_runtime;
}

// The running elastic gangs that may give up replicas for `job`: lowest
// priority first, then the most surplus.
std::vector<Surplus> ShrinkCandidates(Session& s, const JobRecord& job) {
  const TimePoint* now = s.now_or_null();
  const QueueBook& book = s.book();
  std::vector<Surplus> candidates;
  for (const JobRecord* r : s.elastic_running()) {
    // (A service on fractions or MIG slices frees no whole GPU by shrinking.)
    if (r->id == job.id || s.is_victim(r->id) || r->spec().priority > job.spec().priority ||
        r->spec().tasks[0].gpu_share.shared()) {
      continue;
    }
    // One of its priority only past its minimum run time (from its last resize).
    const bool same = r->spec().priority == job.spec().priority;
    if (same && now == nullptr) continue;
    const TimePoint settled = Settled(s, *r);
    const bool young = same && *now < settled;
    // Across queues, as the preempt action reclaims: from a queue borrowing
    // beyond its guarantee, for a job its own queue's guarantee holds (before,
    // a queue already at its guarantee shrank another's gang to borrow
    // itself). A job of no known model: the borrowing alone.
    if (s.fair() && r->spec().queue != job.spec().queue) {
      const int32_t leaf = book.LeafIndex(r->spec().queue);
      if (leaf < 0 || !book.Borrowing(leaf)) continue;
      const int16_t model = s.RequestModel();
      const int32_t mine = s.Leaf(job);
      if (model >= 0 && mine >= 0 && !book.MayReclaim(mine, leaf, {{model, s.request().total_gpus}})) continue;
    }
    // GPUs a reservation counts on stay with their gang (as for preemption).
    if (s.HoldsReservedGpus(*r)) continue;
    if (young) {  // held back by its minimum run time alone: when it ends, a cycle may decide otherwise
      s.WakeAt(settled);
      continue;
    }
    const std::vector<ReplicaPlacement>* resized = s.resized(r->id);
    std::vector<ReplicaPlacement> p = resized != nullptr ? *resized : r->placement;
    const size_t min = static_cast<size_t>(r->spec().elastic_min_replicas);
    if (p.size() <= min) continue;
    std::sort(p.begin(), p.end(), [](const ReplicaPlacement& a, const ReplicaPlacement& b) { return a.replica < b.replica; });
    candidates.push_back({r, std::move(p), 0});
    candidates.back().surplus = candidates.back().placement.size() - min;
  }
  std::sort(candidates.begin(), candidates.end(), [](const Surplus& a, const Surplus& b) {
    return std::tuple(a.job->spec().priority, -static_cast<int64_t>(a.surplus), a.job->id) <
           std::tuple(b.job->spec().priority, -static_cast<int64_t>(b.surplus), b.job->id);
  });
  return candidates;
}

// Frees (or takes back) the highest k replicas of a candidate.
void Release(Session& s, const Surplus& c, size_t k, bool give) {
  s.SetReplicasReleased(c.job->spec(), c.placement.data() + c.placement.size() - k, k, give);
}

// Frees surplus replicas until the current request fits, and places it
// (kept in the Txn); records the shrinks in out().resizes. False (nothing
// changed) if that is not enough.
bool ShrinkElastic(Session& s, const JobRecord& job) {
  std::vector<Surplus> candidates = ShrinkCandidates(s, job);
  if (candidates.empty()) return false;
  size_t last = candidates.size();
  for (size_t i = 0; i < candidates.size(); ++i) {
    Release(s, candidates[i], candidates[i].surplus, true);
    if (s.TryPlace(false)) {
      last = i;
      break;
    }
  }
  if (last == candidates.size()) {
    for (const Surplus& c : candidates) Release(s, c, c.surplus, false);
    return false;
  }
  // Candidates after `last` were never released: nothing to take back.
  // The last one gives up only as many replicas as needed.
  Surplus& c = candidates[last];
  Release(s, c, c.surplus, false);
  size_t lo = 1, hi = c.surplus;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    Release(s, c, mid, true);
    const bool fits = s.TryPlace(false);
    Release(s, c, mid, false);
    if (fits) hi = mid;
    else lo = mid + 1;
  }
  c.surplus = lo;
  Release(s, c, c.surplus, true);
  if (!s.TryPlace(true)) {  // cannot happen: the same placement fitted above
    for (size_t i = 0; i <= last; ++i) Release(s, candidates[i], candidates[i].surplus, false);
    return false;
  }
  for (size_t i = 0; i <= last; ++i) {
    Surplus& v = candidates[i];
    v.placement.resize(v.placement.size() - v.surplus);
    s.out().resizes.push_back({v.job->id, v.placement,
                               "shrunk by " + std::to_string(v.surplus) + " replica(s) to " +
                                   std::to_string(v.placement.size()) + " for job " + s.JobName(job),
                               job.id});
    s.SetResized(v.job->id, v.placement);
  }
  return true;
}

class ShrinkElasticAction final : public MakeRoomAction {
 public:
  std::string_view name() const override { return "shrink-elastic"; }
  bool MakeRoom(Session& s, const JobRecord& job) const override {
    return !s.elastic_running().empty() && ShrinkElastic(s, job);
  }
};

class GrowElastic final : public CycleAction {
 public:
  std::string_view name() const override { return "grow-elastic"; }
  void Execute(Session& s) const override;
};

// A service above what its autoscaler wants gives up its highest replicas.
void ScaleDown(Session& s, const JobRecord& r, size_t desired) {
  std::vector<ReplicaPlacement> p = r.placement;
  std::sort(p.begin(), p.end(), [](const ReplicaPlacement& a, const ReplicaPlacement& b) { return a.replica < b.replica; });
  const size_t k = p.size() - desired;
  s.SetReplicasReleased(r.spec(), p.data() + desired, k, true);
  p.resize(desired);
  s.out().resizes.push_back({r.id, p,
                             "scaled down by " + std::to_string(k) + " replica(s) to " + std::to_string(desired) +
                                 ": " + r.last_scale_reason,
                             JobId()});
  s.SetResized(r.id, std::move(p));
}

// Gives a running service's nominated GPUs (freed by gangs its scale-up
// evicted) back to the pool.
void ReleaseNomination(Session& s, const JobRecord& service) {
  for (Session::Nomination& n : s.nominations()) {
    if (n.job == &service && !n.released) s.HoldNomination(n, false);
  }
}

// Records that `r` grew by `more` replicas to `grown`.
void Resized(Session& s, const JobRecord& r, std::vector<ReplicaPlacement> grown, size_t more) {
  std::sort(grown.begin(), grown.end(), [](const ReplicaPlacement& a, const ReplicaPlacement& b) { return a.replica < b.replica; });
  s.out().resizes.push_back({r.id, grown,
                             r.spec().is_service()
                                 ? "scaled up by " + std::to_string(more) + " replica(s) to " + std::to_string(grown.size()) +
                                       ": " + r.last_scale_reason
                                 : "grew by " + std::to_string(more) + " replica(s) to " + std::to_string(grown.size()) +
                                       " into free GPUs",
                             JobId()});
  s.SetResized(r.id, std::move(grown));
}

void GrowElastic::Execute(Session& s) const {
  const Topology& topo = s.topology();
  const TimePoint* now = s.now_or_null();
  std::vector<const JobRecord*> growing;
  for (const JobRecord* r : s.elastic_running()) {
    if (s.is_victim(r->id) || s.resized(r->id) != nullptr) continue;
    if (r->spec().is_service()) {
      // A service goes to what its autoscaler wants, in this pass: a resize
      // keeps its running replicas, so no min_runtime wait.
      const size_t desired = static_cast<size_t>(r->DesiredReplicas());
      if (r->placement.size() >= desired) ReleaseNomination(s, *r);  // no longer wanted: free for anyone
      if (r->placement.size() > desired) {
        ScaleDown(s, *r, desired);
        continue;
      }
      if (r->placement.size() == desired) continue;
    } else {
      if (static_cast<int64_t>(r->placement.size()) >= r->spec().TotalReplicas()) continue;
      if (now != nullptr && *now < Settled(s, *r)) {
        s.WakeAt(Settled(s, *r));  // then it may grow
        continue;
      }
    }
    // New replicas are placed on their own: they could not be kept in the running ones' domain.
    if (r->spec().topology.mode == TopologyMode::kRequired && !r->spec().topology.level.empty()) continue;
    growing.push_back(r);
  }
  std::sort(growing.begin(), growing.end(), [](const JobRecord* a, const JobRecord* b) {
    return std::tie(b->spec().priority, a->id) < std::tie(a->spec().priority, b->id);
  });
  for (const JobRecord* r : growing) {
    PendingReason why;
    if (!s.BuildRequest(*r, &why)) continue;
    const int32_t leaf = s.Leaf(*r);
    const int32_t missing = s.request().tasks[0].replicas - static_cast<int32_t>(r->placement.size());
    ReleaseNomination(s, *r);  // held for it until now
    if (s.request().fractional) {
      // Fractions and MIG slices: replica by replica where they fit now (an
      // idle MIG GPU re-partitioned if that is what fits); like a sharing
      // job's start, not by evicting.
      std::vector<ReplicaPlacement> grown = GrowShares(s, *r, missing);
      if (grown.empty()) continue;
      const size_t more = grown.size();
      grown.insert(grown.end(), r->placement.begin(), r->placement.end());
      Resized(s, *r, std::move(grown), more);
      continue;
    }
    const int32_t best = s.MostReplicasThatFit(*r, 1, missing);
    // (Not within min_runtime of its autoscaler's last decision to go down:
    // one that swings does not evict training on every swing. A rise in
    // steps evicts at each step: what the load needs now.)
    const bool swung = r->scaled_down_at > 0 && s.has_clock() && s.now() - r->scaled_down_at < s.options().min_runtime;
    if (swung) s.WakeAt(r->scaled_down_at + s.options().min_runtime);
    if (best < missing && r->spec().is_service() && s.has_clock() && !s.room_being_made(r->id) && !swung &&
        s.TakePreemptionSearch()) {
      // A scale-up that free GPUs cannot hold evicts preemptible gangs of
      // lower priority, as a pending job would (the preempt action's rules,
      // the checkpoint protocol); the GPUs they free are nominated for it,
      // and a later pass places the replicas there.
      s.SetElasticReplicas(missing);
      const std::vector<const JobRecord*> victims = ChooseVictims(s, *r);
      if (!victims.empty()) {
        Evict(s, *r, victims,
              "preempted to scale up service " + s.JobName(*r) + " (priority " + std::to_string(r->spec().priority) +
                  ") to " + std::to_string(r->DesiredReplicas()) + " replicas: " + r->last_scale_reason);
      }  // (what fits now is placed now)
    }
    if (best == 0) continue;
    s.SetElasticReplicas(best);
    if (!s.TryPlace(true)) continue;
    if (leaf >= 0) {
      s.Charge(leaf, s.TxnGpusByModel());
    }
    // The new replicas take the lowest replica indices the gang lacks.
    std::vector<bool> used(static_cast<size_t>(r->spec().tasks[0].replicas), false);
    for (const ReplicaPlacement& p : r->placement) {
      if (p.replica < used.size()) used[p.replica] = true;
    }
    std::vector<ReplicaPlacement> grown = r->placement;
    uint32_t next = 0;
    for (const Txn::Step& st : s.txn().steps()) {
      while (next < used.size() && used[next]) ++next;
      if (next >= used.size()) break;  // (cannot happen: it grows by at most the indices it lacks)
      used[next] = true;
      grown.push_back({0, next, topo.node_at(st.pos), st.mask});
    }
    Resized(s, *r, std::move(grown), static_cast<size_t>(best));
  }
}

}  // namespace

void RegisterElastic(Registry& r) {
  r.Register("shrink-elastic", [] { return std::make_unique<ShrinkElasticAction>(); });
  r.Register("grow-elastic", [] { return std::make_unique<GrowElastic>(); });
}

}  // namespace rota::sched
