// reserve: the first blocked jobs (options().reservation_depth, in order)
// get a reservation: GPUs held from the time enough running jobs will have
// reached their time limits, found by releasing running jobs in the order
// their limits end (the smallest prefix that lets the job fit). Lower jobs
// backfill around it: on other GPUs, or on these if their own time limit
// ends before it starts (allocate's ends_first). A start further away than
// options().reservation_window holds nothing (far-off starts should not
// idle GPUs); the reason still gives the expected start.
#include "sched/actions/action.h"
#include "sched/plugins/builtin.h"
#include "sched/session.h"

#include <algorithm>

namespace rota::sched {
namespace {

// The earliest time the current request fits, releasing running jobs in
// order of their time-limit ends; fills *steps with where. False if never.
bool EarliestStart(Session& s, const JobRecord& job, TimePoint* start, std::vector<Txn::Step>* steps) {
  const Topology& topo = s.topology();
  const std::vector<Session::Ending>& endings = s.Endings();
  const std::unordered_map<uint32_t, uint64_t>& promised = s.promised();
  // GPUs promised to an earlier reservation this cycle stay out of reach
  // even when the job on them ends: no two reservations count on one GPU.
  auto release = [&](size_t from, size_t to, bool give) {
    for (size_t i = from; i < to; ++i) {
      const JobRecord& job = *endings[i].job;
      if (promised.empty()) {
        s.SetReleased(job, give);
        continue;
      }
      const std::vector<ReplicaPlacement>* resized = s.resized(job.id);  // a job resized this cycle holds what it holds now
      for (ReplicaPlacement r : resized != nullptr ? *resized : job.placement) {
        if (r.shares_gpu()) continue;
        auto it = promised.find(topo.position_of(r.node));
        if (it != promised.end()) r.gpu_mask &= ~it->second;
        s.SetReplicasReleased(job.spec(), &r, 1, give);
      }
    }
  };
  // The smallest prefix of endings whose release lets the job fit (binary
  // search: releasing more never makes a fit impossible in practice, and the
  // answer is checked by placing).
  size_t lo = 1, hi = endings.size();
  release(0, hi, true);
  const bool fits_at_all = s.PlacesAdmitted(job);
  release(0, hi, false);
  if (endings.empty() || !fits_at_all) return false;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    release(0, mid, true);
    const bool fits = s.PlacesAdmitted(job);
    release(0, mid, false);
    if (fits) hi = mid;
    else lo = mid + 1;
  }
  release(0, lo, true);
  const bool fits = s.TryPlace(true);
  if (fits) *steps = s.txn().steps();
  s.txn().Rollback();
  release(0, lo, false);
  if (!fits) return false;
  *start = std::max(s.now(), endings[lo - 1].end);
  return true;
}

class Reserve final : public BlockedAction {
 public:
  std::string_view name() const override { return "reserve"; }
  bool Blocked(Session& s, const JobRecord& job, PendingReason* reason) const override {
    const EngineOptions& o = s.options();
    if (!s.has_clock() || static_cast<int32_t>(s.out().reservations.size()) >= o.reservation_depth ||
        reason->code == ReasonCode::kReserved) {
      return false;
    }
    TimePoint start = 0;
    std::vector<Txn::Step> steps;
    if (!EarliestStart(s, job, &start, &steps)) return false;
    const Duration in = start - s.now();
    reason->expected_start = start;
    if (o.reservation_window > 0 && in > o.reservation_window) {
      s.WakeAt(start - o.reservation_window);  // then it is held for
      reason->message += "; earliest start in " + FormatSpan(in) + ", beyond the reservation window (" +
                         FormatDuration(o.reservation_window) + "): nothing is held for it";
      return false;
    }
    s.Reserve(job.id, start, steps);
    reason->message += "; reserved: expected to start in " + FormatSpan(in) +
                       ", when running jobs reach their time limits";
    // Its reason is its own: later jobs of the same shape get their own search.
    s.out().Wait(job.id, *reason);
    return true;
  }
};

}  // namespace

void RegisterReserve(Registry& r) {
  r.Register("reserve", [] { return std::make_unique<Reserve>(); });
}

}  // namespace rota::sched
