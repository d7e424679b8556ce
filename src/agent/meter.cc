#include "agent/meter.h"

#include <algorithm>
#include <utility>

namespace rota::agent {

GpmSampler::~GpmSampler() {
  if (nvml_ == nullptr || nvml_->gpm_sample_free == nullptr) return;
  for (auto& [index, g] : gpus_) {
    for (NvmlApi::GpmSample s : g.samples) {
      if (s != nullptr) nvml_->gpm_sample_free(s);
    }
  }
}

void GpmSampler::Read(const NvmlApi& nvml, NvmlApi::Device dev, int32_t index, MeterReading* r) {
  if (!nvml.gpm_query_support || !nvml.gpm_sample_alloc || !nvml.gpm_sample_get || !nvml.gpm_metrics_get) {
    if (absent_.empty()) absent_ = "absent: the driver's NVML has no GPM (R520 or later has it)";
    return;
  }
  auto [it, first] = gpus_.try_emplace(index);
  Gpu& g = it->second;
  if (first) {
    nvml_ = &nvml;
    NvmlApi::GpmSupport support{NvmlApi::kGpmVersion, 0};
    const int rc = nvml.gpm_query_support(dev, &support);
    g.supported = rc == 0 && support.is_supported_device != 0 && nvml.gpm_sample_alloc(&g.samples[0]) == 0 &&
                  nvml.gpm_sample_alloc(&g.samples[1]) == 0;
    if (!g.supported) {
      absent_ = "absent: GPU " + std::to_string(index) + " has no GPM (" +
                (rc == 0 ? std::string("before Hopper") : "nvmlGpmQueryDeviceSupport: error " + std::to_string(rc)) + ")";
    }
  }
  if (!g.supported) return;
  const int cur = g.last == 0 ? 1 : 0;
  if (nvml.gpm_sample_get(dev, g.samples[cur]) != 0) {
    absent_ = "absent: GPU " + std::to_string(index) + " refused a GPM sample (in MIG mode?)";
    g.last = -1;
    return;
  }
  if (g.last >= 0) {
    NvmlApi::GpmMetricsGet get{};
    get.version = NvmlApi::kGpmVersion;
    get.sample1 = g.samples[g.last];
    get.sample2 = g.samples[cur];
    const unsigned int ids[] = {NvmlApi::kGpmSmUtil, NvmlApi::kGpmSmOccupancy, NvmlApi::kGpmAnyTensorUtil,
                                NvmlApi::kGpmDramBwUtil};
    get.num_metrics = 4;
    for (unsigned int k = 0; k < get.num_metrics; ++k) get.metrics[k].metric_id = ids[k];
    if (nvml.gpm_metrics_get(&get) == 0) {
      int32_t* out[] = {&r->sm_active_pct, &r->sm_occupancy_pct, &r->tensor_active_pct, &r->dram_active_pct};
      for (unsigned int k = 0; k < get.num_metrics; ++k) {
        if (get.metrics[k].nvml_return == 0) {
          *out[k] = static_cast<int32_t>(std::clamp(get.metrics[k].value, 0.0, 100.0) + 0.5);
        }
      }
    }
  }
  g.last = cur;
}

std::string GpmSampler::Status() const {
  if (gpus_.empty() && absent_.empty()) return "not read yet";
  int on = 0;
  for (const auto& [index, g] : gpus_) on += g.supported;
  if (on == 0) return absent_;
  return "on " + std::to_string(on) + " of " + std::to_string(gpus_.size()) + " GPUs" +
         (absent_.empty() ? "" : " (" + absent_ + ")");
}

std::vector<MeterReading> ReadMeters(const NvmlApi& nvml, const Inventory& inv, bool pcie, GpmSampler* gpm) {
  std::vector<MeterReading> out;
  for (int32_t g = 0; g < inv.gpus; ++g) {
    MeterReading r;
    r.index = g;
    NvmlApi::Device dev = nullptr;
    if (nvml.handle(static_cast<unsigned int>(g), &dev) != 0) continue;
    NvmlApi::Utilization u{};
    if (nvml.utilization && nvml.utilization(dev, &u) == 0) r.utilization_pct = static_cast<int32_t>(u.gpu);
    NvmlApi::Memory m{};
    if (nvml.memory(dev, &m) == 0) r.memory_used = static_cast<MemoryMiB>(m.used >> 20);
    unsigned int mw = 0;
    if (nvml.power && nvml.power(dev, &mw) == 0) r.power_w = static_cast<int32_t>(mw / 1000);
    unsigned long long mj = 0;
    if (nvml.energy && nvml.energy(dev, &mj) == 0) r.energy_mj = static_cast<int64_t>(mj);
    unsigned int kbps = 0;
    // nvmlPcieUtilCounter_t: 0 = TX, 1 = RX (KB/s over 20 ms).
    if (pcie && nvml.pcie_throughput && nvml.pcie_throughput(dev, 1, &kbps) == 0) r.pcie_rx_kbps = static_cast<int32_t>(kbps);
    if (pcie && nvml.pcie_throughput && nvml.pcie_throughput(dev, 0, &kbps) == 0) r.pcie_tx_kbps = static_cast<int32_t>(kbps);
    if (gpm != nullptr) gpm->Read(nvml, dev, g, &r);
    out.push_back(r);
  }
  return out;
}

std::vector<MeterReading> ReadMeters(const Inventory& inv, uint64_t busy_mask, bool pcie, GpmSampler* gpm) {
  if (!inv.simulated) {
    const NvmlApi& nvml = SystemNvml();
    if (nvml.ok) return ReadMeters(nvml, inv, pcie, gpm);
  }
  std::vector<MeterReading> out;
  for (int32_t g = 0; g < inv.gpus; ++g) {
    const bool busy = (busy_mask >> g) & 1;
    out.push_back({.index = g, .utilization_pct = busy ? 100 : 0, .power_w = busy ? 300 : 60});
  }
  return out;
}

void GpuMeter::Window::Merge(const Window& w) {
  samples += w.samples;
  activity.Merge(w.activity);
  activity_sum += w.activity_sum;
  any_activity = any_activity || w.any_activity;
  memory_peak = std::max(memory_peak, w.memory_peak);
  energy_mj += w.energy_mj;
  rx_sum += w.rx_sum;
  tx_sum += w.tx_sum;
  pcie_reads += w.pcie_reads;
  sm_active += w.sm_active;
  sm_occupancy += w.sm_occupancy;
  tensor_active += w.tensor_active;
  dram_active += w.dram_active;
  gpm_reads += w.gpm_reads;
}

void GpuMeter::Add(const std::vector<MeterReading>& readings, int64_t at_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const MeterReading& r : readings) {
    Gpu& g = gpus_[r.index];
    Window& w = g.pending;
    ++w.samples;
    if (r.utilization_pct >= 0) {
      w.activity.Add(r.utilization_pct);
      w.activity_sum += std::min(r.utilization_pct, 100);
      w.any_activity = true;
    }
    w.memory_peak = std::max(w.memory_peak, r.memory_used);
    if (r.energy_mj >= 0) {
      // Lower than the last reading: the counter was reset, and counts from 0.
      if (g.last_counter >= 0) w.energy_mj += r.energy_mj >= g.last_counter ? r.energy_mj - g.last_counter : r.energy_mj;
      g.last_counter = r.energy_mj;
    } else if (g.last_at_ms >= 0 && at_ms > g.last_at_ms) {
      // No counter: the power integrated over the interval (W x ms = mJ),
      // at most 10 s of it (a sampler that stalled says nothing of the gap).
      w.energy_mj += int64_t{std::max(0, r.power_w)} * std::min<int64_t>(at_ms - g.last_at_ms, 10'000);
    }
    g.last_at_ms = at_ms;
    if (r.pcie_rx_kbps >= 0 && r.pcie_tx_kbps >= 0) {
      w.rx_sum += r.pcie_rx_kbps;
      w.tx_sum += r.pcie_tx_kbps;
      ++w.pcie_reads;
    }
    if (r.sm_active_pct >= 0) {
      w.sm_active += r.sm_active_pct;
      w.sm_occupancy += std::max(r.sm_occupancy_pct, 0);
      w.tensor_active += std::max(r.tensor_active_pct, 0);
      w.dram_active += std::max(r.dram_active_pct, 0);
      ++w.gpm_reads;
    }
  }
}

uint64_t GpuMeter::Take(std::vector<api::GpuTelemetry>* gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  for (api::GpuTelemetry& t : *gpus) {
    auto it = gpus_.find(t.index);
    if (it == gpus_.end() || it->second.pending.samples == 0) continue;
    Window& w = it->second.in_flight[id];
    w = std::exchange(it->second.pending, Window{});
    t.samples = w.samples;
    t.activity.clear();
    if (w.any_activity) {
      int last = ActivityHistogram::kBuckets;
      while (last > 0 && w.activity.counts[last - 1] == 0) --last;  // trailing empty buckets left out
      t.activity.assign(w.activity.counts.begin(), w.activity.counts.begin() + last);
      t.activity_sum = w.activity_sum;
    } else {
      t.activity_sum = -1;
    }
    t.memory_peak = w.memory_peak;
    t.energy_mj = w.energy_mj;
    t.pcie_rx_kbps = w.pcie_reads > 0 ? static_cast<int32_t>(w.rx_sum / w.pcie_reads) : -1;
    t.pcie_tx_kbps = w.pcie_reads > 0 ? static_cast<int32_t>(w.tx_sum / w.pcie_reads) : -1;
    auto mean = [&](int64_t sum) { return w.gpm_reads > 0 ? static_cast<int32_t>(sum / w.gpm_reads) : -1; };
    t.sm_active_pct = mean(w.sm_active);
    t.sm_occupancy_pct = mean(w.sm_occupancy);
    t.tensor_active_pct = mean(w.tensor_active);
    t.dram_active_pct = mean(w.dram_active);
  }
  return id;
}

void GpuMeter::Done(uint64_t id, bool delivered) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, g] : gpus_) {
    auto it = g.in_flight.find(id);
    if (it == g.in_flight.end()) continue;
    if (!delivered) g.pending.Merge(it->second);
    g.in_flight.erase(it);
  }
}

}  // namespace rota::agent
