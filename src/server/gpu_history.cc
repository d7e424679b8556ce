#include "server/gpu_history.h"

#include <algorithm>

#include "core/usage_record.h"

namespace rota::server {

namespace {
constexpr TimePoint kMinuteUs = 60 * kMicrosPerSecond;
}  // namespace

GpuPoint GpuHistoryRecorder::Minute::Point() const {
  GpuPoint p;
  p.samples = static_cast<int32_t>(std::min<int64_t>(samples, 1'000'000));
  p.activity = activity_samples > 0 ? static_cast<int32_t>((activity_sum + activity_samples / 2) / activity_samples) : -1;
  p.memory_peak = memory_peak;
  p.energy_j = (energy_mj + 500) / 1000;
  return p;
}

GpuHistoryBlock GpuHistoryRecorder::Block(const std::string& node, int32_t gpu, int32_t step_s, TimePoint t) {
  GpuHistoryBlock b;
  b.node = node;
  b.gpu = gpu;
  b.step_s = step_s;
  b.start = BlockStart(step_s, t);
  b.points.resize(b.size());
  return b;
}

void GpuHistoryRecorder::Fold(const std::string& node, int32_t count, const std::vector<api::GpuTelemetry>& gpus,
                              TimePoint now) {
  const TimePoint minute = now - now % kMinuteUs;
  std::lock_guard<std::mutex> lock(mu_);
  for (const api::GpuTelemetry& t : gpus) {
    if (t.samples <= 0 || t.index < 0 || t.index >= count) continue;
    Gpu& g = gpus_[{node, t.index}];
    if (g.minutes.node.empty()) {
      g.minutes = Block(node, t.index, GpuHistoryBlock::kMinute, now);
      g.hours = Block(node, t.index, GpuHistoryBlock::kHour, now);
    }
    // A later minute closes the one under way; an earlier one (a clock
    // stepped back) joins it: a closed minute or block is never reopened.
    if (g.open.start < 0 || minute > g.open.start) {
      if (g.open.start >= 0) CloseMinute(g);
      OpenMinute(g, minute);
    }
    Minute& m = g.open;
    m.samples += t.samples;
    if (!t.activity.empty()) {
      ActivityHistogram h;
      for (size_t b = 0; b < t.activity.size() && b < h.counts.size(); ++b) h.counts[b] = std::max<int64_t>(t.activity[b], 0);
      // The exact sum where the agent sends it, else the buckets' middles.
      const int64_t sum = t.activity_sum >= 0 ? t.activity_sum : int64_t{std::max(h.Mean(), 0)} * h.total();
      m.activity_sum += sum;
      m.activity_samples += h.total();
    }
    m.memory_peak = std::max(m.memory_peak, t.memory_peak);
    m.energy_mj += std::max<int64_t>(t.energy_mj, 0);
  }
}

void GpuHistoryRecorder::OpenMinute(Gpu& g, TimePoint minute) {
  g.open = Minute{.start = std::max(minute, g.minutes.start)};
  if (g.open.start >= g.minutes.start + 60 * kMinuteUs) return;  // a later hour: nothing written there yet
  const GpuPoint& p = g.minutes.points[static_cast<size_t>((g.open.start - g.minutes.start) / kMinuteUs)];
  if (p.samples <= 0) return;
  g.open.samples = p.samples;
  if (p.activity >= 0) {
    g.open.activity_samples = p.samples;
    g.open.activity_sum = int64_t{p.activity} * p.samples;
  }
  g.open.memory_peak = p.memory_peak;
  g.open.energy_mj = p.energy_j * 1000;
}

void GpuHistoryRecorder::CloseMinute(Gpu& g) {
  Place(g, g.open.Point(), g.open.start, &done_);
  g.open = Minute{};
}

void GpuHistoryRecorder::Place(Gpu& g, const GpuPoint& point, TimePoint minute, std::vector<GpuHistoryBlock>* finished) {
  if (minute < g.minutes.start) return;  // before the block under way: written already
  if (BlockStart(GpuHistoryBlock::kMinute, minute) != g.minutes.start) {
    finished->push_back(g.minutes);
    g.minutes = Block(g.minutes.node, g.minutes.gpu, GpuHistoryBlock::kMinute, minute);
  }
  if (BlockStart(GpuHistoryBlock::kHour, minute) != g.hours.start) {
    finished->push_back(g.hours);
    g.hours = Block(g.hours.node, g.hours.gpu, GpuHistoryBlock::kHour, minute);
  }
  g.minutes.points[static_cast<size_t>((minute - g.minutes.start) / kMinuteUs)] = point;
  g.hours.points[static_cast<size_t>((g.minutes.start - g.hours.start) / (60 * kMinuteUs))] = Rollup(g.minutes.points);
  g.dirty = true;
}

std::vector<GpuHistoryBlock> GpuHistoryRecorder::Take(TimePoint now, bool all) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, g] : gpus_) {
    if (g.open.start >= 0 && (all || g.open.start + kMinuteUs <= now)) CloseMinute(g);
  }
  std::vector<GpuHistoryBlock> out = std::move(done_);
  done_.clear();
  for (auto it = gpus_.begin(); it != gpus_.end();) {
    Gpu& g = it->second;
    if (g.dirty) {
      out.push_back(g.minutes);
      out.push_back(g.hours);
      g.dirty = false;
    } else if (g.open.start < 0 && g.hours.start + 24 * 60 * kMinuteUs <= BlockStart(GpuHistoryBlock::kHour, now)) {
      it = gpus_.erase(it);  // silent for a whole day: written, nothing to extend
      continue;
    }
    ++it;
  }
  return out;
}

void GpuHistoryRecorder::Warm(const std::vector<GpuHistoryBlock>& blocks, TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const GpuHistoryBlock& b : blocks) {
    if (b.start != BlockStart(b.step_s, now) || b.points.size() != b.size()) continue;
    Gpu& g = gpus_[{b.node, b.gpu}];
    if (g.minutes.node.empty()) {
      g.minutes = Block(b.node, b.gpu, GpuHistoryBlock::kMinute, now);
      g.hours = Block(b.node, b.gpu, GpuHistoryBlock::kHour, now);
    }
    (b.step_s == GpuHistoryBlock::kMinute ? g.minutes : g.hours) = b;
  }
}

std::vector<GpuHistoryBlock> GpuHistoryRecorder::Current(const std::string& node, int32_t step_s, TimePoint now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<GpuHistoryBlock> out;
  for (auto it = gpus_.lower_bound({node, INT32_MIN}); it != gpus_.end() && it->first.first == node; ++it) {
    Gpu g = it->second;  // a copy: the open minute goes in as a point
    std::vector<GpuHistoryBlock> finished;
    if (g.open.start >= 0 && g.open.start <= now) Place(g, g.open.Point(), g.open.start, &finished);
    out.push_back(step_s == GpuHistoryBlock::kMinute ? g.minutes : g.hours);
  }
  return out;
}

size_t GpuHistoryRecorder::gpus() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gpus_.size();
}

}  // namespace rota::server
