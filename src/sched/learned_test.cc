#include "sched/learned.h"

#include <gtest/gtest.h>

#include <cmath>

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
