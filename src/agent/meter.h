// GpuMeter: the agent's 1 Hz samples of each GPU between two reports, folded
// into each report's window (api::GpuTelemetry's window fields): how many
// samples, their utilisation in ActivityHistogram buckets, the highest memory
// used, the energy used, and the mean PCIe throughput.
//
// Energy is read from the GPU's total-energy counter (millijoules since the
// driver loaded): the sum of the deltas between samples, where a counter
// lower than the last reading has been reset (a driver reload, a GPU reset)
// and counts from zero. A GPU without the counter integrates its power.
//
// A window is taken for one report and given back if the report did not
// reach the server (Take, then Done), so a failed heartbeat loses no energy;
// two reports in flight at once (the periodic one, and one for an exit)
// carry disjoint windows.
//
// Thread-safety: thread-safe (its own lock): the sampler thread adds, the
// heartbeat takes.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "agent/inventory.h"
#include "agent/nvml.h"
#include "core/usage_record.h"

namespace rota::agent {

// One reading of one GPU.
struct MeterReading {
  int32_t index = 0;
  int32_t utilization_pct = -1;  // -1: NVML knows none (MIG mode)
  MemoryMiB memory_used = 0;
  int32_t power_w = 0;
  int64_t energy_mj = -1;        // the total-energy counter; -1 = none
  int32_t pcie_rx_kbps = -1;     // -1 = not read this time
  int32_t pcie_tx_kbps = -1;
  // GPM (Hopper and later), percent since the last reading; -1 = none.
  int32_t sm_active_pct = -1, sm_occupancy_pct = -1, tensor_active_pct = -1, dram_active_pct = -1;
};

// GPM metrics of each GPU from its consecutive samples (one a reading, so
// a GPU's first reading only takes one). Where the driver or the GPU has
// none (before R520, before Hopper, MIG mode), Status says why.
class GpmSampler {
 public:
  GpmSampler() = default;
  GpmSampler(const GpmSampler&) = delete;
  GpmSampler& operator=(const GpmSampler&) = delete;
  ~GpmSampler();
  void Read(const NvmlApi& nvml, NvmlApi::Device dev, int32_t index, MeterReading* r);
  // "on 8 of 8 GPUs", or "absent: why"; "not read yet" before any reading.
  std::string Status() const;

 private:
  struct Gpu {
    bool supported = false;
    NvmlApi::GpmSample samples[2] = {nullptr, nullptr};
    int last = -1;  // which sample holds the previous reading
  };
  const NvmlApi* nvml_ = nullptr;  // what allocated the samples
  std::map<int32_t, Gpu> gpus_;
  std::string absent_;
};

// Reads every GPU of `inv` through `nvml` (a real driver or a test's fake).
// PCIe throughput (20 ms per read in NVML) only when `pcie` is set.
std::vector<MeterReading> ReadMeters(const NvmlApi& nvml, const Inventory& inv, bool pcie, GpmSampler* gpm = nullptr);
// The agent's readings: NVML for real GPUs; for a declared inventory,
// utilisation and power follow whether a task holds the GPU (as SampleGpus).
std::vector<MeterReading> ReadMeters(const Inventory& inv, uint64_t busy_mask, bool pcie, GpmSampler* gpm = nullptr);

class GpuMeter {
 public:
  // Folds the readings taken at `at_ms` (a steady clock, milliseconds).
  void Add(const std::vector<MeterReading>& readings, int64_t at_ms);
  // Fills the window fields of `gpus` (matched by index) with everything
  // added since the last window taken, and whatever windows came back
  // undelivered; a GPU with no samples is left without one. Returns the
  // window's id for Done.
  uint64_t Take(std::vector<api::GpuTelemetry>* gpus);
  // The report carrying window `id` reached the server (dropped), or did not
  // (its samples go into the next window).
  void Done(uint64_t id, bool delivered);

 private:
  struct Window {
    int32_t samples = 0;
    ActivityHistogram activity;
    int64_t activity_sum = 0;
    bool any_activity = false;
    MemoryMiB memory_peak = 0;
    int64_t energy_mj = 0;
    int64_t rx_sum = 0, tx_sum = 0;
    int32_t pcie_reads = 0;
    // GPM: sums of the readings that had them, and how many.
    int64_t sm_active = 0, sm_occupancy = 0, tensor_active = 0, dram_active = 0;
    int32_t gpm_reads = 0;
    void Merge(const Window& w);
  };
  struct Gpu {
    int64_t last_counter = -1;
    int64_t last_at_ms = -1;
    Window pending;  // since the last Take, and windows that came back
    std::map<uint64_t, Window> in_flight;
  };
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<int32_t, Gpu> gpus_;
};

}  // namespace rota::agent
