// Test helpers shared by the tests of the layers above core.
#pragma once

#include <string>

#include "core/node.h"

namespace rota::testing {

// A node of `gpus` A100 80GB GPUs (64 CPUs, 512Gi), the MIG-capable model the tests use.
inline NodeSpec A100Node(std::string name, int32_t gpus) {
  NodeSpec n;
  n.name = std::move(name);
  n.gpus = gpus;
  n.gpu_model = "A100";
  n.gpu_memory = 80 * 1024;
  n.cpu = 64000;
  n.memory = 512 * 1024;
  return n;
}

}  // namespace rota::testing
