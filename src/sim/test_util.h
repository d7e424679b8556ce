// Helpers for the simulator's tests: the shared traces (../shared/traces,
// beside the checkout; tests skip when it is absent), nodes and trace jobs.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/node.h"
#include "sim/trace.h"

namespace rota::sim {

inline std::string SharedTraces() {
  const char* src = std::getenv("ROTA_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/traces/";
}

inline bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

// `count` nodes n0, n1, ... of `gpus` V100s each, in one rack.
inline std::vector<NodeSpec> Nodes(int count, int gpus) {
  std::vector<NodeSpec> nodes;
  for (int i = 0; i < count; ++i) {
    NodeSpec n;
    n.name = "n" + std::to_string(i);
    n.gpu_model = "V100";
    n.gpus = gpus;
    n.cpu = 64000;
    n.memory = 262144;
    n.labels = {{"hostname", n.name}, {"gpu_model", "V100"}, {"rack", "r0"}, {"spine", "s0"}};
    nodes.push_back(n);
  }
  return nodes;
}

inline TraceJob Job(const std::string& name, int64_t submit_s, int64_t duration_s, int32_t gpus, int32_t replicas = 1) {
  TraceJob j;
  j.name = name;
  j.submit = submit_s * kMicrosPerSecond;
  j.duration = duration_s * kMicrosPerSecond;
  j.gpus = gpus;
  j.replicas = replicas;
  return j;
}

}  // namespace rota::sim
