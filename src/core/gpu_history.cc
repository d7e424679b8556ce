#include "core/gpu_history.h"

#include <algorithm>
#include <climits>

namespace rota {

TimePoint BlockStart(int32_t step_s, TimePoint t) {
  const int64_t span = int64_t{step_s == GpuHistoryBlock::kMinute ? 3600 : 86400} * kMicrosPerSecond;
  const TimePoint start = t - t % span;
  return t < 0 && t % span != 0 ? start - span : start;
}

GpuPoint Rollup(const std::vector<GpuPoint>& points) {
  GpuPoint out;
  int64_t weighted = 0, known = 0;
  for (const GpuPoint& p : points) {
    if (p.samples <= 0) continue;
    out.samples = static_cast<int32_t>(std::min<int64_t>(int64_t{out.samples} + p.samples, INT32_MAX));
    if (p.activity >= 0) {
      weighted += int64_t{p.activity} * p.samples;
      known += p.samples;
    }
    out.memory_peak = std::max(out.memory_peak, p.memory_peak);
    out.energy_j += p.energy_j;
  }
  if (known > 0) out.activity = static_cast<int32_t>((weighted + known / 2) / known);
  return out;
}

namespace {

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

uint64_t ZigZag(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

class Bytes {
 public:
  explicit Bytes(std::string_view in) : in_(in) {}
  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= in_.size()) return false;
      const auto b = static_cast<uint8_t>(in_[pos_++]);
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  bool Byte(uint8_t* v) {
    if (pos_ >= in_.size()) return false;
    *v = static_cast<uint8_t>(in_[pos_++]);
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeGpuPoints(const std::vector<GpuPoint>& points) {
  std::string out;
  out.reserve(points.size() * 6);
  MemoryMiB memory = 0;
  int64_t energy = 0;
  for (size_t i = 0; i < points.size();) {
    size_t run = 1;
    while (i + run < points.size() && points[i + run] == points[i]) ++run;
    const GpuPoint& p = points[i];
    PutVarint(&out, run);
    PutVarint(&out, static_cast<uint64_t>(std::max(p.samples, 0)));
    if (p.samples > 0) {
      out.push_back(static_cast<char>(std::clamp(p.activity, -1, 100) + 1));
      // Wrapping differences: values come from agents, and the decoder refuses
      // what does not add back within range.
      PutVarint(&out, ZigZag(static_cast<int64_t>(static_cast<uint64_t>(p.memory_peak) - static_cast<uint64_t>(memory))));
      PutVarint(&out, ZigZag(static_cast<int64_t>(static_cast<uint64_t>(p.energy_j) - static_cast<uint64_t>(energy))));
      memory = p.memory_peak;
      energy = p.energy_j;
    }
    i += run;
  }
  return out;
}

StatusOr<std::vector<GpuPoint>> DecodeGpuPoints(std::string_view bytes, size_t count) {
  Bytes in(bytes);
  std::vector<GpuPoint> out;
  out.reserve(count);
  MemoryMiB memory = 0;
  int64_t energy = 0;
  while (!in.done()) {
    uint64_t run = 0, samples = 0;
    if (!in.Varint(&run) || run == 0 || run > count - out.size()) {
      return DataLossError("gpu history: a run of points is malformed or past the block's " + std::to_string(count));
    }
    if (!in.Varint(&samples) || samples > static_cast<uint64_t>(INT32_MAX)) {
      return DataLossError("gpu history: samples: malformed");
    }
    GpuPoint p;
    p.samples = static_cast<int32_t>(samples);
    if (p.samples > 0) {
      uint8_t activity = 0;
      uint64_t dm = 0, de = 0;
      if (!in.Byte(&activity) || activity > 101) return DataLossError("gpu history: activity: malformed");
      if (!in.Varint(&dm) || !in.Varint(&de)) return DataLossError("gpu history: memory or energy: malformed");
      p.activity = static_cast<int32_t>(activity) - 1;
      if (__builtin_add_overflow(memory, UnZigZag(dm), &p.memory_peak) ||
          __builtin_add_overflow(energy, UnZigZag(de), &p.energy_j)) {
        return DataLossError("gpu history: memory or energy: out of range");
      }
      memory = p.memory_peak;
      energy = p.energy_j;
    }
    out.insert(out.end(), run, p);
  }
  if (out.size() != count) {
    return DataLossError("gpu history: " + std::to_string(out.size()) + " points where the block holds " +
                         std::to_string(count));
  }
  return out;
}

}  // namespace rota
