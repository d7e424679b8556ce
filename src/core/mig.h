// MIG geometry: the GPU instance profiles each MIG-capable GPU offers and the
// placement slots where each may start, so only layouts the hardware accepts
// are ever planned.
//
// A MIG GPU has 8 memory slots (and 7 compute slices). A profile occupies
// `slots` consecutive slots from one of its valid starts, as NVIDIA's
// `nvidia-smi mig -lgipp` lists them; a layout is a set of instances whose
// slots do not overlap. Layouts travel as text: "3g.40gb@0,2g.20gb@4,1g.10gb@6"
// (profile@start, ordered by start). Parsing also takes entries without a
// start ("3g.40gb,2g.20gb"): biggest first, each at its first free start.
//
// Example:
//   const MigGeometry* geo = MigGeometryFor("A100", 80 * 1024);
//   ROTA_ASSIGN_OR_RETURN(MigLayout layout, ParseMigLayout(*geo, "3g.40gb,3g.40gb"));
//   FormatMigLayout(*geo, layout);  // "3g.40gb@0,3g.40gb@4"
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/quantity.h"
#include "base/status.h"

namespace rota {

inline constexpr int32_t kMigSlots = 8;
inline constexpr int32_t kMigComputeSlices = 7;

struct MigProfile {
  std::string_view name;  // "1g.10gb"
  int8_t compute = 0;     // compute slices (of 7)
  int8_t slots = 0;       // memory slots (of 8)
  uint8_t starts = 0;     // bit s = the profile may start at slot s
  MemoryMiB memory = 0;
};

struct MigGeometry {
  std::string_view name;  // "A100-80GB"
  std::span<const MigProfile> profiles;
  // -1 if the profile is not offered by this GPU.
  int32_t ProfileIndex(std::string_view profile) const;
};

// The geometry of a GPU model (matched by name: A100, H100, H200; the memory
// size tells A100 40GB from 80GB), or null if rota knows no MIG layouts for it.
const MigGeometry* MigGeometryFor(std::string_view gpu_model, MemoryMiB gpu_memory);

struct MigInstance {
  int8_t profile = -1;  // index into MigGeometry::profiles
  int8_t start = 0;     // first memory slot
  friend bool operator==(const MigInstance&, const MigInstance&) = default;
};
using MigLayout = std::vector<MigInstance>;

// The memory slots an instance covers (bit s = slot s).
uint8_t MigSlotMask(const MigGeometry& geo, const MigInstance& inst);
// The slots a layout covers.
uint8_t MigLayoutSlots(const MigGeometry& geo, const MigLayout& layout);
// The first start at which `profile` fits next to `occupied` slots, or -1.
int32_t MigFirstFreeStart(const MigGeometry& geo, int32_t profile, uint8_t occupied);

// Valid starts, no overlap, at most 7 compute slices.
Status ValidateMigLayout(const MigGeometry& geo, const MigLayout& layout);
StatusOr<MigLayout> ParseMigLayout(const MigGeometry& geo, std::string_view text);
std::string FormatMigLayout(const MigGeometry& geo, const MigLayout& layout);

// "2g.20gb" -> 2 (compute slices); 0 if the name is not of the form <N>g.<M>gb.
int32_t MigProfileCompute(std::string_view name);

}  // namespace rota
