// GPU history: each GPU's use over time at a coarse resolution, kept apart
// from jobs (a GPU that sat idle for a week is in it as much as a busy one).
// A point is one step of one GPU: its mean utilisation, its highest memory
// used and its energy over the step, from the agents' 1 Hz samples. Points
// travel in blocks: an hour of minutes (step 60 s) or a day of hours (step
// 3600 s), so a week of 10,000 GPUs is 1.7 million minute blocks, not 100
// million rows. A block is written again as it fills.
//
// Integers throughout: percent, MiB, joules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/quantity.h"
#include "base/status.h"

namespace rota {

struct GpuPoint {
  int32_t samples = 0;       // 1 Hz samples behind it (0 = no report in this step)
  int32_t activity = -1;     // their mean utilisation, % (-1 = unknown: MIG mode)
  MemoryMiB memory_peak = 0;
  int64_t energy_j = 0;
  bool operator==(const GpuPoint&) const = default;
};

struct GpuHistoryBlock {
  static constexpr int32_t kMinute = 60, kHour = 3600;
  std::string node;
  int32_t gpu = 0;
  int32_t step_s = kMinute;
  TimePoint start = 0;           // its first step's start, aligned to span_s
  std::vector<GpuPoint> points;  // span_s / step_s of them

  int32_t span_s() const { return step_s == kMinute ? 3600 : 86400; }
  size_t size() const { return static_cast<size_t>(span_s() / step_s); }
  bool operator==(const GpuHistoryBlock&) const = default;
};

// The start of the block of `step_s` holding `t`.
TimePoint BlockStart(int32_t step_s, TimePoint t);

// The points merged into one of a coarser step: samples added, activity
// weighted by samples, the highest memory, energy added.
GpuPoint Rollup(const std::vector<GpuPoint>& points);

// A block's points as bytes (varints; memory and energy as deltas from the
// previous point; a run of equal points once): about 6 bytes a point.
std::string EncodeGpuPoints(const std::vector<GpuPoint>& points);
// The `count` points of `bytes`; DataLoss naming what is wrong.
StatusOr<std::vector<GpuPoint>> DecodeGpuPoints(std::string_view bytes, size_t count);

}  // namespace rota
