#include "agent/meter.h"

#include <gtest/gtest.h>

namespace rota::agent {
namespace {

// A scripted GPU: each second it draws `watts`; its total-energy counter
// (mJ) is reset to zero once, at second 6, as a driver reload would.
struct ScriptedGpu {
  int64_t counter = 5'000'000'000;
  int64_t true_mj = 0;
  void Second(int s, int32_t watts) {
    true_mj += int64_t{watts} * 1000;
    counter = s == 6 ? int64_t{watts} * 1000 : counter + int64_t{watts} * 1000;
  }
};

TEST(GpuMeter, EnergyFollowsTheCounterAcrossAReset) {
  GpuMeter meter;
  ScriptedGpu gpu;
  meter.Add({{.index = 0, .utilization_pct = 90, .memory_used = 100, .energy_mj = gpu.counter}}, 0);
  for (int s = 1; s <= 12; ++s) {
    gpu.Second(s, 200 + 10 * s);
    meter.Add({{.index = 0, .utilization_pct = s % 2 ? 90 : 10, .memory_used = 100 * s, .energy_mj = gpu.counter}},
              s * 1000);
  }
  std::vector<api::GpuTelemetry> report(1);
  meter.Take(&report);
  EXPECT_EQ(report[0].samples, 13);
  // Within 1 J of the script: exactly, as the reset fell on a sample.
  EXPECT_NEAR(report[0].energy_mj, gpu.true_mj, 1000);
  EXPECT_EQ(report[0].energy_mj, gpu.true_mj);
  EXPECT_EQ(report[0].memory_peak, 1200);
  ASSERT_EQ(report[0].activity.size(), 19u);  // up to the 90% bucket
  EXPECT_EQ(report[0].activity[2], 6);         // 10%
  EXPECT_EQ(report[0].activity[18], 7);        // 90% (the first sample too)
  EXPECT_EQ(report[0].activity_sum, 6 * 10 + 7 * 90);
  EXPECT_EQ(report[0].pcie_rx_kbps, -1);
}

TEST(GpuMeter, AReportThatFailedIsSentAgainWithTheNextSamples) {
  GpuMeter meter;
  meter.Add({{.index = 0, .utilization_pct = 50, .energy_mj = 1000}}, 0);
  meter.Add({{.index = 0, .utilization_pct = 50, .energy_mj = 6000}}, 1000);
  std::vector<api::GpuTelemetry> first(1);
  const uint64_t failed = meter.Take(&first);
  EXPECT_EQ(first[0].energy_mj, 5000);
  // A second report while the first is in flight carries only what is new.
  meter.Add({{.index = 0, .utilization_pct = 50, .energy_mj = 8000}}, 2000);
  std::vector<api::GpuTelemetry> beside(1);
  const uint64_t delivered = meter.Take(&beside);
  EXPECT_EQ(beside[0].samples, 1);
  EXPECT_EQ(beside[0].energy_mj, 2000);
  meter.Done(delivered, true);
  // The first did not reach the server: the next window holds its samples.
  meter.Done(failed, false);
  meter.Add({{.index = 0, .utilization_pct = 50, .energy_mj = 9000}}, 3000);
  std::vector<api::GpuTelemetry> second(1);
  meter.Done(meter.Take(&second), true);
  EXPECT_EQ(second[0].samples, 3);
  EXPECT_EQ(second[0].energy_mj, 6000);
  std::vector<api::GpuTelemetry> third(1);
  meter.Take(&third);
  EXPECT_EQ(third[0].samples, 0);  // nothing new: no window
}

TEST(GpuMeter, WithoutACounterPowerIsIntegrated) {
  GpuMeter meter;
  meter.Add({{.index = 1, .utilization_pct = -1, .power_w = 300}}, 0);
  meter.Add({{.index = 1, .utilization_pct = -1, .power_w = 300}}, 1000);
  meter.Add({{.index = 1, .utilization_pct = -1, .power_w = 100, .pcie_rx_kbps = 10, .pcie_tx_kbps = 4}}, 1500);
  std::vector<api::GpuTelemetry> report(2);
  report[0].index = 0;
  report[1].index = 1;
  meter.Take(&report);
  EXPECT_EQ(report[0].samples, 0);
  EXPECT_EQ(report[1].samples, 3);
  EXPECT_EQ(report[1].energy_mj, 300 * 1000 + 100 * 500);
  EXPECT_TRUE(report[1].activity.empty());  // MIG mode: NVML knows no utilisation
  EXPECT_EQ(report[1].pcie_rx_kbps, 10);
  EXPECT_EQ(report[1].pcie_tx_kbps, 4);
}

int tag = 0;
unsigned long long fake_energy = 0;

TEST(GpuMeter, ReadsEnergyAndPcieThroughNvml) {
  NvmlApi n;
  n.ok = true;
  n.handle = +[](unsigned int i, NvmlApi::Device* d) { *d = &tag; return i == 0 ? 0 : 2; };
  n.memory = +[](NvmlApi::Device, NvmlApi::Memory* m) { *m = {80ULL << 30, 70ULL << 30, 10ULL << 30}; return 0; };
  n.utilization = +[](NvmlApi::Device, NvmlApi::Utilization* u) { *u = {12, 3}; return 0; };
  n.power = +[](NvmlApi::Device, unsigned int* mw) { *mw = 250'500; return 0; };
  n.energy = +[](NvmlApi::Device, unsigned long long* mj) { *mj = fake_energy; return 0; };
  n.pcie_throughput = +[](NvmlApi::Device, int counter, unsigned int* kbps) { *kbps = counter == 1 ? 900 : 100; return 0; };
  Inventory inv;
  inv.gpus = 1;
  inv.simulated = false;
  fake_energy = 77'000;
  auto r = ReadMeters(n, inv, /*pcie=*/true);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].utilization_pct, 12);
  EXPECT_EQ(r[0].memory_used, 10 * 1024);
  EXPECT_EQ(r[0].power_w, 250);
  EXPECT_EQ(r[0].energy_mj, 77'000);
  EXPECT_EQ(r[0].pcie_rx_kbps, 900);
  EXPECT_EQ(r[0].pcie_tx_kbps, 100);
  EXPECT_EQ(ReadMeters(n, inv, /*pcie=*/false)[0].pcie_rx_kbps, -1);
}

// A fake GPM: a metric's value is the number of the sample it ends on, so
// the test sees which pair of samples NVML was given.
int gpm_samples_taken = 0, gpm_frees = 0;
int sample_slots[2];
bool gpm_supported = true;

NvmlApi GpmNvml() {
  NvmlApi n;
  n.ok = true;
  n.handle = +[](unsigned int i, NvmlApi::Device* d) { *d = &tag; return i == 0 ? 0 : 2; };
  n.memory = +[](NvmlApi::Device, NvmlApi::Memory* m) { *m = {80ULL << 30, 70ULL << 30, 10ULL << 30}; return 0; };
  n.gpm_query_support = +[](NvmlApi::Device, NvmlApi::GpmSupport* s) {
    if (s->version != NvmlApi::kGpmVersion) return 2;  // NVML_ERROR_INVALID_ARGUMENT
    s->is_supported_device = gpm_supported ? 1 : 0;
    return 0;
  };
  n.gpm_sample_alloc = +[](NvmlApi::GpmSample* s) {
    static int next = 0;
    *s = &sample_slots[next++ % 2];
    return 0;
  };
  n.gpm_sample_free = +[](NvmlApi::GpmSample) { return ++gpm_frees, 0; };
  n.gpm_sample_get = +[](NvmlApi::Device, NvmlApi::GpmSample s) {
    *static_cast<int*>(s) = ++gpm_samples_taken;
    return 0;
  };
  n.gpm_metrics_get = +[](NvmlApi::GpmMetricsGet* g) {
    if (g->version != NvmlApi::kGpmVersion || g->num_metrics > NvmlApi::kGpmMetrics) return 2;
    const int a = *static_cast<int*>(g->sample1), b = *static_cast<int*>(g->sample2);
    if (b != a + 1) return 2;  // not consecutive samples
    for (unsigned int k = 0; k < g->num_metrics; ++k) {
      NvmlApi::GpmMetric& m = g->metrics[k];
      m.nvml_return = m.metric_id == NvmlApi::kGpmDramBwUtil ? 3 : 0;  // DRAM: not supported
      m.value = m.metric_id == NvmlApi::kGpmSmUtil ? 10.0 * b : m.metric_id == NvmlApi::kGpmSmOccupancy ? 33.4 : 61.6;
    }
    return 0;
  };
  return n;
}

TEST(GpmSampler, MetricsComeFromConsecutiveSamplesAndReachTheWindow) {
  gpm_supported = true;
  gpm_samples_taken = 0;
  gpm_frees = 0;
  const NvmlApi n = GpmNvml();
  Inventory inv;
  inv.gpus = 1;
  inv.simulated = false;
  GpuMeter meter;
  {
    GpmSampler gpm;
    EXPECT_EQ(gpm.Status(), "not read yet");
    auto first = ReadMeters(n, inv, false, &gpm);
    EXPECT_EQ(first[0].sm_active_pct, -1);  // one sample: no metric yet
    meter.Add(first, 0);
    for (int s = 1; s <= 3; ++s) {
      auto r = ReadMeters(n, inv, false, &gpm);
      EXPECT_EQ(r[0].sm_active_pct, 10 * (s + 1)) << s;  // samples s and s + 1
      EXPECT_EQ(r[0].sm_occupancy_pct, 33);
      EXPECT_EQ(r[0].tensor_active_pct, 62);
      EXPECT_EQ(r[0].dram_active_pct, -1);  // NVML refused that one
      meter.Add(r, s * 1000);
    }
    EXPECT_EQ(gpm.Status(), "on 1 of 1 GPUs");
  }
  EXPECT_EQ(gpm_frees, 2);  // both samples freed
  std::vector<api::GpuTelemetry> report(1);
  meter.Take(&report);
  EXPECT_EQ(report[0].samples, 4);
  EXPECT_EQ(report[0].sm_active_pct, 30);  // the mean of the readings that had it: 20, 30, 40
  EXPECT_EQ(report[0].tensor_active_pct, 62);
}

TEST(GpmSampler, AGpuOrDriverWithoutGpmSaysSo) {
  Inventory inv;
  inv.gpus = 1;
  inv.simulated = false;
  gpm_supported = false;
  NvmlApi n = GpmNvml();
  GpmSampler before_hopper;
  ReadMeters(n, inv, false, &before_hopper);
  EXPECT_EQ(ReadMeters(n, inv, false, &before_hopper)[0].sm_active_pct, -1);
  EXPECT_EQ(before_hopper.Status(), "absent: GPU 0 has no GPM (before Hopper)");
  n.gpm_metrics_get = nullptr;
  GpmSampler old_driver;
  ReadMeters(n, inv, false, &old_driver);
  EXPECT_EQ(old_driver.Status(), "absent: the driver's NVML has no GPM (R520 or later has it)");
  gpm_supported = true;
}

}  // namespace
}  // namespace rota::agent
