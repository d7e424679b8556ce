// Fragmentation gradient descent (Weng et al., "Beware of Fragmentation:
// Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
// ATC'23). A node's fragmentation, for a typical mix of tasks, is the idle
// GPU capacity (milli-GPU) those tasks could not use there, weighted by how
// common each task is; FGD places a task where that measure grows least.
//
// Used by the engine's sharing path (GPU fractions, profile
// `share_placement: fgd`, the default) and by the simulator's openb
// experiment (src/sim/openb.cc), which replays the published artifact
// bit-exactly: keep the accumulation order.
#pragma once

#include <cstdint>
#include <vector>

namespace rota::sched {

// One kind of task in the typical mix.
struct TypicalTask {
  int64_t cpu = 0;     // milli-CPU
  int32_t milli = 0;   // per GPU: 1..1000; 0 = CPU only
  int32_t num = 1;     // GPUs (1 for a fraction)
  std::vector<bool> access;  // per interned GPU model: may it run there
  double f = 0;        // popularity (the mix sums to 1)
};

// FGD's fragmentation of a node (frag.go, NodeGpuShareFragAmount): `left`
// holds each GPU's idle milli-GPU (0 for a GPU that is not available).
double NodeFragmentation(const std::vector<TypicalTask>& typical, int64_t cpu_left, const int32_t* left, int32_t gpus,
                         int16_t model);

}  // namespace rota::sched
