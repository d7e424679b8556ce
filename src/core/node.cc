#include "core/node.h"

#include "core/mig.h"

namespace rota {

uint64_t IslandMask(int32_t gpus, int32_t islands, int32_t island) {
  const int32_t per = gpus / islands;
  const uint64_t ones = per >= 64 ? ~0ULL : ((1ULL << per) - 1);
  return ones << (per * island);
}

Status ValidateNodeSpec(const NodeSpec& spec) {
  const std::string p = "node " + spec.name;
  if (spec.name.empty()) return InvalidArgumentError("node name must not be empty");
  if (!IsValidUtf8(spec.name) || !IsValidUtf8(spec.gpu_model)) return InvalidArgumentError("node: names must be valid UTF-8");
  for (const auto& [k, v] : spec.labels) {
    if (!IsValidUtf8(k) || !IsValidUtf8(v)) return InvalidArgumentError("node " + spec.name + ": labels must be valid UTF-8");
  }
  if (spec.gpus < 0 || spec.gpus > kMaxGpusPerNode) {
    return InvalidArgumentError(p + ": gpus must be between 0 and " + std::to_string(kMaxGpusPerNode));
  }
  if (spec.nvlink_islands < 1) return InvalidArgumentError(p + ": nvlink_islands must be at least 1");
  if (spec.gpus > 0 && spec.gpus % spec.nvlink_islands != 0) {
    return InvalidArgumentError(p + ": " + std::to_string(spec.gpus) + " GPUs do not split into " +
                                std::to_string(spec.nvlink_islands) + " equal NVLink islands");
  }
  if (spec.gpus > 0 && spec.gpu_model.empty()) return InvalidArgumentError(p + ": gpu_model is required when gpus > 0");
  if (spec.cpu < 0 || spec.memory < 0 || spec.gpu_memory < 0) {
    return InvalidArgumentError(p + ": cpu, memory and gpu_memory must not be negative");
  }
  if (spec.mig_fixed && spec.mig.empty()) return InvalidArgumentError(p + ": mig_fixed: no GPU is in MIG mode");
  if (!spec.mig.empty()) {
    const MigGeometry* geo = MigGeometryFor(spec.gpu_model, spec.gpu_memory);
    if (geo == nullptr) {
      return InvalidArgumentError(p + ": mig: rota knows no MIG geometry for " + spec.gpu_model +
                                  " (MIG GPUs: A100 40/80GB, H100 80GB, H200 141GB)");
    }
    for (const auto& [gpu, layout] : spec.mig) {
      if (gpu < 0 || gpu >= spec.gpus) return InvalidArgumentError(p + ": mig: no GPU " + std::to_string(gpu));
      if (!IsValidUtf8(layout)) return InvalidArgumentError(p + ": mig: layouts must be valid UTF-8");
      if (auto parsed = ParseMigLayout(*geo, layout); !parsed.ok()) {
        return InvalidArgumentError(p + ": mig GPU " + std::to_string(gpu) + ": " + std::string(parsed.status().message()));
      }
    }
  }
  return Status::Ok();
}

}  // namespace rota
