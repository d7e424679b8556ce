// The learned job order's estimates, shared by the engine's `learned`
// JobOrder plugin (plugins/learned) and the simulator's research backend
// (sim/time_sim.cc's RotaOrder): one copy of the statistics.
//   LearnedGittins   the Gittins index of attained GPU-time, from a binned
//                    distribution of finished jobs' GPU-time (Kaplan-Meier
//                    over the jobs still running)
//   FitCensoredNormal the posterior mode of a normal from exact and
//                    right-censored values (a sweep's log GPU-time)
//   SweepIndex       a sweep's index: a log-normal fitted to its finished and
//                    unfinished jobs, with the workload's distribution as a
//                    prior
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/run_history.h"

namespace rota::sched {

// rota's ordering: the Gittins index of a job's attained GPU-time, from the
// distribution of GPU-time of the jobs that have finished so far (nothing a
// real scheduler would not know). On log-spaced bins of attained service
// (factor sqrt 2): the index of bin i is the best, over later bin edges e_j,
// of P(done by e_j | ran e_i) / E[service until min(done, e_j) | ran e_i].
class LearnedGittins {
 public:
  static constexpr int kBins = RunHistory::kBins;  // the history's bins
  static double Edge(int i) { return Edges()[i]; }
  static int Bin(double a) { return RunHistory::Bin(a); }
  static const std::array<double, kBins + 1>& Edges() { return RunHistory::Edges(); }
  // Next edge above `a` (GPU-seconds), for wake-ups.
  static double NextEdge(double a) { return Edge(Bin(a) + 1); }

  void Add(double gpu_seconds, double weight = 1) {
    const int b = Bin(gpu_seconds);
    count_[b] += weight;
    sum_[b] += gpu_seconds * weight;
    ++samples_;
  }
  // Adds a history's finished jobs (bins and GPU-seconds), as Add would.
  void AddHistory(const RunHistory& h) {
    for (int i = 0; i < kBins; ++i) {
      count_[i] += static_cast<double>(h.count[i]);
      sum_[i] += static_cast<double>(h.gpu_seconds[i]);
    }
    samples_ += h.finished;
  }
  // Adds `other`'s finished jobs scaled to `weight` in all (a prior).
  void AddScaled(const LearnedGittins& other, double weight) {
    double total = 0;
    for (int i = 0; i < kBins; ++i) total += other.count_[i];
    if (total <= 0) return;
    for (int i = 0; i < kBins; ++i) {
      count_[i] += other.count_[i] * weight / total;
      sum_[i] += other.sum_[i] * weight / total;
    }
  }
  // Adds a log-normal distribution of GPU-seconds (`mu` and `sigma`: mean and
  // deviation of the log), `weight` jobs in all.
  void AddLogNormal(double mu, double sigma, double weight) {
    const double sq = sigma * sigma;
    const double mean = std::exp(mu + sq / 2);
    // Neighbouring bins share an edge: each erfc is computed once (the same
    // argument gives the same value; the memo only saves the work).
    Erfc mass, shifted;
    for (int i = 0; i < kBins; ++i) {
      const double lo = i == 0 ? -HUGE_VAL : LogEdge(i);
      const double hi = i == kBins - 1 ? HUGE_VAL : LogEdge(i + 1);
      const double p = NormalMass((lo - mu) / sigma, (hi - mu) / sigma, mass);
      if (p <= 0) continue;
      // E[X; lo < log X < hi] of a log-normal, over p: the bin's mean, kept
      // inside the bin where the tail's rounding would throw it out.
      const double in_bin = mean * NormalMass((lo - mu - sq) / sigma, (hi - mu - sq) / sigma, shifted) / p;
      count_[i] += weight * p;
      sum_[i] += weight * p * std::clamp(in_bin, i == 0 ? 0.0 : Edge(i), i == kBins - 1 ? HUGE_VAL : Edge(i + 1));
    }
  }
  // `censored`: attained GPU-seconds of jobs not finished yet (they will run
  // at least that long): a Kaplan-Meier estimate, so that the long jobs still
  // running are not missing from the distribution. A job censored inside a bin
  // is at risk there for the share of the bin it had run when this was built
  // (actuarial; a sweep's estimate is rebuilt as its jobs cross into a bin, so
  // for those the share is near nothing): counted whole, it would claim to
  // have outlived the bin, and a job's own attained service would keep telling
  // it that it will not finish soon.
  void Rebuild(const std::vector<double>& censored) {
    double at_risk[kBins + 1] = {};
    double cens[kBins] = {};
    double part[kBins] = {};
    for (double a : censored) {
      const int b = Bin(a);
      ++cens[b];
      part[b] += std::clamp((a - Edge(b)) / (Edge(b + 1) - Edge(b)), 0.0, 1.0);
    }
    for (int i = kBins - 1; i >= 0; --i) at_risk[i] = at_risk[i + 1] + count_[i] + cens[i];
    for (int i = 0; i < kBins; ++i) at_risk[i] -= cens[i] - part[i];
    for (int i = 0; i < kBins; ++i) {
      hazard_[i] = at_risk[i] > 0 ? count_[i] / at_risk[i] : 0;
      mean_[i] = count_[i] > 0 ? sum_[i] / count_[i] : (Edge(i) + Edge(i + 1)) / 2;
    }
    last_ = -1;
    for (int i = 0; i < kBins; ++i) {
      if (hazard_[i] != 0) last_ = i;
    }
    computed_ = 0;  // (each bin's index when first asked for: most estimates are read at a few bins)
    built_ = samples_;
  }
  bool stale() const { return samples_ >= 16 && samples_ >= built_ + built_ / 10 + 1; }
  bool ready() const { return built_ >= 16; }
  int64_t built() const { return built_; }
  // The index of the bin `a` is in, from the last Rebuild.
  double Index(double a) { return IndexOfBin(Bin(a)); }
  // The same, given that bin (Bin(a)).
  double IndexOfBin(int i) {
    if ((computed_ >> i & 1) == 0) {
      index_[i] = IndexAt(i);
      computed_ |= uint64_t{1} << i;
    }
    return index_[i];
  }
  // P(a < Z < b) for a standard normal Z, from the nearer tail (no cancellation).
  static double NormalMass(double a, double b) {
    Erfc erfc;
    return NormalMass(a, b, erfc);
  }
  // std::erfc with the last four arguments remembered (a bin's edge comes
  // back in the next bin, two or three calls later).
  struct Erfc {
    double arg[4] = {NAN, NAN, NAN, NAN}, value[4] = {};
    int next = 0;
    double operator()(double x) {
      for (int k = 0; k < 4; ++k) {
        if (x == arg[k]) return value[k];
      }
      const double v = std::erfc(x);
      arg[next] = x;
      value[next] = v;
      next = (next + 1) & 3;
      return v;
    }
  };
  // NormalMass, its erfc through `erfc` (the same value).
  static double NormalMass(double a, double b, Erfc& erfc) {
    if (a >= 0) return 0.5 * (erfc(a / std::sqrt(2.0)) - erfc(b / std::sqrt(2.0)));
    return 0.5 * (erfc(-b / std::sqrt(2.0)) - erfc(-a / std::sqrt(2.0)));
  }
  // std::log(Edge(i)), computed once.
  static double LogEdge(int i) {
    static const std::array<double, kBins + 1> logs = [] {
      std::array<double, kBins + 1> l{};
      for (int k = 0; k <= kBins; ++k) l[k] = std::log(Edge(k));
      return l;
    }();
    return logs[i];
  }

 private:
  // Bin i's index: the best, over later bin edges, of the chance of
  // finishing by the edge over the service spent until then.
  double IndexAt(int i) const {
    // Past the last bin where jobs end (hazard 0 from there: spent and
    // surv stay as they are), a later edge only adds surv * its width to e.
    // Once e > 0 with surv > 0, the ratio can only fall (or stay below 0);
    // with surv == 0 it stays; a NaN stays NaN: no later edge changes best.
    // (Before e > 0, e.g. spent < 0 where jobs ended below their bin's
    // start, the loop goes on.)
    const double start = Edge(i);
    double surv = 1, spent = 0, best = 0;
    for (int j = i; j < kBins; ++j) {
      spent += surv * hazard_[j] * (mean_[j] - start);
      surv *= 1 - hazard_[j];
      const double e = spent + surv * (Edge(j + 1) - start);
      if (e > 0) best = std::max(best, (1 - surv) / e);
      if (j >= last_ && (surv == 0 || (surv > 0 && e > 0) || std::isnan(e))) break;
    }
    return best;
  }

  double count_[kBins] = {};
  double sum_[kBins] = {};
  // From the last Rebuild: each bin's hazard and mean GPU-time of the jobs
  // that end in it, the last bin where jobs end, and the bins whose index
  // (index_) has been computed since.
  static_assert(kBins <= 64, "computed_ has a bit per bin");
  double hazard_[kBins] = {};
  double mean_[kBins] = {};
  int last_ = -1;
  uint64_t computed_ = ~uint64_t{0};  // (never built: every index 0)
  double index_[kBins] = {};
  int64_t samples_ = 0;
  int64_t built_ = 0;
};

// The posterior mode of a normal's mean and variance, from exact values
// (given by their count, sum and sum of squares) and right-censored ones
// (each value, with how many there are, known only to be exceeded). Priors:
// the mean is normal around `mu0` with variance `tau2`; the variance is worth
// `var_weight` values at `var0`. Newton's method from `start`, with an EM
// step wherever Newton's would not climb. rota's order fits the log GPU-time
// of a sweep's jobs with it.
struct CensoredNormal {
  double n = 0, sum = 0, sq = 0;                  // the exact values
  std::vector<std::pair<double, int>> censored;   // (value, count)
  double mu0 = 0, tau2 = 1, var0 = 1, var_weight = 0;
};
struct NormalFit {
  double mu = 0, var = 1;
  int iterations = 0;
};
NormalFit FitCensoredNormal(const CensoredNormal& data, NormalFit start);

// The workload's log GPU-seconds of finished jobs (count, sum, sum of
// squares): the prior of a sweep's mean.
struct WorkloadLogs {
  double n = 0, sum = 0, sq = 0;
};

// A sweep's index, kept between passes and rebuilt only when its evidence
// changes: its finished jobs, the workload's index (`prior`: which build of
// it), or the bins its unfinished jobs are in. A sweep speaks for itself
// (informed()) once one of its jobs has finished or has run kInformedAt
// GPU-seconds; before, the workload's index stands for it.
//  - Before any finish: the workload's distribution (kSweepPriorWeight
//    jobs' worth) with its unfinished jobs censored at what they attained.
//  - From its first finish: a log-normal fitted to its finished jobs' log
//    GPU-seconds and, censored, its unfinished ones (the posterior mode,
//    from its last fit; the workload's log GPU-time as the prior of its
//    mean), worth all its jobs, plus the workload's as the same prior.
// The simulator's research order and the `learned` plugin both keep one
// per live sweep.
inline constexpr double kSweepPriorWeight = 2;
// Within a sweep, the prior of the variance of log GPU-time (Philly
// 0e4a51's: 0.34 within sweeps, 10.8 overall) and its weight in jobs.
inline constexpr double kSweepLogVariance = 0.34;
inline constexpr double kSweepLogVarianceWeight = 0.5;
class SweepIndex {
 public:
  static constexpr double kInformedAt = 600;
  // `finished` jobs whose log GPU-seconds sum to `log_sum` (squares:
  // `log_sq`); `censored`: its unfinished jobs' attained GPU-seconds (they
  // will run at least that long; reordered). `workload`: every finished
  // job's logs (workload.n > 0 once finished > 0). `scratch` is reused.
  void Update(int64_t finished, double log_sum, double log_sq, std::vector<double>& censored,
              const WorkloadLogs& workload, const LearnedGittins& global, int64_t prior, CensoredNormal* scratch);
  // Whether Update would keep the index as it is, given what it reads of
  // the unfinished jobs: `bins` (AddBin over their attained GPU-seconds, in
  // any order: a job that starts, and so moves from the waiting jobs to the
  // running ones, changes no sweep's estimate) and whether one has run
  // kInformedAt. Sets informed(), so that a caller that gets true need not
  // call Update.
  bool Current(int64_t finished, int64_t prior, uint64_t bins, bool ran_long);
  static uint64_t AddBin(uint64_t bins, double attained) { return AddBinOf(bins, RunHistory::Bin(attained)); }
  // The same, given the bin (RunHistory::Bin(attained)).
  static uint64_t AddBinOf(uint64_t bins, int bin) {
    // A sum of the bins' mixed numbers (splitmix64's finalizer): the same
    // for the same bins in any order, different for different bins but by a
    // 64-bit accident.
    uint64_t z = static_cast<uint64_t>(bin) + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return bins + (z ^ (z >> 31));
  }
  bool informed() const { return informed_; }
  double Index(double attained) { return index_.Index(attained); }
  double IndexOfBin(int bin) { return index_.IndexOfBin(bin); }

 private:
  void Fit(int64_t finished, double log_sum, double log_sq, std::vector<double>& censored, const WorkloadLogs& workload,
           CensoredNormal* scratch);
  LearnedGittins index_;
  NormalFit fit_{0, 0, 0};  // the last log-normal fit (var 0: none yet)
  bool informed_ = false;
  int64_t built_ = -1;  // finished jobs when built
  int64_t prior_ = -1;  // the workload's build it was built on
  uint64_t bins_ = 0;   // its unfinished jobs' bins when built
};

// What the learned history expects a job's total GPU-time to be, given the
// `attained` GPU-seconds it has run: its sweep's typical GPU-time (the
// geometric mean of its finished jobs') if one of them finished and it is
// beyond `attained`; else the median GPU-time of the finished jobs that ran
// longer than `attained` (from the history's bins); past all of them, 10%
// more than `attained`. 0 with fewer than kEstimateFrom finished jobs.
// What-if (sim/profile_sim.h's Project) runs jobs without a time limit for
// this long.
inline constexpr int64_t kEstimateFrom = 16;
double EstimateGpuSeconds(const RunHistory& history, JobId sweep, double attained);

}  // namespace rota::sched
