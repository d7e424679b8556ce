#include "sched/autoscale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace rota::sched {
namespace {

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

}  // namespace

void Autoscaler::Observe(const AutoscaleSample& s) {
  samples_.push_back(s);
  while (!samples_.empty() && samples_.front().at <= s.at - spec_.autoscale.stable_window) samples_.pop_front();
}

Autoscaler::Window Autoscaler::Average(TimePoint now, Duration span) const {
  Window w;
  double memory = 0, worth = 0;
  int64_t memory_samples = 0;
  bool counted = true;  // every memory sample said how many replicas it is over
  for (auto it = samples_.rbegin(); it != samples_.rend() && it->at > now - span; ++it) {
    w.inflight += it->inflight;
    ++w.samples;
    if (it->gpu_memory >= 0) {
      memory += it->gpu_memory;
      worth += it->gpu_memory * it->memory_replicas;  // (each sample at its own count)
      counted = counted && it->memory_replicas > 0;
      ++memory_samples;
    }
  }
  if (w.samples > 0) w.inflight /= static_cast<double>(w.samples);
  if (memory_samples > 0) w.gpu_memory = memory / static_cast<double>(memory_samples);
  if (memory_samples > 0 && counted) w.memory_worth = worth / static_cast<double>(memory_samples);
  for (const MetricTarget& m : spec_.autoscale.metrics) {
    double sum = 0;
    int64_t n = 0;
    for (auto it = samples_.rbegin(); it != samples_.rend() && it->at > now - span; ++it) {
      if (auto v = it->metrics.find(m.name); v != it->metrics.end()) {
        sum += v->second;
        ++n;
      }
    }
    if (n > 0) w.metrics[m.name] = sum / static_cast<double>(n);
  }
  return w;
}

int32_t Autoscaler::Ask(const Window& w, int32_t current, std::string* why, double* demand) const {
  const AutoscaleSpec& a = spec_.autoscale;
  const int32_t base = std::max(current, 1);
  int32_t best = -1;  // -1: no target had a signal
  if (demand != nullptr) *demand = 0;
  auto consider = [&](double ratio, const std::string& what) {
    if (demand != nullptr) *demand = std::max(*demand, ratio * base);
    // Within the tolerance band of the target at the current count: stay.
    const int32_t asked = std::abs(ratio - 1) <= a.tolerance ? base : static_cast<int32_t>(std::ceil(ratio * base - 1e-9));
    if (asked > best) {
      best = std::max(best, asked);
      *why = what + ": " + std::to_string(asked);
    }
  };
  if (a.target_inflight > 0) {
    consider(w.inflight / (a.target_inflight * base),
             "in flight " + Num(w.inflight) + " (target " + Num(a.target_inflight) + "/replica)");
  }
  if (a.target_gpu_memory > 0 && w.gpu_memory >= 0) {
    // The fraction is over the replicas it was read from (spares, and
    // replicas still loading, too): the load is that many replicas' worth,
    // not the count it should be (one not placed yet has no memory).
    const double ratio = w.memory_worth > 0 ? w.memory_worth / base / a.target_gpu_memory : w.gpu_memory / a.target_gpu_memory;
    consider(ratio,
             "GPU memory " + Num(100 * w.gpu_memory) + "% (target " + Num(100 * a.target_gpu_memory) + "%)");
  }
  for (const MetricTarget& m : a.metrics) {
    auto v = w.metrics.find(m.name);
    if (v == w.metrics.end()) continue;
    consider(v->second / (m.target * base), m.name + " " + Num(v->second) + " (target " + Num(m.target) + "/replica)");
  }
  return best;
}

AutoscaleDecision Autoscaler::Decide(TimePoint now, int32_t current, int32_t ready) {
  const AutoscaleSpec& a = spec_.autoscale;
  const ServiceSpec& sv = spec_;
  AutoscaleDecision d;
  if (!a.enabled() || samples_.empty()) {
    d.desired = std::clamp(current, sv.min_replicas, sv.max_replicas);
    return d;
  }
  // The spare replicas are on top of what the load asks: the load's count
  // is the rest.
  const int32_t serving = std::max(current - a.spare, 1);
  std::string stable_why, panic_why;
  double panic_demand = 0;
  const int32_t stable = Ask(Average(now, a.stable_window), serving, &stable_why, nullptr);
  const int32_t panic = Ask(Average(now, a.panic_window), serving, &panic_why, &panic_demand);
  if (stable < 0) {
    // No signal for any target (metrics not exported yet, no ready replica
    // to read them from): no load is not zero load; keep the count.
    d.desired = std::clamp(current, sv.min_replicas, sv.max_replicas);
    d.reason = "no signal for its targets; kept at " + std::to_string(d.desired);
    return d;
  }
  // Panic when the panic window's load is panic_threshold x what can serve
  // now (as Knative compares it: the load, not the rounded-up count, so 1.2
  // replicas' worth on one is not a panic).
  if (panic_demand >= a.panic_threshold * std::max(ready - a.spare, 1) && panic > serving) {
    panic_since_ = now;
  } else if (panic_since_ != 0 && now - panic_since_ >= a.stable_window) {
    panic_since_ = 0;
  }
  int32_t want = stable;
  std::string why = stable_why + " over " + FormatSpan(a.stable_window);
  if (panic_since_ != 0) {
    d.panic = true;
    want = std::max({panic, stable, serving});  // never down in panic
    why = "panic: " + panic_why + " over " + FormatSpan(a.panic_window);
  }
  if (a.spare > 0) {
    want += a.spare;
    why += " + " + std::to_string(a.spare) + " spare";
  }
  if (want > sv.max_replicas) why += " (max " + std::to_string(sv.max_replicas) + ")";
  if (want < sv.min_replicas) why += " (min " + std::to_string(sv.min_replicas) + ")";
  want = std::clamp(want, sv.min_replicas, sv.max_replicas);
  // Scale down only to the most asked within the delay.
  recommended_.push_back({now, want});
  while (!recommended_.empty() && recommended_.front().first <= now - a.scale_down_delay) recommended_.pop_front();
  int32_t floor = want;
  for (const auto& [at, n] : recommended_) floor = std::max(floor, n);
  if (floor > want && want < current) {
    why += "; held at " + std::to_string(std::min(floor, current)) + " by the " + FormatSpan(a.scale_down_delay) +
           " scale-down delay";
    want = std::min(floor, current);
  }
  d.desired = want;
  d.reason = why;
  return d;
}

}  // namespace rota::sched
