#include "core/mig.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>

namespace rota {

namespace {

constexpr MemoryMiB G(int gb) { return static_cast<MemoryMiB>(gb) * 1024; }
constexpr uint8_t kAnySingle = 0x7f;  // starts 0..6
constexpr uint8_t kEven = 0x55;       // 0, 2, 4, 6
constexpr uint8_t kTwoSlot = 0x15;    // 0, 2, 4
constexpr uint8_t kHalves = 0x11;     // 0, 4
constexpr uint8_t kFirst = 0x01;      // 0

// From `nvidia-smi mig -lgip` / `-lgipp` on each model (the +me media
// variants, which share their base profile's slots, are left out).
constexpr std::array<MigProfile, 6> kA100_40{{{"1g.5gb", 1, 1, kAnySingle, G(5)},
                                              {"1g.10gb", 1, 2, kEven, G(10)},
                                              {"2g.10gb", 2, 2, kTwoSlot, G(10)},
                                              {"3g.20gb", 3, 4, kHalves, G(20)},
                                              {"4g.20gb", 4, 4, kFirst, G(20)},
                                              {"7g.40gb", 7, 8, kFirst, G(40)}}};
constexpr std::array<MigProfile, 6> kA100_80{{{"1g.10gb", 1, 1, kAnySingle, G(10)},
                                              {"1g.20gb", 1, 2, kEven, G(20)},
                                              {"2g.20gb", 2, 2, kTwoSlot, G(20)},
                                              {"3g.40gb", 3, 4, kHalves, G(40)},
                                              {"4g.40gb", 4, 4, kFirst, G(40)},
                                              {"7g.80gb", 7, 8, kFirst, G(80)}}};
// H200: profiles, slots, starts and memory (MiB) as NVML reported them on an
// H200 with driver 580.159.04 (scripts/gpu-check.sh, 2026-11-30).
constexpr std::array<MigProfile, 6> kH200{{{"1g.18gb", 1, 1, kAnySingle, 16384},
                                           {"1g.35gb", 1, 2, kEven, 33280},
                                           {"2g.35gb", 2, 2, kTwoSlot, 33280},
                                           {"3g.71gb", 3, 4, kHalves, 71424},
                                           {"4g.71gb", 4, 4, kFirst, 71424},
                                           {"7g.141gb", 7, 8, kFirst, 143360}}};

const MigGeometry kGeometries[] = {
    {"A100-40GB", kA100_40},
    {"A100-80GB", kA100_80},
    {"H100-80GB", kA100_80},  // H100 80GB offers the A100 80GB profile set
    {"H200-141GB", kH200},
};

bool Contains(std::string_view hay, std::string_view needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return std::toupper(static_cast<unsigned char>(a)) == b; });
  return it != hay.end();
}

}  // namespace

int32_t MigGeometry::ProfileIndex(std::string_view profile) const {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].name == profile) return static_cast<int32_t>(i);
  }
  return -1;
}

const MigGeometry* MigGeometryFor(std::string_view gpu_model, MemoryMiB gpu_memory) {
  if (Contains(gpu_model, "A100")) return gpu_memory > 0 && gpu_memory <= G(48) ? &kGeometries[0] : &kGeometries[1];
  if (Contains(gpu_model, "H100")) return gpu_memory == 0 || gpu_memory <= G(85) ? &kGeometries[2] : nullptr;
  if (Contains(gpu_model, "H200")) return &kGeometries[3];
  return nullptr;
}

uint8_t MigSlotMask(const MigGeometry& geo, const MigInstance& inst) {
  const MigProfile& p = geo.profiles[inst.profile];
  return static_cast<uint8_t>(((1u << p.slots) - 1) << inst.start);
}

uint8_t MigLayoutSlots(const MigGeometry& geo, const MigLayout& layout) {
  uint8_t used = 0;
  for (const MigInstance& i : layout) used |= MigSlotMask(geo, i);
  return used;
}

int32_t MigFirstFreeStart(const MigGeometry& geo, int32_t profile, uint8_t occupied) {
  const MigProfile& p = geo.profiles[profile];
  for (int32_t s = 0; s < kMigSlots; ++s) {
    if (((p.starts >> s) & 1) == 0) continue;
    const uint8_t mask = static_cast<uint8_t>(((1u << p.slots) - 1) << s);
    if ((mask & occupied) == 0) return s;
  }
  return -1;
}

Status ValidateMigLayout(const MigGeometry& geo, const MigLayout& layout) {
  uint8_t used = 0;
  int32_t compute = 0;
  for (const MigInstance& i : layout) {
    if (i.profile < 0 || static_cast<size_t>(i.profile) >= geo.profiles.size()) {
      return InvalidArgumentError("unknown MIG profile index " + std::to_string(i.profile));
    }
    const MigProfile& p = geo.profiles[i.profile];
    if (i.start < 0 || i.start >= kMigSlots || ((p.starts >> i.start) & 1) == 0) {
      std::string valid;
      for (int32_t s = 0; s < kMigSlots; ++s) {
        if ((p.starts >> s) & 1) valid += (valid.empty() ? "" : ", ") + std::to_string(s);
      }
      return InvalidArgumentError(std::string(p.name) + "@" + std::to_string(i.start) + ": " + std::string(geo.name) +
                                  " places " + std::string(p.name) + " only at slot " + valid);
    }
    const uint8_t mask = MigSlotMask(geo, i);
    if ((mask & used) != 0) {
      return InvalidArgumentError(std::string(p.name) + "@" + std::to_string(i.start) +
                                  ": overlaps another instance's memory slots");
    }
    used |= mask;
    compute += p.compute;
  }
  if (compute > kMigComputeSlices) {
    return InvalidArgumentError("instances need " + std::to_string(compute) + " compute slices; " +
                                std::string(geo.name) + " has 7");
  }
  return Status::Ok();
}

StatusOr<MigLayout> ParseMigLayout(const MigGeometry& geo, std::string_view text) {
  MigLayout placed;
  std::vector<int32_t> unplaced;  // profiles without a start
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    pos = comma + 1;
    if (item.empty()) {
      if (comma == text.size()) break;
      return InvalidArgumentError("empty entry in MIG layout '" + std::string(text) + "'");
    }
    const size_t at = item.find('@');
    const std::string_view name = item.substr(0, at);
    const int32_t profile = geo.ProfileIndex(name);
    if (profile < 0) {
      std::string known;
      for (const MigProfile& p : geo.profiles) known += (known.empty() ? "" : ", ") + std::string(p.name);
      return InvalidArgumentError("'" + std::string(name) + "' is not a MIG profile of " + std::string(geo.name) +
                                  " (profiles: " + known + ")");
    }
    if (at == std::string_view::npos) {
      unplaced.push_back(profile);
      continue;
    }
    const std::string_view start = item.substr(at + 1);
    if (start.size() != 1 || start[0] < '0' || start[0] > '7') {
      return InvalidArgumentError("'" + std::string(item) + "': the start slot must be 0..7");
    }
    placed.push_back({static_cast<int8_t>(profile), static_cast<int8_t>(start[0] - '0')});
  }
  ROTA_RETURN_IF_ERROR(ValidateMigLayout(geo, placed));
  // Biggest first, each at the first start that leaves room for the rest
  // (a small backtracking search: at most 8 slots).
  std::stable_sort(unplaced.begin(), unplaced.end(),
                   [&](int32_t a, int32_t b) { return geo.profiles[a].slots > geo.profiles[b].slots; });
  const size_t fixed = placed.size();
  auto place = [&](auto& self, size_t k, uint8_t used) -> bool {
    if (k == unplaced.size()) return true;
    const MigProfile& p = geo.profiles[unplaced[k]];
    for (int32_t s = 0; s < kMigSlots; ++s) {
      const uint8_t mask = static_cast<uint8_t>(((1u << p.slots) - 1) << s);
      if (((p.starts >> s) & 1) == 0 || (mask & used) != 0) continue;
      placed.push_back({static_cast<int8_t>(unplaced[k]), static_cast<int8_t>(s)});
      if (self(self, k + 1, used | mask)) return true;
      placed.pop_back();
    }
    return false;
  };
  if (!place(place, 0, MigLayoutSlots(geo, placed))) {
    placed.resize(fixed);
    return InvalidArgumentError("MIG layout '" + std::string(text) + "' does not fit one " + std::string(geo.name) +
                                " (memory slots or valid starts run out)");
  }
  ROTA_RETURN_IF_ERROR(ValidateMigLayout(geo, placed));
  std::sort(placed.begin(), placed.end(), [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  return placed;
}

std::string FormatMigLayout(const MigGeometry& geo, const MigLayout& layout) {
  MigLayout sorted = layout;
  std::sort(sorted.begin(), sorted.end(), [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  std::string out;
  for (const MigInstance& i : sorted) {
    out += (out.empty() ? "" : ",") + std::string(geo.profiles[i.profile].name) + "@" + std::to_string(i.start);
  }
  return out;
}

int32_t MigProfileCompute(std::string_view name) {
  // <N>g.<M>gb
  size_t i = 0;
  int32_t n = 0;
  while (i < name.size() && i < 2 && std::isdigit(static_cast<unsigned char>(name[i]))) n = n * 10 + (name[i++] - '0');
  if (i == 0 || n < 1 || n > kMigComputeSlices || name.substr(i, 2) != "g.") return 0;
  i += 2;
  const size_t digits = i;
  while (i < name.size() && std::isdigit(static_cast<unsigned char>(name[i]))) ++i;
  if (i == digits || name.substr(i) != "gb") return 0;
  return n;
}

}  // namespace rota
