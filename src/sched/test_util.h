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

}  // namespace rota::sched::testing
