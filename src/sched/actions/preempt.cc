// preempt: a blocked job may evict preemptible running gangs, if that lets
// it fit now: gangs of lower priority in its queue (or of its priority that
// a preemptive job order puts after it: las, tiresias), or gangs of a queue
// borrowing beyond its guarantee while the job's side stays within its own
// (reclaim, QueueBook::MayReclaim). Victims are chosen by what evicting
// them costs (the profile's VictimOrder; lost-work by default: GPUs x the
// time since their last checkpoint, or their start), cheapest first, preferring victims within one rack to victims scattered
// over the cluster; a gang is never evicted before it has run min_runtime,
// more than max_preemptions_per_hour times an hour, for a job it was itself
// evicted for, or off GPUs a reservation counts on. Victims get their
// checkpoint signal and grace; the preemptor waits (its pending reason says
// for whom), with the GPUs nominated for it. When a reclaim is blocked, the
// reason names the queue, its guarantee, the borrower and what blocks it.
#include "sched/actions/preempt.h"

#include "sched/actions/action.h"
#include "sched/plugins/builtin.h"
#include "sched/session.h"

#include <algorithm>
#include <map>

namespace rota::sched {
namespace {

struct Candidate {
  int64_t cost;  // the VictimOrder's (lost-work: GPU-microseconds since it last saved)
  const JobRecord* job;
};

// What the candidate search saw of reclaiming.
struct Reclaim {
  int64_t candidates = 0;  // borrowers' gangs that may be evicted
  std::string borrower;    // the first borrower queue met
  std::string blocked;     // why the first of its gangs may not be evicted
};

// Why a running gang may not be evicted for a job.
enum class Exclusion { kNone, kNotEligible, kNotPreemptible, kMinRuntime, kHourlyCap, kChanged, kCycle, kReserved };

// Why running gang `r` may not be evicted for `job`; `reclaim`: it is a
// borrower's the job may reclaim from. No allocation (this runs for every
// running gang of every search).
Exclusion Excluded(Session& s, const JobRecord& job, const JobRecord& r, bool reclaim) {
  const EngineOptions& o = s.options();
  if (r.id == job.id) return Exclusion::kNotEligible;  // (a service scaling up is running)
  const TimePoint now = s.now();
  // Its own queue's gangs of lower priority (or, under a preemptive job
  // order, of equal priority that the order puts after it: asked last,
  // below, as the dearest check; which exclusion a gang of the job's own
  // queue meets is never reported); another queue's only to reclaim.
  const bool own_queue = r.spec().queue == job.spec().queue;
  if (own_queue ? r.spec().priority > job.spec().priority : !reclaim) return Exclusion::kNotEligible;
  if (!s.book().MayBorrow(r.spec())) return Exclusion::kNotPreemptible;
  // What holds it back whatever the time: being changed this cycle, an
  // eviction cycle (never evict a job this one was recently evicted for),
  // GPUs a reservation counts on (evicting it would only hand them to a job
  // the reservation's owner should go before), or the job order.
  auto held = [&] {
    if (s.is_victim(r.id) || s.resized(r.id) != nullptr) return Exclusion::kChanged;
    if (std::find(job.preempted_by.begin(), job.preempted_by.end(), r.id) != job.preempted_by.end()) {
      return Exclusion::kCycle;
    }
    if (s.HoldsReservedGpus(r)) return Exclusion::kReserved;
    if (own_queue && r.spec().priority == job.spec().priority && !s.OrderEvicts(job, r)) return Exclusion::kNotEligible;
    return Exclusion::kNone;
  };
  // Too young, or evicted too often in the last hour: held back by time
  // (reported first). If by time alone, a cycle may decide otherwise when
  // it runs out (the job order's answer only turns against evicting a gang
  // as its unsaved work grows: framework.h's RankEvicts).
  const bool young = now - r.started_at < o.min_runtime;
  constexpr Duration kHour = 3600 * kMicrosPerSecond;
  const auto recent = std::count_if(r.preempted_at.begin(), r.preempted_at.end(), [&](TimePoint t) { return now - t < kHour; });
  const bool capped = recent >= o.max_preemptions_per_hour;
  if (!young && !capped) return held();
  if (held() == Exclusion::kNone) {
    if (young) s.WakeAt(r.started_at + o.min_runtime);
    for (TimePoint t : r.preempted_at) {
      if (capped && now - t < kHour) s.WakeAt(t + kHour);  // (the first to age out: the earliest)
    }
  }
  return young ? Exclusion::kMinRuntime : Exclusion::kHourlyCap;
}

std::string Describe(Session& s, const JobRecord& r, Exclusion why) {
  const std::string id = "job " + s.JobName(r);
  const TimePoint now = s.now();
  switch (why) {
    case Exclusion::kNotPreemptible: return id + " may not be preempted";
    case Exclusion::kMinRuntime:
      return id + " has run " + FormatSpan(now - r.started_at) + " of its " + FormatDuration(s.options().min_runtime) +
             " minimum runtime";
    case Exclusion::kHourlyCap:
      return id + " was preempted " + std::to_string(s.options().max_preemptions_per_hour) +
             " times in the last hour (the most allowed)";
    case Exclusion::kChanged: return id + " is already being preempted or resized";
    case Exclusion::kCycle: return id + " preempted this job before (no eviction cycles)";
    case Exclusion::kReserved: return id + " holds GPUs a reservation counts on";
    default: return "";
  }
}

// What the queues borrowing beyond their guarantees may give back to `job`
// (Kueue re-checks the same way): while one lives, the gangs already leaving
// (stopping for a preemptor, or this cycle's victims) are taken off their
// queues' books, and Takes gives back one more gang if its side still holds
// more than its guarantees of a model the gang holds. The books are as they
// were once it goes. Before, every gang of a borrowing queue could be
// evicted: a reclaim could take a queue below its own guarantee, evict its
// gangs of a model it did not borrow, and evict again each cycle while the
// first victims were still stopping.
class Borrowed {
 public:
  // (A gang leaving for a job of its own queue gives its queue nothing back:
  // that job takes its place.)
  Borrowed(Session& s, const JobRecord& job, const QueueBook::ModelGpus& need)
      : s_(s), job_(job), need_(need), leaf_(s.Leaf(job)) {
    for (const Preemption& p : s.out().preemptions) Leaving(s.snap().FindJob(p.victim), s.snap().FindJob(p.preemptor));
    for (const auto& [preemptor, victim] : s.making_room()) Leaving(s.snap().FindJob(victim), s.snap().FindJob(preemptor));
  }
  ~Borrowed() {
    for (auto& [victim_leaf, gpus] : given_) s_.book().Charge(victim_leaf, gpus);
  }
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;

  // Whether gang `r` (of another queue) may still be reclaimed for the job:
  // its side still borrows a model it holds, with what was given back so far
  // (the last one taken may take it below its guarantee by less than its
  // own size).
  bool May(const JobRecord& r) {
    const int32_t victim_leaf = s_.book().LeafIndex(r.spec().queue);
    if (victim_leaf < 0) return false;
    const QueueBook::ModelGpus holds = QueueBook::Charged(s_.snap(), r);
    uint64_t models = 0;  // (the answer depends on the leaf and these alone, until the next give-back)
    for (const auto& [model, n] : holds) models |= model < 64 ? uint64_t{1} << model : 0;
    for (const Memo& m : memo_) {
      if (m.leaf == victim_leaf && m.models == models) return m.may;
    }
    memo_.push_back({victim_leaf, models, s_.book().MayReclaim(leaf_, victim_leaf, need_, holds)});
    return memo_.back().may;
  }
  // May, and if so it is given back.
  bool Takes(const JobRecord& r) {
    if (!May(r)) return false;
    GiveBack(s_.book().LeafIndex(r.spec().queue), QueueBook::Charged(s_.snap(), r));
    return true;
  }

 private:
  struct Memo {
    int32_t leaf;
    uint64_t models;
    bool may;
  };
  void Leaving(const JobRecord* r, const JobRecord* preemptor) {
    if (r == nullptr || r->spec().queue == job_.spec().queue) return;
    if (preemptor != nullptr && preemptor->spec().queue == r->spec().queue) return;
    if (const int32_t victim_leaf = s_.book().LeafIndex(r->spec().queue); victim_leaf >= 0) {
      GiveBack(victim_leaf, QueueBook::Charged(s_.snap(), *r));
    }
  }
  void GiveBack(int32_t victim_leaf, QueueBook::ModelGpus gpus) {
    memo_.clear();
    for (auto& [model, n] : gpus) n = -n;
    s_.book().Charge(victim_leaf, gpus);
    for (auto& [model, n] : gpus) n = -n;  // (to charge back)
    given_.push_back({victim_leaf, std::move(gpus)});
  }

  Session& s_;
  const JobRecord& job_;
  const QueueBook::ModelGpus& need_;
  const int32_t leaf_;
  std::vector<std::pair<int32_t, QueueBook::ModelGpus>> given_;
  std::vector<Memo> memo_;
};

// Strikes off `list` the gangs of other queues `borrowed` may not take.
void KeepBorrowed(const JobRecord& job, Borrowed& borrowed, std::vector<Candidate>* list) {
  std::erase_if(*list, [&](const Candidate& c) { return c.job->spec().queue != job.spec().queue && !borrowed.May(*c.job); });
}

// The running gangs that may be evicted for `job`, cheapest first.
std::vector<Candidate> Candidates(Session& s, const JobRecord& job, Reclaim* reclaim) {
  // Reclaiming across queues needs the job's GPU model (to check its guarantee).
  const int16_t model = s.RequestModel();
  const int32_t leaf = s.Leaf(job);
  const QueueBook::ModelGpus need = {{model, s.request().total_gpus}};
  std::vector<std::pair<int32_t, bool>> may_reclaim;  // per victim leaf, once a search (a few queues)
  auto reclaims_from = [&](const JobRecord& r) {
    if (leaf < 0 || model < 0 || r.spec().queue == job.spec().queue) return false;
    const int32_t victim_leaf = s.book().LeafIndex(r.spec().queue);
    if (victim_leaf < 0) return false;
    for (const auto& [l, ok] : may_reclaim) {
      if (l == victim_leaf) return ok;
    }
    may_reclaim.push_back({victim_leaf, s.book().MayReclaim(leaf, victim_leaf, need)});
    return may_reclaim.back().second;
  };
  std::vector<Candidate> candidates;
  // (The gangs the job order spares for certain, Excluded would exclude with
  // no wake and no mark: passed by unread.)
  const std::vector<uint8_t>& spared = s.OrderSpares(job);
  for (size_t k = 0; k < s.running().size(); ++k) {
    if (spared[k] != 0) continue;
    const JobRecord* r = s.running()[k];
    // (For a job its queue's limits refuse, its own queue's gangs only:
    // another queue's give back nothing it is refused for.)
    const bool borrower = !s.quota_search() && reclaims_from(*r);
    const Exclusion why = Excluded(s, job, *r, borrower);
    if (borrower && reclaim->borrower.empty()) reclaim->borrower = r->spec().queue;
    if (why != Exclusion::kNone) {
      if (borrower && why != Exclusion::kNotEligible && reclaim->blocked.empty()) reclaim->blocked = Describe(s, *r, why);
      continue;
    }
    reclaim->candidates += borrower;
    candidates.push_back({s.profile().victim_order().Cost(*r, s.now()), r});
  }
  std::sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tie(a.cost, a.job->id) < std::tie(b.cost, b.job->id);
  });
  if (reclaim->candidates > 0) {
    // (A borrower whose borrowing the gangs already leaving cover is none.)
    Borrowed borrowed(s, job, need);
    KeepBorrowed(job, borrowed, &candidates);
    reclaim->candidates = std::count_if(candidates.begin(), candidates.end(),
                                        [&](const Candidate& c) { return c.job->spec().queue != job.spec().queue; });
  }
  return candidates;
}

// Evicts prefixes of a candidate list in the workspace, to see what fits.
class PrefixSearch {
 public:
  PrefixSearch(Session& s, const JobRecord& job) : s_(s), job_(job) {}
  ~PrefixSearch() { SetPrefix(0); }

  // Works on `list` from now on. REQUIRES: nothing released.
  void Use(const std::vector<Candidate>* list) { list_ = list; }
  const std::vector<Candidate>& list() const { return *list_; }
  // Releases exactly the first k candidates.
  void SetPrefix(size_t k) {
    for (; released_ < k; ++released_) s_.SetReleased(*(*list_)[released_].job, true);
    for (; released_ > k; --released_) s_.SetReleased(*(*list_)[released_ - 1].job, false);
  }
  // The shortest prefix whose eviction lets the job fit: doubling, then
  // binary search (a few placements, not one per victim). 0 if none fits;
  // leaves nothing released.
  size_t Shortest() {
    size_t hi = 1;
    bool fits = false;
    while (!list_->empty()) {
      SetPrefix(std::min(hi, list_->size()));
      fits = s_.PlacesAdmitted(job_);
      if (fits || hi >= list_->size()) break;
      hi *= 2;
    }
    if (!fits) {
      SetPrefix(0);
      return 0;
    }
    size_t lo = hi / 2 + 1;
    hi = std::min(hi, list_->size());
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      SetPrefix(mid);
      if (s_.PlacesAdmitted(job_)) hi = mid;
      else lo = mid + 1;
    }
    SetPrefix(0);
    return hi;
  }

 private:
  Session& s_;
  const JobRecord& job_;
  const std::vector<Candidate>* list_ = nullptr;
  size_t released_ = 0;
};

// Victims in one domain (innermost level above the node: a rack) rather
// than GPUs scattered across the cluster: each domain's candidates alone,
// the cheapest sufficient set; empty if no one domain suffices.
std::vector<Candidate> OneDomain(Session& s, PrefixSearch& search, const std::vector<Candidate>& candidates) {
  const Topology& topo = s.topology();
  std::vector<Candidate> local;
  if (topo.domain_levels().empty() || candidates.size() <= 1) return local;
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
    search.Use(&group);
    const size_t k = search.Shortest();
    if (k == 0) continue;
    int64_t cost = 0;
    for (size_t i = 0; i < k; ++i) cost += group[i].cost;
    if (cost < best_cost) {
      best_cost = cost;
      local.assign(group.begin(), group.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  return local;
}

// Of the first `k` of the search's list (which fit), only the victims whose
// GPUs the job's placement actually uses: scattered GPUs elsewhere are not
// evicted for nothing. Falls back to all k if the trimmed set does not fit.
std::vector<const JobRecord*> Trim(Session& s, PrefixSearch& search, size_t k, const JobRecord& job) {
  const Topology& topo = s.topology();
  search.SetPrefix(k);
  s.TryPlace(true);
  std::vector<std::pair<uint32_t, uint64_t>> used;
  for (const Txn::Step& st : s.txn().steps()) used.push_back({st.pos, st.mask});
  s.txn().Rollback();
  std::vector<const JobRecord*> victims;
  for (size_t i = 0; i < k; ++i) {
    const JobRecord& v = *search.list()[i].job;
    bool overlaps = false;
    for (const ReplicaPlacement& p : v.placement) {
      const uint32_t pos = topo.position_of(p.node);
      for (const auto& [upos, umask] : used) overlaps = overlaps || (upos == pos && (umask & p.gpu_mask) != 0);
    }
    if (overlaps) victims.push_back(&v);
  }
  search.SetPrefix(0);
  for (const JobRecord* v : victims) s.SetReleased(*v, true);
  const bool trimmed_fits = s.PlacesAdmitted(job);
  for (const JobRecord* v : victims) s.SetReleased(*v, false);
  if (!trimmed_fits) {
    victims.clear();
    for (size_t i = 0; i < k; ++i) victims.push_back(search.list()[i].job);
  }
  return victims;
}

// The cheapest set of `candidates` whose eviction lets the current request
// fit; empty if none does. Leaves the workspace as it found it.
std::vector<const JobRecord*> CheapestFit(Session& s, const JobRecord& job, const std::vector<Candidate>& candidates) {
  PrefixSearch search(s, job);
  std::vector<Candidate> local = OneDomain(s, search, candidates);
  size_t k = 0;
  if (!local.empty()) {
    search.Use(&local);
    k = local.size();
  } else {
    search.Use(&candidates);
    k = search.Shortest();
  }
  if (k == 0) return {};
  return Trim(s, search, k, job);
}

// CheapestFit of `candidates` (Candidates'), reclaiming from each borrower
// no more than it borrows: where the set found takes a gang past that
// (cheapest first), that gang is struck off and the search runs again
// (kSearches at most), so that another borrowed gang may serve instead (a
// cheaper one of the same queue on GPUs the job cannot use may have taken
// its share: striking all of that queue's other gangs would miss the one
// that serves).
std::vector<const JobRecord*> ChooseVictims(Session& s, const JobRecord& job, const std::vector<Candidate>& candidates) {
  constexpr int kSearches = 8;
  std::vector<const JobRecord*> victims = CheapestFit(s, job, candidates);
  const bool reclaims = std::any_of(victims.begin(), victims.end(),
                                    [&](const JobRecord* v) { return v->spec().queue != job.spec().queue; });
  if (!reclaims) return victims;
  const QueueBook::ModelGpus need = {{s.RequestModel(), s.request().total_gpus}};
  std::vector<Candidate> list = candidates;
  for (int searches = 1;; ++searches) {
    {
      Borrowed borrowed(s, job, need);  // (gone before the next search: it reads the books)
      const JobRecord* past = nullptr;
      for (const JobRecord* v : victims) {  // (in the list's order: cheapest first)
        if (v->spec().queue == job.spec().queue) continue;
        if (!borrowed.Takes(*v)) {
          past = v;
          break;
        }
      }
      if (past == nullptr) return victims;
      if (searches == kSearches) return {};
      std::erase_if(list, [&](const Candidate& c) { return c.job == past; });
    }
    victims = CheapestFit(s, job, list);
    if (victims.empty()) return victims;
  }
}

// "; queue Q holds h of its g guaranteed M GPUs while B borrows ...": why a
// reclaim the job is entitled to did not happen.
std::string ReclaimBlocked(Session& s, const JobRecord& job, const Reclaim& reclaim) {
  const QueueBook& book = s.book();
  const int16_t model = s.RequestModel();
  const int32_t leaf = s.Leaf(job);
  const std::string gpus = book.model_name(model) + " GPUs";
  std::string out = "; queue " + job.spec().queue + " holds " + std::to_string(book.HeldWithinGuarantees(leaf, model)) +
                    " of its " + std::to_string(book.Guarantee(leaf, model)) + " guaranteed " + gpus + " while " +
                    reclaim.borrower + " borrows beyond its own, but reclaiming is blocked: ";
  if (!reclaim.blocked.empty() && reclaim.candidates == 0) return out + reclaim.blocked;
  out += "evicting every borrowed gang it may take would not make room for it";
  if (!reclaim.blocked.empty()) out += " (and " + reclaim.blocked + ")";
  return out;
}

class Preempt final : public BlockedAction {
 public:
  std::string_view name() const override { return "preempt"; }
  bool ActsOverQuota() const override { return true; }
  bool Blocked(Session& s, const JobRecord& job, PendingReason* reason) const override {
    if (!s.has_clock() || reason->code == ReasonCode::kReserved) return false;
    // A search for a job its queue's limits refuse takes one of the cycle's
    // searches only where a gang may go (the first search of every job that
    // does not fit takes one, as before).
    Reclaim reclaim;
    std::vector<Candidate> candidates;
    if (s.quota_search()) {
      if (!s.PreemptionSearchesLeft()) return false;
      candidates = Candidates(s, job, &reclaim);
      if (candidates.empty() || !s.TakePreemptionSearch()) return false;
    } else {
      if (!s.TakePreemptionSearch()) return false;
      candidates = Candidates(s, job, &reclaim);
    }
    const std::vector<const JobRecord*> victims = ChooseVictims(s, job, candidates);
    if (victims.empty()) {
      if (!reclaim.borrower.empty()) reason->message += ReclaimBlocked(s, job, reclaim);
      return false;
    }
    std::string names;
    for (const JobRecord* v : victims) {
      // Why, as the candidate search decided it: a higher priority, the
      // job order (equal priorities), or a reclaim.
      std::string cause;
      if (job.spec().queue != v->spec().queue) {
        cause = "preempted to return borrowed capacity to queue " + job.spec().queue + " (job " + s.JobName(job) + ")";
      } else if (job.spec().priority > v->spec().priority) {
        cause = "preempted for job " + s.JobName(job) + " (priority " + std::to_string(job.spec().priority) + " > " +
                std::to_string(v->spec().priority) + ")";
      } else {
        bool first = false;
        const JobOrderPlugin* order = s.DecidingOrder(job, *v, &first);
        cause = "preempted for job " + s.JobName(job) + " (priority " + std::to_string(job.spec().priority) +
                " for both; the " + (order != nullptr ? std::string(order->name()) + " " : std::string()) +
                "job order puts it first)";
      }
      s.out().preemptions.push_back({v->id, job.id, cause, v->spec().checkpoint.signal, v->spec().checkpoint.grace});
      s.AddVictim(v->id);
      names += (names.empty() ? "" : ", ") + s.JobName(*v);
    }
    s.out().Wait(job.id, {ReasonCode::kPreempting, "preempting job" + std::string(victims.size() > 1 ? "s " : " ") + names +
                                                       " to make room; it starts when they have checkpointed and stopped"});
    return true;
  }
};

}  // namespace

std::vector<const JobRecord*> ChooseVictims(Session& s, const JobRecord& job) {
  Reclaim reclaim;
  return ChooseVictims(s, job, Candidates(s, job, &reclaim));
}

void Evict(Session& s, const JobRecord& job, const std::vector<const JobRecord*>& victims, const std::string& cause) {
  for (const JobRecord* v : victims) {
    s.out().preemptions.push_back({v->id, job.id, cause, v->spec().checkpoint.signal, v->spec().checkpoint.grace});
    s.AddVictim(v->id);
  }
}

void RegisterPreempt(Registry& r) {
  r.Register("preempt", [] { return std::make_unique<Preempt>(); });
}

}  // namespace rota::sched
