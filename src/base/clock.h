// Clock: the injected source of time. The engine never reads a clock of its
// own; drivers pass time in. Tests and the simulator use ManualClock, so no
// test ever sleeps to wait for time.
//
// Thread-safety: SystemClock is thread-safe; ManualClock is not (one owner).
#pragma once

#include "base/quantity.h"

namespace rota {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual TimePoint Now() const = 0;
  // Time for spans measured within this process (how long a node has been
  // silent): never stepped, so an NTP step of the wall clock declares no
  // node lost nor keeps one that is. Its origin is arbitrary. A clock that
  // is never stepped (a ManualClock, in tests) answers Now().
  virtual TimePoint Steady() const { return Now(); }
};

// Wall-clock time (CLOCK_REALTIME) in microseconds since the epoch; Steady
// is CLOCK_MONOTONIC's.
class SystemClock final : public Clock {
 public:
  TimePoint Now() const override;
  TimePoint Steady() const override;
};

// Time that moves only when told to.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(TimePoint start = 0) : now_(start) {}
  TimePoint Now() const override { return now_; }
  void Advance(Duration d) { now_ += d; }
  void Set(TimePoint t) { now_ = t; }

 private:
  TimePoint now_;
};

}  // namespace rota
