#include "sched/learned.h"

#include <numeric>

namespace rota::sched {

NormalFit FitCensoredNormal(const CensoredNormal& data, NormalFit start) {
  const double n = data.n + std::accumulate(data.censored.begin(), data.censored.end(), 0.0,
                                            [](double a, const auto& c) { return a + c.second; });
  NormalFit out = start;
  if (n <= 0) return out;
  const double nu = data.var_weight, s0 = data.var0, mu0 = data.mu0, tau2 = data.tau2;
  constexpr double kMinSd = 0.1;
  struct Eval {
    double f = 0, gm = 0, gs = 0, hmm = 0, hms = 0, hss = 0;  // value, gradient, Hessian in (mu, sd)
  };
  auto eval = [&](double mu, double sd) {
    Eval e;
    const double var = sd * sd;
    // Exact values: their log density, from their sums.
    const double dev = data.sq - 2 * mu * data.sum + data.n * mu * mu;  // sum of (x - mu)^2
    const double dsum = data.sum - data.n * mu;                         // sum of (x - mu)
    e.f = -data.n * std::log(sd) - dev / (2 * var);
    e.gm = dsum / var;
    e.gs = -data.n / sd + dev / (var * sd);
    e.hmm = -data.n / var;
    e.hms = -2 * dsum / (var * sd);
    e.hss = data.n / var - 3 * dev / (var * var);
    for (const auto& [c, count] : data.censored) {
      // log P(x > c) = log S(z), z = (c - mu) / sd; lambda = phi(z) / S(z),
      // with its asymptotic series where S underflows.
      const double z = (c - mu) / sd;
      const double tail = 0.5 * std::erfc(z / std::sqrt(2.0));
      double log_tail, lambda;
      if (tail > 1e-300) {
        log_tail = std::log(tail);
        lambda = std::exp(-z * z / 2) / std::sqrt(2 * M_PI) / tail;
      } else {
        log_tail = -z * z / 2 - std::log(z * std::sqrt(2 * M_PI));
        lambda = z + 1 / z - 2 / (z * z * z);
      }
      e.f += count * log_tail;
      e.gm += count * lambda / sd;
      e.gs += count * lambda * z / sd;
      e.hmm -= count * lambda * (lambda - z) / var;
      e.hms -= count * lambda * (1 + z * (lambda - z)) / var;
      e.hss -= count * lambda * z * (2 + z * (lambda - z)) / var;
    }
    e.f += -(mu - mu0) * (mu - mu0) / (2 * tau2) - nu * std::log(sd) - nu * s0 / (2 * var);
    e.gm += -(mu - mu0) / tau2;
    e.gs += -nu / sd + nu * s0 / (var * sd);
    e.hmm += -1 / tau2;
    e.hss += nu / var - 3 * nu * s0 / (var * var);
    return e;
  };
  // Newton's method; where the Hessian is not negative definite, shifted
  // until it is (Levenberg-Marquardt). Each step halved until the posterior
  // rises; done when a step moves less than 1e-7 or none rises.
  double mu = start.mu, sd = std::max(std::sqrt(std::max(start.var, 0.0)), kMinSd);
  Eval e = eval(mu, sd);
  for (out.iterations = 1; out.iterations <= 200; ++out.iterations) {
    double hmm = e.hmm, hss = e.hss;
    const double half_trace = (hmm + hss) / 2;
    const double top = half_trace + std::sqrt(half_trace * half_trace - (hmm * hss - e.hms * e.hms));  // largest eigenvalue
    if (!(top < 0)) {
      const double shift = top + std::max(1e-6, 0.01 * std::abs(half_trace));
      hmm -= shift;
      hss -= shift;
    }
    const double det = hmm * hss - e.hms * e.hms;
    double dm = -(hss * e.gm - e.hms * e.gs) / det;
    double ds = -(hmm * e.gs - e.hms * e.gm) / det;
    bool moved = false;
    for (int half = 0; half < 40; ++half, dm /= 2, ds /= 2) {
      if (sd + ds < kMinSd) continue;
      const Eval t = eval(mu + dm, sd + ds);
      if (t.f > e.f) {
        mu += dm;
        sd += ds;
        e = t;
        moved = true;
        break;
      }
    }
    if (!moved || (std::abs(dm) < 1e-7 && std::abs(ds) < 1e-7)) break;
  }
  out.mu = mu;
  out.var = sd * sd;
  return out;
}

void SweepIndex::Update(int64_t finished, double log_sum, double log_sq, std::vector<double>& censored,
                        const WorkloadLogs& workload, const LearnedGittins& global, int64_t prior,
                        CensoredNormal* scratch) {
  uint64_t bins = 0;  // which bins they are in, to rebuild only on a change
  for (double a : censored) bins = AddBin(bins, a);
  const bool ran_long = std::any_of(censored.begin(), censored.end(), [](double a) { return a >= kInformedAt; });
  if (Current(finished, prior, bins, ran_long)) return;
  index_ = LearnedGittins();
  if (finished == 0) {
    index_.AddScaled(global, kSweepPriorWeight);
    index_.Rebuild(censored);
  } else {
    Fit(finished, log_sum, log_sq, censored, workload, scratch);
    index_.AddLogNormal(fit_.mu, std::sqrt(fit_.var), static_cast<double>(finished) + static_cast<double>(censored.size()));
    index_.AddScaled(global, kSweepPriorWeight);
    index_.Rebuild({});
  }
  built_ = finished;
  prior_ = prior;
  bins_ = bins;
}

bool SweepIndex::Current(int64_t finished, int64_t prior, uint64_t bins, bool ran_long) {
  informed_ = finished > 0 || ran_long;
  return !informed_ || (built_ == finished && prior_ == prior && bins_ == bins);
}

void SweepIndex::Fit(int64_t finished, double log_sum, double log_sq, std::vector<double>& censored,
                     const WorkloadLogs& workload, CensoredNormal* scratch) {
  // The posterior mode of the log-normal (FitCensoredNormal on the logs),
  // from the last fit. Priors: the mean is normal around the mean log of
  // all finished jobs, with their variance; the variance is
  // kSweepLogVariance, kSweepLogVarianceWeight jobs' worth.
  const double n = static_cast<double>(finished);
  const double mu0 = workload.sum / workload.n;
  const double tau2 = std::max(0.1, workload.sq / workload.n - mu0 * mu0);
  // The censored logs, each distinct value once with its count (waiting
  // jobs often share one).
  std::sort(censored.begin(), censored.end());
  scratch->censored.clear();
  for (double v : censored) {
    const double c = std::log(std::max(1.0, v));
    if (scratch->censored.empty() || scratch->censored.back().first != c) scratch->censored.emplace_back(c, 0);
    ++scratch->censored.back().second;
  }
  if (fit_.var == 0) {  // never fitted: from the finished jobs'
    fit_.mu = log_sum / n;
    fit_.var = kSweepLogVariance;
  }
  scratch->n = n;
  scratch->sum = log_sum;
  scratch->sq = log_sq;
  scratch->mu0 = mu0;
  scratch->tau2 = tau2;
  scratch->var0 = kSweepLogVariance;
  scratch->var_weight = kSweepLogVarianceWeight;
  const NormalFit f = FitCensoredNormal(*scratch, {fit_.mu, fit_.var, 0});
  fit_.mu = f.mu;
  fit_.var = f.var;
}

double EstimateGpuSeconds(const RunHistory& h, JobId sweep, double attained) {
  if (auto it = h.sweeps.find(sweep.value()); it != h.sweeps.end() && it->second.finished > 0) {
    const double typical =
        std::exp(static_cast<double>(it->second.log_sum) / RunHistory::kLogScale / static_cast<double>(it->second.finished));
    if (typical > attained) return typical;
  }
  if (h.finished < kEstimateFrom) return 0;
  // The finished jobs beyond `attained`: the bins above its own, and of its
  // own bin the share above it (as if spread evenly over the bin).
  const int first = RunHistory::Bin(attained);
  auto mass = [&](int b) {
    if (b != first) return static_cast<double>(h.count[b]);
    const double lo = RunHistory::Edge(b), hi = RunHistory::Edge(b + 1);
    return static_cast<double>(h.count[b]) * std::clamp((hi - attained) / (hi - lo), 0.0, 1.0);
  };
  double beyond = 0;
  for (int b = first; b < RunHistory::kBins; ++b) beyond += mass(b);
  if (beyond <= 0) return attained * 1.1;
  double seen = 0;
  for (int b = first; b < RunHistory::kBins; ++b) {
    seen += mass(b);
    if (seen * 2 >= beyond && h.count[b] > 0) {
      const double mean = static_cast<double>(h.gpu_seconds[b]) / static_cast<double>(h.count[b]);
      return std::max(mean, attained * 1.1);
    }
  }
  return attained * 1.1;
}

}  // namespace rota::sched
