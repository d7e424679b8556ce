// preempt: a blocked job may evict preemptible running gangs, if that lets
// it fit now: gangs of lower priority in its queue, or gangs borrowing from
// a queue over its guarantee while the job's queue is within its own
// (reclaim). Victims are chosen by the work they would lose (GPUs x the
// time since their last checkpoint, or their start), cheapest first,
// preferring victims within one rack to victims scattered over the
// cluster; a gang is never evicted before it has run min_runtime, more
// than max_preemptions_per_hour times an hour, for a job it was itself
// evicted for, or off GPUs a reservation counts on. Victims get their
// checkpoint signal and grace; the preemptor waits (its pending reason
// says for whom), with the GPUs nominated for it.
#include "sched/actions/action.h"
#include "sched/plugins/builtin.h"
#include "sched/session.h"

#include <algorithm>
#include <map>

namespace rota::sched {
namespace {

// The cheapest set of victims whose eviction lets the current request fit;
// empty if none does. Leaves the workspace as it found it.
std::vector<const JobRecord*> ChooseVictims(Session& s, const JobRecord& job) {
  const Topology& topo = s.topology();
  const QueueBook& book = s.book();
  const TimePoint now = s.now();
  const int32_t my_leaf = s.Leaf(job);
  // Reclaiming across queues needs the job's GPU model (to check its guarantee).
  const int16_t model = s.RequestModel();
  const bool may_reclaim = my_leaf >= 0 && model >= 0 &&
                           book.WithinGuarantee(my_leaf, {{model, s.request().total_gpus}});
  struct Candidate {
    int64_t cost;  // GPU-microseconds of work since it started (lost if it has not checkpointed)
    const JobRecord* job;
  };
  std::vector<Candidate> candidates;
  for (const JobRecord* r : s.running()) {
    const JobId id = r->id;
    if (!book.MayBorrow(r->spec)) continue;
    if (now - r->started_at < s.options().min_runtime) continue;
    const auto recent = std::count_if(r->preempted_at.begin(), r->preempted_at.end(),
                                      [&](TimePoint t) { return now - t < 3600 * kMicrosPerSecond; });
    if (recent >= s.options().max_preemptions_per_hour) continue;
    if (s.is_victim(id) || s.resized(id) != nullptr) continue;
    // No eviction cycles: never evict a job this one was (recently) evicted for.
    if (std::find(job.preempted_by.begin(), job.preempted_by.end(), id) != job.preempted_by.end()) continue;
    // Evicting a gang whose GPUs a reservation counts on would only hand
    // them to a job that the reservation's owner should go before.
    if (s.HoldsReservedGpus(*r)) continue;
    bool eligible = r->spec.queue == job.spec.queue && r->spec.priority < job.spec.priority;
    if (!eligible && may_reclaim && r->spec.queue != job.spec.queue) {
      const int32_t leaf = book.LeafIndex(r->spec.queue);
      eligible = leaf >= 0 && book.Borrowing(leaf);
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
  auto set = [&](const JobRecord& r, bool release) { s.SetReleased(r, release); };
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
      fits = s.TryPlace(false);
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
      if (s.TryPlace(false)) hi = mid;
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
  s.TryPlace(true);
  std::vector<std::pair<uint32_t, uint64_t>> used;
  for (const Txn::Step& st : s.txn().steps()) used.push_back({st.pos, st.mask});
  s.txn().Rollback();
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
  const bool trimmed_fits = s.TryPlace(false);
  for (const JobRecord* v : victims) set(*v, false);
  if (!trimmed_fits) {
    victims.clear();
    for (size_t i = 0; i < hi; ++i) victims.push_back((*list)[i].job);
  }
  return victims;
}

class Preempt final : public BlockedAction {
 public:
  std::string_view name() const override { return "preempt"; }
  bool Blocked(Session& s, const JobRecord& job, PendingReason* reason) const override {
    if (!s.has_clock() || reason->code == ReasonCode::kReserved || !s.TakePreemptionSearch()) return false;
    const std::vector<const JobRecord*> victims = ChooseVictims(s, job);
    if (victims.empty()) return false;
    std::string names;
    for (const JobRecord* v : victims) {
      const std::string cause = job.spec.queue == v->spec.queue
                                    ? "preempted for job " + std::to_string(job.id.value()) + " (priority " +
                                          std::to_string(job.spec.priority) + " > " + std::to_string(v->spec.priority) +
                                          ")"
                                    : "preempted to return borrowed capacity to queue " + job.spec.queue + " (job " +
                                          std::to_string(job.id.value()) + ")";
      s.out().preemptions.push_back({v->id, job.id, cause, v->spec.checkpoint.signal, v->spec.checkpoint.grace});
      s.AddVictim(v->id);
      names += (names.empty() ? "" : ", ") + std::to_string(v->id.value());
    }
    s.out().pending.push_back({job.id, {ReasonCode::kPreempting, "preempting job" +
                                                                     std::string(victims.size() > 1 ? "s " : " ") + names +
                                                                     " to make room; it starts when they have "
                                                                     "checkpointed and stopped"}});
    return true;
  }
};

}  // namespace

void RegisterPreempt(Registry& r) {
  r.Register("preempt", [] { return std::make_unique<Preempt>(); });
}

}  // namespace rota::sched
