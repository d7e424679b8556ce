#include "sched/learned.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "base/rng.h"

namespace rota::sched {
namespace {

// The log posterior FitCensoredNormal climbs, written out plainly.
double LogPosterior(const CensoredNormal& d, const std::vector<double>& exact, double mu, double sd) {
  double f = -(mu - d.mu0) * (mu - d.mu0) / (2 * d.tau2) - d.var_weight * (std::log(sd) + d.var0 / (2 * sd * sd));
  for (double x : exact) f += -std::log(sd) - (x - mu) * (x - mu) / (2 * sd * sd);
  for (const auto& [c, count] : d.censored) f += count * std::log(0.5 * std::erfc((c - mu) / (sd * std::sqrt(2.0))));
  return f;
}

// LearnedGittins's index as it was computed before it stopped early (and
// before it was computed per bin, when first asked for): every edge tried
// for every bin. Same operations in the same order.
std::vector<double> FullIndex(const std::vector<std::pair<double, double>>& finished, const std::vector<double>& censored) {
  constexpr int K = LearnedGittins::kBins;
  double count[K] = {}, sum[K] = {};
  for (const auto& [v, w] : finished) {
    const int b = LearnedGittins::Bin(v);
    count[b] += w;
    sum[b] += v * w;
  }
  double at_risk[K + 1] = {}, cens[K] = {}, part[K] = {};
  for (double a : censored) {
    const int b = LearnedGittins::Bin(a);
    ++cens[b];
    part[b] += std::clamp((a - LearnedGittins::Edge(b)) / (LearnedGittins::Edge(b + 1) - LearnedGittins::Edge(b)), 0.0, 1.0);
  }
  for (int i = K - 1; i >= 0; --i) at_risk[i] = at_risk[i + 1] + count[i] + cens[i];
  for (int i = 0; i < K; ++i) at_risk[i] -= cens[i] - part[i];
  double hazard[K], mean[K];
  for (int i = 0; i < K; ++i) {
    hazard[i] = at_risk[i] > 0 ? count[i] / at_risk[i] : 0;
    mean[i] = count[i] > 0 ? sum[i] / count[i] : (LearnedGittins::Edge(i) + LearnedGittins::Edge(i + 1)) / 2;
  }
  std::vector<double> index(K);
  for (int i = 0; i < K; ++i) {
    const double start = LearnedGittins::Edge(i);
    double surv = 1, spent = 0, best = 0;
    for (int j = i; j < K; ++j) {
      spent += surv * hazard[j] * (mean[j] - start);
      surv *= 1 - hazard[j];
      const double e = spent + surv * (LearnedGittins::Edge(j + 1) - start);
      if (e > 0) best = std::max(best, (1 - surv) / e);
    }
    index[i] = best;
  }
  return index;
}

// A bin's index (computed when first asked for after a Rebuild) stops
// trying edges where no later one can matter; it is the full one's, bit for
// bit: where jobs ended below their bin's start
// (20 jobs that ended at once, one running 1,000 GPU-seconds: e is below 0
// until eight bins on), with fractional weights, and at random.
TEST(Learned, RebuildGivesTheIndexOfEveryEdge) {
  auto check = [](const std::vector<std::pair<double, double>>& finished, const std::vector<double>& censored) {
    LearnedGittins g;
    for (const auto& [v, w] : finished) g.Add(v, w);
    g.Rebuild(censored);
    const std::vector<double> full = FullIndex(finished, censored);
    for (int i = 0; i < LearnedGittins::kBins; ++i) ASSERT_EQ(g.Index(LearnedGittins::Edge(i)), full[i]) << "bin " << i;
  };
  std::vector<std::pair<double, double>> at_once(20, {0.0, 1.0});
  check(at_once, {1000});
  EXPECT_GT(FullIndex(at_once, {1000})[0], 1);  // (the case that needs the loop to go on)
  check({{0.3, 0.25}, {5, 1.0 / 3}, {40, 2.5}, {40, 0.1}}, {1, 2, 4, 8, 8, 64});
  Rng rng(11);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::pair<double, double>> finished;
    std::vector<double> censored;
    const int n = 1 + static_cast<int>(rng.Uniform(40));
    for (int k = 0; k < n; ++k) {
      const double v = std::exp(rng.Normal() * 4 + 3) * (rng.Uniform(4) == 0 ? 0 : 1);
      finished.push_back({v, rng.Uniform(3) == 0 ? 0.5 + static_cast<double>(rng.Uniform(100)) / 7 : 1.0});
    }
    for (uint64_t k = rng.Uniform(20); k > 0; --k) {
      censored.push_back(rng.Uniform(2) == 0 ? LearnedGittins::Edge(static_cast<int>(rng.Uniform(40)))
                                             : std::exp(rng.Normal() * 4 + 5));
    }
    check(finished, censored);
  }
  // Each bin's index is computed when it is first asked for after a
  // Rebuild: read in any order, and anew after the next Rebuild; jobs added
  // since the last Rebuild count only from the next (a bin first asked for
  // between the two gives the last Rebuild's index).
  LearnedGittins g;
  std::vector<std::pair<double, double>> finished;
  for (int round = 0; round < 20; ++round) {
    const std::vector<std::pair<double, double>> built = finished;
    for (int k = 0; k < 5; ++k) {
      finished.push_back({std::exp(rng.Normal() * 3 + 4), 1.0});
      g.Add(finished.back().first);
    }
    if (round > 0) {  // (added, not rebuilt: the bins not read yet are the last Rebuild's)
      const std::vector<double> before = FullIndex(built, {});
      for (int i = 1; i < LearnedGittins::kBins; i += 2) {
        ASSERT_EQ(g.Index(LearnedGittins::Edge(i)), before[i]) << "round " << round << " bin " << i;
      }
    }
    g.Rebuild({});
    const std::vector<double> full = FullIndex(finished, {});
    for (int i = LearnedGittins::kBins - 1; i >= 0; i -= 1 + round % 3) {
      ASSERT_EQ(g.Index(LearnedGittins::Edge(i)), full[i]) << "round " << round << " bin " << i;
    }
  }
}

// The censored-normal fit: exact values alone give their mean and variance;
// with the largest values censored it still finds the distribution, where
// the exact values alone are far off; it gets there from far away; and where
// most values are censored at nothing (a sweep's waiting jobs) it finds the
// mode fast, not crawling as EM does.
TEST(Learned, CensoredNormalFitRecoversTheDistribution) {
  CensoredNormal d;
  d.tau2 = 1e12;  // no prior to speak of
  for (double x : {1.0, 2.0, 3.0, 6.0}) {
    d.n += 1;
    d.sum += x;
    d.sq += x * x;
  }
  NormalFit f = FitCensoredNormal(d, {0, 1, 0});
  EXPECT_NEAR(f.mu, 3.0, 1e-6);
  EXPECT_NEAR(f.var, (4 + 1 + 0 + 9) / 4.0, 1e-6);

  // 2,000 draws of N(12, 0.5^2); those above 12.2 known only to exceed 12.2.
  Rng rng(7);
  CensoredNormal c;
  c.tau2 = 1e12;
  c.censored = {{12.2, 0}};
  for (int i = 0; i < 2000; ++i) {
    const double x = 12 + 0.5 * rng.Normal();
    if (x > 12.2) {
      ++c.censored[0].second;
    } else {
      c.n += 1;
      c.sum += x;
      c.sq += x * x;
    }
  }
  ASSERT_GT(c.censored[0].second, 600);  // about a third
  EXPECT_LT(c.sum / c.n, 11.8);           // the exact ones alone: far too short
  for (NormalFit start : {NormalFit{12, 0.25, 0}, NormalFit{0, 10, 0}, NormalFit{30, 0.01, 0}}) {
    f = FitCensoredNormal(c, start);
    EXPECT_NEAR(f.mu, 12.0, 0.05) << "from " << start.mu;
    EXPECT_NEAR(std::sqrt(f.var), 0.5, 0.05) << "from " << start.mu;
    EXPECT_LT(f.iterations, 30) << "from " << start.mu;
  }

  // Sweeps just after their first finish: one finished job; the others
  // running just below it, or waiting (censored at log 1 = 0).
  struct Case {
    double exact;
    std::vector<std::pair<double, int>> censored;
  };
  for (const Case& k : {Case{14, {{0, 1000}}}, Case{9, {{0, 54}, {8.9, 63}}}, Case{9, {{0, 3}, {8.5, 10}, {9.5, 2}}}}) {
    CensoredNormal s;
    s.n = 1;
    s.sum = k.exact;
    s.sq = k.exact * k.exact;
    s.censored = k.censored;
    s.mu0 = 8;
    s.tau2 = 10;
    s.var0 = 0.34;
    s.var_weight = 0.5;
    NormalFit first;
    for (NormalFit start : {NormalFit{k.exact, 0.34, 0}, NormalFit{0, 4, 0}}) {
      f = FitCensoredNormal(s, start);
      EXPECT_LT(f.iterations, 40) << k.exact << " from " << start.mu;
      // A maximum: no step of 1e-3 either way does better.
      const double sd = std::sqrt(f.var), top = LogPosterior(s, {k.exact}, f.mu, sd);
      for (double dm : {-1e-3, 0.0, 1e-3}) {
        for (double ds : {-1e-3, 0.0, 1e-3}) {
          EXPECT_LE(LogPosterior(s, {k.exact}, f.mu + dm, sd + ds), top + 1e-9) << k.exact << " from " << start.mu;
        }
      }
      if (start.mu == 0) {
        EXPECT_NEAR(f.mu, first.mu, 1e-4);
        EXPECT_NEAR(f.var, first.var, 1e-4);
      }
      first = f;
    }
  }

  // All censored: the prior on the mean holds it (no runaway to infinity).
  CensoredNormal all;
  all.censored = {{10.0, 5}};
  all.mu0 = 8;
  all.tau2 = 4;
  all.var0 = 0.34;
  all.var_weight = 0.5;
  f = FitCensoredNormal(all, {10, 0.34, 0});
  EXPECT_GT(f.mu, 10.0);
  EXPECT_LT(f.mu, 16.0);
}

}  // namespace
}  // namespace rota::sched
