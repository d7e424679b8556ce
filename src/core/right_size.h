// Right-sizing to a GPU shape: from the usage records of a job family (a
// job's own attempts and its siblings': the same user and name, or the same
// array), the smallest shape that would have held what it used, VPA-like:
// the GPU activity p90 and the GPU memory peak, each with a margin, from
// records weighted by a half-life (a month-old attempt counts for little).
//
// Shapes, smallest first: a MIG instance of the node's GPU model, a fraction
// of one GPU with a memory bound, fewer whole GPUs per replica. CPU and
// memory limits follow the observed CPU use (raised where it was throttled)
// and the host memory peak. Only a shape smaller than the one held is a
// recommendation; a family with too few measured seconds gets none.
//
// Example:
//   RightSize r = RecommendShape(records, now, {});
//   if (r.recommended) std::cout << r.summary;
//   // "peak 9.8 GiB of 80 GiB, GPU activity p90 15%: fits gpu: {mig: 1g.18gb}"
#pragma once

#include <string>
#include <vector>

#include "core/usage_record.h"

namespace rota {

struct RightSizeOptions {
  int32_t margin_pct = 15;                        // added to the p90 and the peaks (the VPA's 15%)
  Duration half_life = 24 * 3600 * kMicrosPerSecond;  // a record's weight halves with each
  int64_t min_measured_s = 300;                   // measured seconds before anything is said
};

struct RightSize {
  bool recommended = false;     // a smaller GPU shape fits
  std::string shape;            // the job-spec form: "gpu: {mig: 1g.18gb}", "gpus: 2", "gpu: {fraction: 0.25, memory: 12Gi}"
  std::string summary;          // the numbers behind it, and the shape
  // The measures it decided on (weighted over the family).
  int32_t activity_p90 = -1;    // per GPU, %
  MemoryMiB gpu_memory_peak = 0;
  MemoryMiB gpu_memory = 0;     // per GPU held
  int32_t gpus_per_replica = 0; // held (whole GPUs)
  // Suggested shape (for checks): whole GPUs per replica, or a share.
  int32_t fit_gpus = 0;
  int32_t fit_milli = 0;
  std::string fit_mig;
  MemoryMiB fit_memory = 0;     // the share's GPU memory bound, or the GPU memory the shape offers
  // CPU and memory limits per replica from what was used (0 = nothing measured).
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
};

// `family` holds the records of one job family, any order. The most recent
// record's allocation is the shape held.
RightSize RecommendShape(const std::vector<const UsageRecord*>& family, TimePoint now, const RightSizeOptions& options);

}  // namespace rota
