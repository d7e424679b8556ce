#include "core/right_size.h"

#include <algorithm>
#include <cmath>

#include "core/mig.h"

namespace rota {

namespace {

// "9.8 GiB" (one decimal, from integers).
std::string Gib(MemoryMiB mib) {
  const int64_t tenths = (mib * 10 + 512) / 1024;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " GiB";
}

MemoryMiB WithMargin(MemoryMiB v, int32_t margin_pct) { return (v * (100 + margin_pct) + 99) / 100; }

// A record's weight: 1024 halved for each half-life of its age.
int64_t Weight(const UsageRecord& r, TimePoint now, Duration half_life) {
  const double age = static_cast<double>(std::max<TimePoint>(0, now - r.ended_at));
  const double w = 1024.0 * std::exp2(-age / static_cast<double>(std::max<Duration>(1, half_life)));
  return std::max<int64_t>(1, static_cast<int64_t>(w));
}

}  // namespace

RightSize RecommendShape(const std::vector<const UsageRecord*>& family, TimePoint now, const RightSizeOptions& options) {
  RightSize out;
  const UsageRecord* latest = nullptr;
  for (const UsageRecord* r : family) {
    if (latest == nullptr || r->ended_at > latest->ended_at) latest = r;
  }
  // Only whole GPUs are measured (a share's telemetry is its whole GPU's).
  if (latest == nullptr) return out;
  if (latest->gpus <= 0 || latest->replicas <= 0 || latest->gpu_memory <= 0) {
    out.summary = "holds no whole GPU: its GPUs are not measured apart from the others sharing them";
    return out;
  }
  const int32_t held = std::max(1, latest->gpus / latest->replicas);
  out.gpus_per_replica = held;
  out.gpu_memory = latest->gpu_memory;

  ActivityHistogram weighted;
  int64_t measured_s = 0;
  int64_t cpu_us = 0, cpu_s = 0, throttled_us = 0;
  MilliCpu cpu_asked = 0;
  MemoryMiB host_peak = 0;
  for (const UsageRecord* r : family) {
    // The same shape only: another model's or count's samples say little.
    if (!r->measured() || r->gpu_model != latest->gpu_model || r->gpus != latest->gpus) continue;
    const int64_t w = Weight(*r, now, options.half_life);
    for (int b = 0; b < ActivityHistogram::kBuckets; ++b) weighted.counts[b] += r->activity.counts[b] * w;
    measured_s += r->activity.total() / std::max(1, r->gpus);
    // Peaks from the last three half-lives (older ones only if none is newer).
    if (now - r->ended_at <= 3 * options.half_life || r == latest) {
      out.gpu_memory_peak = std::max(out.gpu_memory_peak, r->gpu_memory_peak);
      host_peak = std::max(host_peak, r->memory_peak);
    }
    cpu_us += r->cpu_used_us;
    cpu_s += r->seconds();
    throttled_us += r->cpu_throttled_us;
    cpu_asked = r->cpu / std::max(1, r->replicas);
  }
  if (measured_s < options.min_measured_s) {
    out.summary = "measured for " + FormatSpan(measured_s * kMicrosPerSecond) + " of the " +
                  FormatSpan(options.min_measured_s * kMicrosPerSecond) + " a recommendation needs";
    return out;
  }
  out.activity_p90 = weighted.Percentile(90);

  // CPU and memory limits per replica, from what was used.
  if (cpu_s > 0 && cpu_us > 0) {
    const MilliCpu mean = cpu_us / cpu_s / 1000 / std::max(1, latest->replicas);
    MilliCpu cpu = (WithMargin(mean, options.margin_pct) + 99) / 100 * 100;
    // Throttled a tenth of the time: the limit held it back; ask for more.
    if (throttled_us * 10 > cpu_s * kMicrosPerSecond && cpu_asked > 0) cpu = std::max(cpu, cpu_asked * 3 / 2);
    out.cpu = std::max<MilliCpu>(100, cpu);
  }
  if (host_peak > 0) out.memory = (WithMargin(host_peak, options.margin_pct) + 255) / 256 * 256;

  // What one replica needs: compute in percent of one GPU, memory in MiB
  // (its GPUs' peak each, were they folded onto fewer).
  const int64_t compute = (int64_t{out.activity_p90} * held * (100 + options.margin_pct) + 99) / 100;
  const MemoryMiB memory = WithMargin(out.gpu_memory_peak * held, options.margin_pct);
  const std::string numbers = "peak " + Gib(out.gpu_memory_peak) + " of " + Gib(latest->gpu_memory) +
                              (held > 1 ? " per GPU on " + std::to_string(held) + " GPUs" : "") +
                              ", GPU activity p90 " + std::to_string(out.activity_p90) + "%";
  const int64_t by_compute = std::max<int64_t>(1, (compute + 99) / 100);
  const int64_t by_memory = std::max<int64_t>(1, (memory + latest->gpu_memory - 1) / latest->gpu_memory);
  const int32_t whole = static_cast<int32_t>(std::max(by_compute, by_memory));
  if (whole == 1 && compute <= 100 && memory < latest->gpu_memory) {
    // A share of one GPU: a MIG instance where the model has them (isolated
    // memory and compute), the smallest that holds both.
    if (const MigGeometry* geo = MigGeometryFor(latest->gpu_model, latest->gpu_memory)) {
      for (const MigProfile& p : geo->profiles) {
        if (p.memory >= memory && int64_t{p.compute} * 100 >= compute * kMigComputeSlices && p.compute < kMigComputeSlices) {
          out.fit_mig = std::string(p.name);
          out.fit_memory = p.memory;
          out.shape = "gpu: {mig: " + out.fit_mig + "}";
          break;
        }
      }
    }
    // Else a fraction, in twentieths, with its memory bound in GiB: worth it
    // when at least two fit on the GPU.
    const int32_t milli = static_cast<int32_t>((compute * 10 + 49) / 50 * 50);
    const MemoryMiB bound = (memory + 1023) / 1024 * 1024;
    if (out.shape.empty() && milli <= 500 && bound * 2 <= latest->gpu_memory) {
      out.fit_milli = std::max(50, milli);
      out.fit_memory = bound;
      std::string frac = std::to_string(out.fit_milli / 1000) + "." + std::to_string(out.fit_milli % 1000 / 100) +
                         std::to_string(out.fit_milli % 100 / 10);
      while (frac.back() == '0') frac.pop_back();
      out.shape = "gpu: {fraction: " + frac + ", memory: " + FormatMemoryMiB(bound) + "}";
    }
  }
  if (out.shape.empty() && whole < held) {
    out.fit_gpus = whole;
    out.fit_memory = latest->gpu_memory;
    out.shape = "gpus: " + std::to_string(whole);
  }
  out.recommended = !out.shape.empty();
  out.summary = numbers + (out.recommended ? ": fits " + out.shape : ": the shape held fits");
  return out;
}

}  // namespace rota
