// learned: rota's learned job order, non-clairvoyant (it reads what a
// scheduler knows: a job's attained GPU-time, its sweep, when it was
// submitted, and the GPU-time of the jobs that finished; never a duration).
// Enable it after priority, so that priorities (and queues' fair share)
// still come first: plugins: [priority, learned, fifo, ...].
//  - Jobs go by their Gittins index (sched/learned.h): the chance of
//    finishing within the next bin of attained GPU-time over the GPU-time
//    spent until then, from the finished jobs' GPU-time (the snapshot's
//    RunHistory, derived from the journal) and, censored, the attained
//    GPU-time of the jobs still pending or running (Kaplan-Meier).
//  - A sweep (RunHistory: same queue and GPU count, a minute apart) speaks
//    for itself once one of its jobs finished (a log-normal fitted to its
//    jobs, the workload as a prior) or ran 600 GPU-seconds.
//  - A waiting job never goes ahead of a running job of its own sweep.
//  - No starvation: a job waiting 3 days since its submission or the end of
//    its last attempt goes first, oldest first.
//  - Until 16 jobs have finished: least attained GPU-time first.
// It is preemptive: a job it puts first may evict a running gang of its
// queue and priority, no larger than itself, if the gang has saved at
// least half of what it ran since it started, and 1 / the job's index (the
// GPU-time it spends per chance of ending) plus the work the gang would
// lose is at most half of 1 / the gang's index (RankEvicts); a starved job
// may evict any gang that has saved half. All within the preempt action's
// limits (minimum run time, evictions per hour, no eviction cycles); there
// is no second copy of those.
//
// The simulator's research backend (sim/time_sim.cc's RotaOrder, on GPU
// counts) runs the same statistics; this plugin is what the server and the
// production-profile simulation run.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <unordered_map>

#include "sched/learned.h"
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

constexpr Duration kStarved = 3 * 24 * 3600 * kMicrosPerSecond;
constexpr double kStarvedRank = -1e12;  // plus the submission time in seconds: before every index
constexpr int64_t kReadyAt = 16;        // finished jobs before the index is used
// On the whole Philly trace on 512 GPUs (production profile, grace 0):
// margin 1 evicted 91,383 times and redid 62,425 GPU-hours for an average
// JCT of 25,675 s; margin 2, 49,524 times, 20,757 GPU-hours, 23,900 s.
constexpr double kEvictMargin = 2;

// What the plugin keeps between cycles (the session holds it): the
// workload's index, and each live sweep's, rebuilt as the simulator's are:
// the workload's when 10% more jobs have finished, a sweep's when its
// finished jobs, the workload's index or its jobs' bins change.
struct LearnedState : JobOrderPlugin::RankState {
  LearnedGittins global;
  int64_t built_at = -1;  // history.finished when `global` was built
  uint64_t built = 0;     // how many times it was (a sweep's prior changed)
  struct Sweep {
    SweepIndex index;
    // This cycle's: its jobs (positions in Rank's `jobs`), whether its
    // index is up to date, the worst rank of its running jobs.
    uint64_t seen = 0, refreshed = 0;  // the cycle (stamp) that last did so
    std::vector<uint32_t> members;
    uint64_t bins = 0;      // SweepIndex::AddBin over its members' attained GPU-seconds
    bool ran_long = false;  // one of them has run SweepIndex::kInformedAt
    double last_running = -HUGE_VAL;
    // Its facts in the history (RunHistory::sweeps), as read when the
    // history's finished jobs and their log sums were `facts_at`.
    RunHistory::Sweep facts;
    std::tuple<int64_t, int64_t, int64_t> facts_at{-1, 0, 0};
  };
  std::unordered_map<uint64_t, Sweep> sweeps;
  // The sweeps last looked up, by id modulo its size (a job's sweep is
  // mostly a recent one's). Its entries point into `sweeps` (whose nodes
  // stay where they are), and go when that is compacted.
  struct Recent {
    uint64_t id = ~uint64_t{0};
    Sweep* sweep = nullptr;
  };
  std::array<Recent, 256> recent;
  Sweep& Find(uint64_t id) {
    Recent& r = recent[id % recent.size()];
    if (r.sweep == nullptr || r.id != id) r = {id, &sweeps[id]};  // (an empty entry's id may be a sweep's too)
    return *r.sweep;
  }
  uint64_t stamp = 0;
  size_t live_sweeps = 0;  // this cycle's
  // Scratch.
  std::vector<Sweep*> of;  // per job, its sweep
  std::vector<double> gpu_seconds, gpus, mine;
  std::vector<int> bin;  // per job, RunHistory::Bin of its GPU-seconds
  CensoredNormal scratch;
};

// The GPUs a job's attained GPU-seconds count; a job without whole GPUs (CPU only, or a GPU
// fraction) counts as one GPU, so that its attained service grows too.
double Gpus(const JobRecord& j) { return static_cast<double>(std::max<int64_t>(1, j.spec().TotalGpus())); }

TimePoint WaitingSince(const JobRecord& j) { return j.attempts.empty() ? j.submitted_at : j.attempts.back().ended_at; }

class Learned final : public JobOrderPlugin {
 public:
  std::string_view name() const override { return "learned"; }
  bool preemptive() const override { return true; }
  bool ranks() const override { return true; }
  int Compare(const JobRecord&, const JobRecord&, TimePoint) const override { return 0; }  // (ranks instead)
  std::unique_ptr<RankState> NewRankState() const override { return std::make_unique<LearnedState>(); }
  // An eviction costs the victim's work since its last checkpoint, redone
  // later. So:
  //  - every run keeps at least half its work: a gang that has saved less
  //    than half of what it ran since it started is not evicted (else jobs
  //    evicted before their first checkpoint, again and again, would make
  //    no progress at all); one that saves on the eviction signal loses
  //    nothing;
  //  - a starved job evicts any other;
  //  - else no gang larger than the job: evicting it would free GPUs the
  //    job does not need and send the gang back to wait for a whole set of
  //    GPUs again, which is the harder to find the more it needs (on
  //    synthetic mostly-long work, 8-GPU jobs of days were evicted again
  //    and again by 1-GPU newcomers);
  //  - before the index is ready, least attained service first, at any
  //    margin;
  //  - else a job evicts a gang only if 1 / its index (the GPU-time it
  //    spends per chance of ending) plus the work lost is at most
  //    1 / (kEvictMargin x the gang's index).
  bool RankEvicts(double job, double running, const VictimWork& victim) const override {
    if (victim.unsaved > victim.run / 2) return false;
    if (job < kStarvedRank / 2) return true;
    if (victim.larger) return false;
    if (running >= 0) return job < running;
    const double mine = -job, theirs = -running;  // the indices (theirs > 0 here)
    return mine > 0 && 1 / mine + victim.unsaved <= 1 / (kEvictMargin * theirs);
  }

  void Rank(const Snapshot& snap, TimePoint now, const std::vector<const JobRecord*>& jobs, RankState* state,
            std::vector<double>* ranks) const override {
    LearnedState& st = static_cast<LearnedState&>(*state);
    const RunHistory& h = snap.history();
    ranks->assign(jobs.size(), 0);
    ++st.stamp;
    std::vector<double>& gs = st.gpu_seconds;  // every job's attained GPU-seconds
    std::vector<double>& gpus = st.gpus;       // and GPUs (Gpus)
    std::vector<int>& bin = st.bin;            // and their bins (each found once)
    gs.resize(jobs.size());
    gpus.resize(jobs.size());
    bin.resize(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      gpus[i] = Gpus(*jobs[i]);
      gs[i] = static_cast<double>(jobs[i]->AttainedAt(now)) * gpus[i] / kMicrosPerSecond;
      bin[i] = RunHistory::Bin(gs[i]);
    }
    if (h.finished >= kReadyAt && (st.built_at < 0 || h.finished >= st.built_at + st.built_at / 10 + 1 ||
                                   h.finished < st.built_at)) {
      st.global = LearnedGittins();
      st.global.AddHistory(h);
      st.global.Rebuild(gs);
      st.built_at = h.finished;
      ++st.built;
    }
    const bool ready = st.built_at >= kReadyAt;
    st.of.resize(jobs.size());
    st.live_sweeps = 0;
    // One lookup per run of a sweep's jobs (mostly together: the pending,
    // then the running, each in id order).
    for (size_t i = 0; i < jobs.size(); ++i) {
      LearnedState::Sweep* sw =
          i > 0 && jobs[i]->sweep == jobs[i - 1]->sweep ? st.of[i - 1] : &st.Find(jobs[i]->sweep.value());
      if (sw->seen != st.stamp) {
        // One no job of the last cycle was in is forgotten (as if erased
        // then: the map is only compacted now and then, below).
        if (sw->seen + 1 != st.stamp) *sw = LearnedState::Sweep();
        sw->seen = st.stamp;
        sw->members.clear();
        sw->bins = 0;
        sw->ran_long = false;
        sw->last_running = -HUGE_VAL;
      }
      sw->members.push_back(static_cast<uint32_t>(i));
      st.live_sweeps += sw->members.size() == 1;
      sw->bins = SweepIndex::AddBinOf(sw->bins, bin[i]);
      sw->ran_long = sw->ran_long || gs[i] >= SweepIndex::kInformedAt;
      st.of[i] = sw;
    }
    // When a rank may change while the state stays as it is: a waiting job
    // starves, a running one's attained GPU-time enters its next bin (or
    // reaches kInformedAt, when its sweep speaks for itself). Before the
    // index is ready, least attained first moves with every running job.
    TimePoint changes = std::numeric_limits<TimePoint>::max();
    auto crosses = [&](double gpus_of_job, double attained, int in_bin) {
      // (The last bin has no end: no crossing.)
      double next = in_bin >= LearnedGittins::kBins - 1 ? HUGE_VAL : LearnedGittins::Edge(in_bin + 1);
      if (attained < SweepIndex::kInformedAt) next = std::min(next, SweepIndex::kInformedAt);
      // floor(in) < the whole number changes - now exactly when in is:
      // floored (not after) only when it is sooner.
      const double in = (next - attained) / gpus_of_job * kMicrosPerSecond;
      if (in < static_cast<double>(changes - now)) changes = now + std::max<TimePoint>(0, static_cast<TimePoint>(std::floor(in)));
    };
    for (size_t i = 0; i < jobs.size(); ++i) {
      const JobRecord& j = *jobs[i];
      double& rank = (*ranks)[i];
      if (j.state == JobState::kPending) {
        if (now - WaitingSince(j) >= kStarved) {
          rank = kStarvedRank + static_cast<double>(j.submitted_at) / kMicrosPerSecond;
          continue;
        }
        changes = std::min(changes, WaitingSince(j) + kStarved);
      } else if (j.state == JobState::kRunning) {
        crosses(gpus[i], gs[i], bin[i]);
      }
      LearnedState::Sweep& sw = *st.of[i];
      if (!ready) {
        rank = gs[i];
      } else {
        if (sw.refreshed != st.stamp) Refresh(h, j.sweep, gs, st, sw);
        rank = -(sw.index.informed() ? sw.index.IndexOfBin(bin[i]) : st.global.IndexOfBin(bin[i]));
      }
      if (j.state != JobState::kPending) sw.last_running = std::max(sw.last_running, rank);
    }
    // No waiting job ahead of a running sibling: just behind the last one.
    for (size_t i = 0; i < jobs.size(); ++i) {
      double& rank = (*ranks)[i];
      if (jobs[i]->state != JobState::kPending || rank < kStarvedRank / 2) continue;
      const double last = st.of[i]->last_running;
      if (rank <= last) rank = std::nextafter(last, HUGE_VAL);
    }
    st.changes_at = ready ? changes : 0;
    // Forget the sweeps no job of this cycle is in: a walk of the whole map
    // only once it has grown well past this cycle's (those not seen are
    // reset when met again, above).
    if (st.sweeps.size() > 2 * st.live_sweeps + 64) {
      for (auto it = st.sweeps.begin(); it != st.sweeps.end();) {
        it = it->second.seen == st.stamp ? std::next(it) : st.sweeps.erase(it);
      }
      st.recent.fill({});
    }
  }

 private:
  // The sweep's evidence this cycle: its finished jobs (the history's) and
  // the attained GPU-time of its unfinished ones (censored).
  static void Refresh(const RunHistory& h, JobId sweep, const std::vector<double>& gs, LearnedState& st,
                      LearnedState::Sweep& sw) {
    sw.refreshed = st.stamp;
    // A sweep's finished jobs change only with the history's (a job that
    // ends on its own adds to both; one cancelled, to neither): read again
    // only then. (The history moves forward under one scheduler; one
    // replaced whole, by a journal snapshot's RunHistoryState, is before the
    // first cycle.)
    const std::tuple<int64_t, int64_t, int64_t> at{h.finished, h.log_sum, h.log_sq};
    if (sw.facts_at != at) {
      auto found = h.sweeps.find(sweep.value());
      sw.facts = found != h.sweeps.end() ? found->second : RunHistory::Sweep{};
      sw.facts_at = at;
    }
    const RunHistory::Sweep& facts = sw.facts;
    // (Most sweeps, most cycles: nothing of theirs changed.)
    if (sw.index.Current(facts.finished, static_cast<int64_t>(st.built), sw.bins, sw.ran_long)) return;
    std::vector<double>& mine = st.mine;
    mine.clear();
    for (uint32_t k : sw.members) mine.push_back(gs[k]);
    const WorkloadLogs workload{static_cast<double>(h.finished), static_cast<double>(h.log_sum) / RunHistory::kLogScale,
                                static_cast<double>(h.log_sq) / RunHistory::kLogScale};
    sw.index.Update(facts.finished, static_cast<double>(facts.log_sum) / RunHistory::kLogScale,
                    static_cast<double>(facts.log_sq) / RunHistory::kLogScale, mine, workload, st.global,
                    static_cast<int64_t>(st.built), &st.scratch);
  }
};

}  // namespace

void RegisterLearned(Registry& r) {
  r.Register("learned", [] { return std::make_unique<Learned>(); });
}

}  // namespace rota::sched
