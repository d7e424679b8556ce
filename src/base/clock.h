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
};

// Wall-clock time (CLOCK_REALTIME) in microseconds since the epoch.
class SystemClock final : public Clock {
 public:
  TimePoint Now() const override;
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
