// A simulated week of accounting, through the real aggregation: 1,000 jobs
// in 250 families (a user's jobs of one name, four runs each), half of the
// families planted over-provisioned (a GPU they barely use, or 4 GPUs where
// one or two would do) and half a control group that needs what it holds.
// Each job's GPUs are sampled at 1 Hz by the agent's GpuMeter, reported
// every 10 s into the server's UsageTracker, closed into usage records when
// the job ends, and the report's recommender (the production code, not a
// copy) proposes a shape per family.
//
// Targets (issue 21): at least 95% of the planted families get a shape that
// holds their real peak memory and activity; at most 2% of all families get
// a recommendation they should not (a control family, or a shape that would
// not have held the real peak); the whole week in well under 10 s.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "agent/meter.h"
#include "base/rng.h"
#include "core/mig.h"
#include "server/report.h"
#include "server/usage.h"

namespace rota::server {
namespace {

constexpr TimePoint kWeekStart = 1'800'000'000LL * kMicrosPerSecond;
constexpr Duration kWeek = 7LL * 24 * 3600 * kMicrosPerSecond;

struct Family {
  std::string user, name;
  bool planted = false;
  int32_t gpus = 1;
  int32_t activity = 0;   // mean %, samples spread +-8
  MemoryMiB peak = 0;     // the runs' peak GPU memory (each within 3% of it)
  // What the runs really did (from the raw samples).
  MemoryMiB real_peak = 0;
  std::vector<int32_t> samples;  // every sample's utilisation, to take the real p90
};

TEST(UsageWeek, PlantedOverProvisioningIsFoundAndTheControlGroupIsLeftAlone) {
  const auto wall = std::chrono::steady_clock::now();
  Rng rng(2026);
  ClusterState state;
  for (int n = 0; n < 16; ++n) {
    ASSERT_TRUE(state.Apply(NodeAdded{NodeSpec{.name = "n" + std::to_string(n), .gpu_model = "H100", .gpus = 8,
                                               .gpu_memory = 80 * 1024, .cpu = 128000, .memory = 1024 * 1024}})
                    .ok());
  }
  std::vector<Family> families(250);
  for (size_t f = 0; f < families.size(); ++f) {
    Family& fam = families[f];
    fam.user = "u" + std::to_string(f % 40);
    fam.name = "job" + std::to_string(f);
    fam.planted = f % 2 == 0;
    fam.gpus = f % 5 == 0 ? 4 : 1;
    if (fam.planted) {
      // Under-used: a fraction of a GPU's compute, a fraction of its memory.
      fam.activity = static_cast<int32_t>(fam.gpus == 4 ? 8 + rng.Uniform(10) : 3 + rng.Uniform(30));
      fam.peak = static_cast<MemoryMiB>((2 + rng.Uniform(fam.gpus == 4 ? 16 : 28)) * 1024);
    } else if (f % 4 == 1) {
      fam.activity = static_cast<int32_t>(75 + rng.Uniform(20));  // busy
      fam.peak = static_cast<MemoryMiB>((20 + rng.Uniform(50)) * 1024);
    } else {
      fam.activity = static_cast<int32_t>(10 + rng.Uniform(40));  // light, but its memory fills the GPU
      fam.peak = static_cast<MemoryMiB>((72 + rng.Uniform(6)) * 1024);
    }
  }
  UsageTracker tracker(RightSizing{});
  std::vector<UsageRecord> records;
  int64_t samples_taken = 0;
  uint64_t next_id = 1;
  for (int run = 0; run < 4; ++run) {
    for (Family& fam : families) {
      const JobId id(next_id++);
      JobSpec spec;
      spec.name = fam.name;
      spec.queue = "default";
      spec.tasks.push_back({.name = "main", .gpus = fam.gpus, .cpu = 8000});
      // Runs spread over the week, an hour each (+- 30 min).
      const TimePoint start = kWeekStart + static_cast<TimePoint>(rng.Uniform(static_cast<uint64_t>(kWeek - 6 * 3600 * kMicrosPerSecond)));
      const int64_t seconds = 1800 + static_cast<int64_t>(rng.Uniform(3600));
      ASSERT_TRUE(state.Apply(JobSubmitted{.id = id, .spec = spec, .at = start, .user = fam.user}).ok());
      const NodeId node = state.GetSnapshot().FindNode("n" + std::to_string(id.value() % 16))->id;
      const uint64_t mask = (uint64_t{1} << fam.gpus) - 1;
      ASSERT_TRUE(state.Apply(JobBound{id, {ReplicaPlacement{.task = 0, .replica = 0, .node = node, .gpu_mask = mask}}, start}).ok());
      Snapshot snap = state.GetSnapshot();
      const NodeState& ns = *snap.FindNode("n" + std::to_string(id.value() % 16));
      const std::set<JobId> on_node{id};
      agent::GpuMeter meter;
      const MemoryMiB run_peak = fam.peak - static_cast<MemoryMiB>(rng.Uniform(static_cast<uint64_t>(fam.peak * 3 / 100 + 1)));
      int64_t energy_counter = 1'000'000'000;
      for (int64_t s = 1; s <= seconds; ++s) {
        std::vector<agent::MeterReading> readings;
        for (int32_t g = 0; g < fam.gpus; ++g) {
          const int32_t util = std::clamp(fam.activity + static_cast<int32_t>(rng.Uniform(17)) - 8, 0, 100);
          // Memory climbs to the run's peak in its first minutes and stays near it.
          const MemoryMiB mem = std::min<MemoryMiB>(run_peak, run_peak * s / 300) - static_cast<MemoryMiB>(rng.Uniform(200));
          const int32_t watts = 80 + util * 6;
          energy_counter += watts * 1000;
          readings.push_back({.index = g, .utilization_pct = util, .memory_used = std::max<MemoryMiB>(0, mem),
                              .power_w = watts, .energy_mj = energy_counter});
          fam.samples.push_back(util);
          fam.real_peak = std::max(fam.real_peak, mem);
        }
        meter.Add(readings, s * 1000);
        samples_taken += fam.gpus;
        if (s % 10 == 0 || s == seconds) {
          api::HeartbeatReport report{.node = ns.spec.name};
          for (int32_t g = 0; g < fam.gpus; ++g) report.gpus.push_back({.index = g});
          meter.Done(meter.Take(&report.gpus), true);
          api::TaskReport t{.job = id};
          t.cpu_used_us = s * 2'000'000;
          report.tasks.push_back(t);
          tracker.Fold(snap, ns, on_node, report, start + s * kMicrosPerSecond);
        }
      }
      const TimePoint end = start + seconds * kMicrosPerSecond;
      records.push_back(tracker.Close(snap, *snap.FindJob(id), "succeeded", "", end));
      ASSERT_TRUE(state.Apply(JobFinished{id, JobOutcome::kSucceeded, end}).ok());
    }
  }
  // The report over the week, and each family's recommendation.
  const TimePoint now = kWeekStart + kWeek;
  const auto report = BuildReport(records, kWeekStart, now, now, {});
  int planted_found = 0, planted = 0, false_recommendations = 0;
  for (const Family& fam : families) {
    UsageRecord probe;
    probe.user = fam.user;
    probe.name = fam.name;
    const RightSize shape = FamilyRecommendation(records, probe, now, {});
    std::vector<int32_t> sorted = fam.samples;
    std::sort(sorted.begin(), sorted.end());
    const int32_t real_p90 = sorted[sorted.size() * 9 / 10];
    // Does the shape hold what the family really did? Memory: the real peak
    // of one GPU (folded, with fewer whole GPUs); compute: the real p90 of
    // all its GPUs.
    int64_t compute = 0;  // in % of one GPU
    MemoryMiB memory = 0;
    if (!shape.fit_mig.empty()) {
      compute = 100 * MigProfileCompute(shape.fit_mig) / kMigComputeSlices;
      memory = shape.fit_memory;
    } else if (shape.fit_milli > 0) {
      compute = shape.fit_milli / 10;
      memory = shape.fit_memory;
    } else if (shape.fit_gpus > 0) {
      compute = 100 * shape.fit_gpus;
      memory = shape.fit_memory * shape.fit_gpus;
    }
    const bool fits = shape.recommended && compute >= int64_t{real_p90} * fam.gpus && memory >= fam.real_peak * fam.gpus;
    if (fam.planted) {
      ++planted;
      if (fits) ++planted_found;
      else if (shape.recommended) ++false_recommendations;
    } else if (shape.recommended) {
      ++false_recommendations;
    }
    if (fam.planted && !fits) ADD_FAILURE() << fam.name << " (" << fam.gpus << " GPUs, " << fam.activity << "%, real p90 " << real_p90 << "%, peak " << fam.real_peak << " MiB): " << shape.summary;
    if (!fam.planted && shape.recommended) ADD_FAILURE() << "control " << fam.name << ": " << shape.summary;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  std::printf("simulated week: %zu jobs, %zu families, %lld GPU samples at 1 Hz, %.1f s; planted found %d/%d (%.1f%%), "
              "false recommendations %d/%zu (%.1f%%); report: %.1f GPU-hours held, %.1f used, %.1f oversized, %.1f kWh\n",
              records.size(), families.size(), static_cast<long long>(samples_taken), seconds, planted_found, planted,
              100.0 * planted_found / planted, false_recommendations, families.size(),
              100.0 * false_recommendations / families.size(), report["total"]["gpu_hours"].get<double>(),
              report["total"]["gpu_hours_used"].get<double>(), report["total"]["gpu_hours_oversized"].get<double>(),
              report["total"]["energy_kwh"].get<double>());
  EXPECT_GE(planted_found * 100, planted * 95);
  EXPECT_LE(false_recommendations * 100, static_cast<int>(families.size()) * 2);
  EXPECT_EQ(records.size(), 1000u);
  EXPECT_GT(report["total"]["gpu_hours_oversized"].get<double>(), 0.0);
}

}  // namespace
}  // namespace rota::server
