// The openb experiment (Weng et al., "Beware of Fragmentation", ATC'23):
// GPU-sharing pods placed one by one on a fixed cluster with no departures,
// to compare placement policies by how much of the GPU capacity they manage
// to allocate as the arrived demand grows to 130% of it.
//
// Pods ask for CPU, memory and either whole GPUs or a share of one GPU
// (milli-GPU); a GPU's remaining milli-GPU is tracked per GPU. Placements:
//   fgd         fragmentation gradient descent: the node and GPU that least
//               increase the node's expected fragmentation for the typical
//               pod mix (score = sigmoid of the decrease, 0..100)
//   bestfit     least CPU and GPU left after placing
//   packing     GPU packing: partly used GPUs, then used nodes, then empty ones
//   clustering  nodes already holding pods of the same GPU shape
//   dotprod     smallest dot product of free and requested resources
//   random      any feasible node
//   rota        rota's default: FGD's score, with ties (common: the score is
//               a sigmoid rounded to 0..100) going to the best fit, node and
//               GPU, instead of to the node order
// The scores and GPU choices follow the FGD artifact's simulator
// (hkust-adsl/kubernetes-scheduler-simulator); ties go to the first node in
// the run's node order (a seeded permutation, as the artifact does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "sim/trace.h"

namespace rota::sim {

struct OpenbOptions {
  std::string placement = "rota";
  uint64_t seed = 42;
  double inflate = 1.3;  // arrive until this multiple of the GPU capacity
  // Given instead of shuffling and inflating (e.g. a reference run's order):
  // indices into the pod list.
  std::vector<uint32_t> arrival_order;
  // Given instead of the seeded permutation: the tie-break rank of each node.
  std::vector<uint32_t> node_rank;
  // Reuse a node's score for a pod shape until the node changes (off: score
  // every feasible node for every pod, the baseline in bench/sim_bench).
  bool cache_scores = true;
};

struct OpenbStep {
  int32_t node = -1;  // index into the node list; -1 = failed
  int64_t used_milli = 0;
  int64_t arrived_milli = 0;
  double frag_milli = 0;  // FGD's fragmentation of the whole cluster after this step
};

struct OpenbResult {
  std::vector<uint32_t> arrivals;  // pod indices in arrival order
  std::vector<OpenbStep> steps;
  // GPU allocation % (and fragmentation % of capacity) when arrived demand
  // reached k% of capacity, k = 0..130, aggregated as the artifact does.
  std::vector<double> alloc_pct_by_arrived;
  std::vector<double> frag_pct_by_arrived;
  int64_t failed = 0;
  int64_t capacity_milli = 0;
  double wall_s = 0;
};

const std::vector<std::string>& OpenbPlacements();

// The typical pods: the most common (cpu, milli-GPU, GPUs, model) shapes of
// `pods` covering 95% of them, with their weights (summing to 1).
struct TypicalPod {
  int64_t cpu = 0;
  int32_t milli = 0;
  int32_t gpus = 0;
  std::string models;  // '|'-joined; empty = any
  double weight = 0;
  int64_t count = 0;
};
std::vector<TypicalPod> TypicalPods(const std::vector<TraceJob>& pods, double coverage = 0.95);

StatusOr<OpenbResult> RunOpenb(const std::vector<TraceNode>& nodes, const std::vector<TraceJob>& pods,
                               const OpenbOptions& options);

}  // namespace rota::sim
