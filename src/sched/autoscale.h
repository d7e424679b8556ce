// Autoscaler: a service's desired replica count from its signals, as
// Knative's KPA decides it (a stable and a panic window, a tolerance band)
// with the HPA's scale-down stabilisation, over several targets at once.
//
//   Observe(sample) once per tick (the server's is 1 s): requests in flight
//   over all replicas (averaged over the tick), the used fraction of the
//   ready replicas' GPU memory, and the service's own metrics summed over its
//   ready replicas.
//   Decide(now, current, ready) then says what the service should run:
//     - per target, the replicas the stable window's average asks
//       (ceil(in-flight / target), ceil(current x memory / target),
//       ceil(metric sum / target));
//       the largest any target asks wins;
//     - within +-tolerance of the target at the current count: no change;
//     - panic: when the panic window's load is at least panic_threshold x
//       the ready replicas' worth (its replicas' worth before rounding up), its (higher) count is used and the service never
//       scales down, until a stable window has passed without panic;
//     - scale-down delay: never below the most asked within that long;
//     - plus `spare` replicas on top (the load's count is current - spare);
//     - clamped to the service's min and max.
// Replicas that are starting (not ready) count toward current, never as
// idle: the windows see only load, and the count the router could serve.
//
// Deterministic (no clock of its own): the server and the simulator drive
// the same decisions from the same samples.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "base/clock.h"
#include "core/job.h"

namespace rota::sched {

struct AutoscaleSample {
  TimePoint at = 0;
  double inflight = 0;     // requests in flight, all replicas, averaged over the tick
  double gpu_memory = -1;  // used fraction of the replicas' GPU memory (-1 = unknown)
  // autoscale.metrics: each summed over the ready replicas (absent = unknown).
  std::map<std::string, double> metrics;
  int32_t memory_replicas = 0;  // how many replicas gpu_memory is over (0: the load's count)
};

struct AutoscaleDecision {
  int32_t desired = 0;
  bool panic = false;
  std::string reason;  // what the signals said ("in flight 9.0 (target 4/replica) over 60s: 3")
};

class Autoscaler {
 public:
  Autoscaler(const ServiceSpec& spec) : spec_(spec) {}

  void Observe(const AutoscaleSample& s);
  // `current`: the replicas it is meant to run now (its last desired);
  // `ready`: those the router sends requests to.
  AutoscaleDecision Decide(TimePoint now, int32_t current, int32_t ready);

  bool panicking() const { return panic_since_ != 0; }

 private:
  struct Window {
    double inflight = 0;
    double gpu_memory = -1;
    double memory_worth = 0;  // used fraction x the replicas read, averaged (0: not said)
    std::map<std::string, double> metrics;  // averages of the samples that had them
    int64_t samples = 0;
  };
  Window Average(TimePoint now, Duration span) const;
  // What one window's averages ask for, the load's count being `current`;
  // `why` gets the signal that set it, `demand` (if not null) the most
  // replicas' worth of load any target saw (not rounded up).
  int32_t Ask(const Window& w, int32_t current, std::string* why, double* demand) const;

  ServiceSpec spec_;
  std::deque<AutoscaleSample> samples_;  // the stable window's, oldest first
  std::deque<std::pair<TimePoint, int32_t>> recommended_;  // the scale-down delay's
  TimePoint panic_since_ = 0;
};

}  // namespace rota::sched
