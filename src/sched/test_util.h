// Helpers for engine tests: a cluster from a config, jobs, one cycle.
#pragma once

#include <gtest/gtest.h>

#include "core/cluster_config.h"
#include "sched/engine.h"

namespace rota::sched::testing {

inline ClusterState MakeCluster(const ClusterConfig& config) {
  ClusterState state(config.topology);
  auto nodes = ExpandNodes(config);
  EXPECT_TRUE(nodes.ok()) << nodes.status().ToString();
  for (auto& n : *nodes) EXPECT_TRUE(state.Apply(NodeAdded{n}).ok());
  for (const auto& d : config.drained) EXPECT_TRUE(state.Apply(NodeDrainChanged{d, true}).ok());
  return state;
}

inline JobSpec GpuJob(std::string name, int32_t replicas, int32_t gpus) {
  JobSpec s;
  s.name = std::move(name);
  s.tasks.push_back({.name = "worker", .replicas = replicas, .gpus = gpus});
  return s;
}

inline NodeGroupConfig Group(std::string name, int32_t count, int32_t gpus, std::string model = "H100") {
  return {.name = std::move(name), .count = count, .gpus = gpus, .gpu_model = std::move(model), .cpu = 128000,
          .memory = 1024 * 1024};
}

// A scheduler for `config` (its profile, queues and classes) with `options`.
inline std::unique_ptr<Scheduler> MakeScheduler(const ClusterConfig& config, const EngineOptions& options = {}) {
  auto s = Scheduler::Create(config, options);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

// Submits `spec` as job `id` and binds it whole: replica r on node `nodes[r]`
// with GPU mask `mask`, started at `started`.
inline void StartJob(ClusterState& st, uint64_t id, const JobSpec& spec, const std::vector<uint32_t>& nodes,
                     uint64_t mask, TimePoint started) {
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(id), spec, started - 1}).ok());
  std::vector<ReplicaPlacement> placement;
  for (uint32_t r = 0; r < nodes.size(); ++r) placement.push_back({0, r, NodeId(nodes[r]), mask});
  ASSERT_TRUE(st.Apply(JobBound{JobId(id), placement, started}).ok());
}

inline constexpr Duration kMinute = 60 * kMicrosPerSecond;

// `count` nodes of `gpus` H100s each ("n-0", "n-1", ...).
inline ClusterConfig Nodes(int32_t count, int32_t gpus = 8) {
  ClusterConfig c;
  c.node_groups.push_back(Group("n", count, gpus));
  return c;
}

}  // namespace rota::sched::testing
