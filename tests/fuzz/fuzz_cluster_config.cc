// Fuzz target: cluster configuration files.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/yaml_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = rota::api::ParseClusterConfig(text, "fuzz");
  if (config.ok()) {
    // Accepted configs expand (bounded, so a fuzzer's huge counts stay cheap).
    int64_t nodes = 0;
    for (const auto& g : config->node_groups) nodes += g.count;
    if (nodes <= 10000 && !rota::ExpandNodes(*config).ok()) __builtin_trap();
  }
  return 0;
}
