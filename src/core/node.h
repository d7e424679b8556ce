// NodeSpec: one machine as declared (by the cluster config or, later, by its
// agent). GPUs on a node are indexed 0..gpus-1 and share one model and memory
// size; NVLink islands split them into equal contiguous groups.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/ids.h"
#include "base/quantity.h"
#include "core/job.h"

namespace rota {

// Stable id of a node: its order of addition to the cluster. Never reused.
using NodeId = StrongId<struct NodeTag, uint32_t>;

inline constexpr int32_t kMaxGpusPerNode = 64;

struct NodeSpec {
  std::string name;
  std::string gpu_model;  // empty for a CPU-only node
  int32_t gpus = 0;
  MemoryMiB gpu_memory = 0;  // per GPU
  int32_t nvlink_islands = 1;
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  // Includes the built-in labels hostname, gpu_model, rack and spine.
  Labels labels;
  // GPUs in MIG mode: index -> its MIG layout as registered ("3g.40gb@0,..."; see
  // core/mig.h; "" = MIG on, no instances yet). A MIG GPU is never handed out
  // whole or as a fraction, only instance by instance.
  std::map<int32_t, std::string> mig;
  // The layouts are the driver's, read through NVML: rota binds their
  // instances but never re-partitions these GPUs.
  bool mig_fixed = false;
};

// GPU indices of `island` on a node with `gpus` GPUs in `islands` islands.
uint64_t IslandMask(int32_t gpus, int32_t islands, int32_t island);

Status ValidateNodeSpec(const NodeSpec& spec);

}  // namespace rota
