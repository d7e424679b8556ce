#include "sched/autoscale.h"

#include <gtest/gtest.h>

#include "base/rng.h"

namespace rota::sched {
namespace {

constexpr Duration kSecond = kMicrosPerSecond;

ServiceSpec Service(int32_t min, int32_t max, double target_inflight) {
  ServiceSpec s;
  s.min_replicas = min;
  s.max_replicas = max;
  s.port = 8000;
  s.autoscale.target_inflight = target_inflight;
  return s;
}

// One scaled on GPU memory alone: `target` of a replica's.
ServiceSpec MemoryService(int32_t min, int32_t max, double target) {
  ServiceSpec s = Service(min, max, 0);
  s.autoscale.target_gpu_memory = target;
  return s;
}

// Drives one autoscaler at 1 Hz as the server does: `load(t)` in flight,
// the service running what it last decided, all of it ready.
struct Drive {
  Autoscaler scaler;
  int32_t current;
  std::vector<std::pair<TimePoint, int32_t>> changes;  // (when, to)
  Drive(const ServiceSpec& s, int32_t start) : scaler(s), current(start) {}
  template <typename Load>
  void Run(TimePoint from, TimePoint to, Load load) {
    for (TimePoint t = from; t < to; t += kSecond) {
      scaler.Observe({t, load(t), -1});
      const AutoscaleDecision d = scaler.Decide(t, current, current);
      if (d.desired != current) {
        changes.push_back({t, d.desired});
        current = d.desired;
      }
    }
  }
};

TEST(Autoscale, AThresholdCrossingIsDecidedWithinTwoSeconds) {
  // Target 4 in flight per replica; the load steps from 2 to 40 at t = 100 s.
  Drive d(Service(1, 8, 4), 1);
  const TimePoint step = 100 * kSecond;
  d.Run(0, 200 * kSecond, [&](TimePoint t) { return t < step ? 2.0 : 40.0; });
  ASSERT_FALSE(d.changes.empty());
  EXPECT_LE(d.changes.front().first - step, 2 * kSecond);
  EXPECT_GT(d.changes.front().second, 1);
  EXPECT_EQ(d.current, 8);  // 40 / 4 = 10, clamped to max
}

TEST(Autoscale, NoiseAroundTheTargetForTwoHoursNeverFlipsDirection) {
  // 3 replicas' worth (12 in flight, target 4) +-10% noise, for 2 hours.
  Drive d(Service(1, 10, 4), 3);
  Rng rng(7);
  d.Run(0, 2 * 3600 * kSecond, [&](TimePoint) { return 12.0 * (0.9 + 0.2 * rng.UniformDouble()); });
  int flips = 0;
  for (size_t i = 1; i < d.changes.size(); ++i) {
    const int prev = i >= 2 ? d.changes[i - 2].second : 3;
    if ((d.changes[i].second > d.changes[i - 1].second) != (d.changes[i - 1].second > prev)) ++flips;
  }
  EXPECT_EQ(flips, 0);
  EXPECT_TRUE(d.changes.empty()) << "first change at " << d.changes.front().first / kSecond << " s to "
                                 << d.changes.front().second;
  EXPECT_EQ(d.current, 3);
}

TEST(Autoscale, ScalesDownOnlyAfterTheDelayAndToItsMin) {
  ServiceSpec s = Service(1, 8, 4);
  s.autoscale.scale_down_delay = 300 * kSecond;
  Drive d(s, 1);
  d.Run(0, 200 * kSecond, [](TimePoint) { return 16.0; });
  ASSERT_EQ(d.current, 4);
  const size_t up = d.changes.size();
  const TimePoint quiet = 200 * kSecond;
  d.Run(quiet, 1000 * kSecond, [](TimePoint) { return 0.0; });
  ASSERT_GT(d.changes.size(), up);
  // Not before the delay (and the panic that scaled it up has ended).
  EXPECT_GE(d.changes[up].first - quiet, 300 * kSecond - 2 * kSecond);
  EXPECT_LT(d.changes[up].second, 4);
  EXPECT_EQ(d.current, 1);
}

TEST(Autoscale, GpuMemoryTargetAsksForMoreReplicas) {
  Autoscaler a(MemoryService(1, 8, 0.8));
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 0, 0.95});
  const AutoscaleDecision d = a.Decide(69 * kSecond, 2, 2);
  EXPECT_EQ(d.desired, 3);  // ceil(2 x 0.95 / 0.8)
  EXPECT_NE(d.reason.find("GPU memory 95.0%"), std::string::npos) << d.reason;
}

TEST(Autoscale, AServiceMetricTargetPerReplica) {
  // vLLM's queue: 7 requests waiting over 2 replicas, target 2 a replica: 4.
  ServiceSpec s = Service(1, 8, 0);
  s.autoscale.metrics = {{"vllm:num_requests_waiting", 2}};
  Autoscaler a(s);
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 0, -1, {{"vllm:num_requests_waiting", 7}}});
  const AutoscaleDecision d = a.Decide(69 * kSecond, 2, 2);
  EXPECT_EQ(d.desired, 4);
  EXPECT_NE(d.reason.find("vllm:num_requests_waiting 7.0 (target 2.0/replica)"), std::string::npos) << d.reason;
  // The largest any target asks wins.
  s.autoscale.target_inflight = 1;
  Autoscaler b(s);
  for (int i = 0; i < 70; ++i) b.Observe({i * kSecond, 6, -1, {{"vllm:num_requests_waiting", 1}}});
  EXPECT_EQ(b.Decide(69 * kSecond, 2, 2).desired, 6);
}

TEST(Autoscale, WithinTheToleranceNothingChanges) {
  Autoscaler a(Service(1, 8, 4));
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 8.6, -1});  // 2 x 4 x 1.075
  EXPECT_EQ(a.Decide(69 * kSecond, 2, 2).desired, 2);
  Autoscaler b(Service(1, 8, 4));
  for (int i = 0; i < 70; ++i) b.Observe({i * kSecond, 9.2, -1});  // 15% over: 3
  EXPECT_EQ(b.Decide(69 * kSecond, 2, 2).desired, 3);
}

TEST(Autoscale, NoSignalIsNotZeroLoad) {
  // A metric target whose metric no ready replica reports: kept, not scaled to min.
  ServiceSpec s = Service(1, 8, 0);
  s.autoscale.metrics = {{"vllm:num_requests_waiting", 2}};
  s.autoscale.scale_down_delay = 0;
  Autoscaler a(s);
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 0, -1, {}});
  const AutoscaleDecision d = a.Decide(69 * kSecond, 5, 0);
  EXPECT_EQ(d.desired, 5);
  EXPECT_NE(d.reason.find("no signal"), std::string::npos) << d.reason;
}

TEST(Autoscale, PanicComparesTheLoadNotTheRoundedUpCount) {
  // One replica, target 4: 4.6 in flight asks 2 replicas (rounded up) but
  // is 1.15 replicas' worth: no panic (2x). 8.4 is 2.1 replicas' worth: panic.
  Autoscaler a(Service(1, 8, 4));
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 4.6, -1});
  AutoscaleDecision d = a.Decide(69 * kSecond, 1, 1);
  EXPECT_FALSE(d.panic) << d.reason;
  EXPECT_EQ(d.desired, 2);
  Autoscaler b(Service(1, 8, 4));
  for (int i = 0; i < 70; ++i) b.Observe({i * kSecond, i < 66 ? 0.0 : 8.4, -1});
  d = b.Decide(69 * kSecond, 1, 1);
  EXPECT_FALSE(d.panic) << d.reason;  // 4 of the 6 s: 5.6 in flight, 1.4 replicas' worth
  for (int i = 70; i < 76; ++i) b.Observe({i * kSecond, 8.4, -1});
  d = b.Decide(75 * kSecond, 1, 1);
  EXPECT_TRUE(d.panic) << d.reason;
  EXPECT_EQ(d.desired, 3);
}

TEST(Autoscale, SpareReplicasRideOnTopOfWhatTheLoadAsks) {
  ServiceSpec s = Service(1, 8, 4);
  s.autoscale.spare = 1;
  s.autoscale.scale_down_delay = 0;
  // 16 in flight: the load asks 4, it runs 5.
  Drive d(s, 2);
  d.Run(0, 200 * kSecond, [](TimePoint) { return 16.0; });
  EXPECT_EQ(d.current, 5);
  ASSERT_FALSE(d.changes.empty());
  // Steady at the target with its spare: 5 is kept (the load's count is
  // 4, within the tolerance), for an hour of +-8% noise.
  const size_t before = d.changes.size();
  Rng rng(3);
  d.Run(200 * kSecond, 3800 * kSecond, [&](TimePoint) { return 16.0 * (0.92 + 0.16 * rng.UniformDouble()); });
  EXPECT_EQ(d.changes.size(), before);
  EXPECT_EQ(d.current, 5);
  // Idle: down to what the load asks (nothing) and the spare: 1, its min.
  d.Run(3800 * kSecond, 4000 * kSecond, [](TimePoint) { return 0.0; });
  EXPECT_EQ(d.current, 1);
  // Never beyond max.
  d.Run(4000 * kSecond, 4100 * kSecond, [](TimePoint) { return 100.0; });
  EXPECT_EQ(d.current, 8);
  Autoscaler a(s);
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 16, -1});
  EXPECT_NE(a.Decide(69 * kSecond, 2, 2).reason.find("+ 1 spare"), std::string::npos);
  // GPU memory is an average over the replicas it was read from, the
  // spare too: 3 read at 80% (the target) are 3 replicas' worth of load,
  // and the spare is on top.
  ServiceSpec m = MemoryService(1, 8, 0.8);
  m.autoscale.spare = 1;
  Autoscaler b(m);
  for (int i = 0; i < 70; ++i) b.Observe({i * kSecond, 0, 0.8, {}, 3});
  EXPECT_EQ(b.Decide(69 * kSecond, 3, 3).desired, 4);
}

TEST(Autoscale, GpuMemoryIsTheLoadOfTheReplicasItWasReadFrom) {
  // 2 replicas read at 80% against 50%: 3.2 replicas' worth, 4. Asked for
  // and not placed yet, the same reading on the same 2 still asks 4 (not
  // 80% of the 4 it wants, which would climb to max).
  ServiceSpec s = MemoryService(1, 16, 0.5);
  s.autoscale.scale_down_delay = 0;
  Autoscaler a(s);
  for (int i = 0; i < 70; ++i) a.Observe({i * kSecond, 0, 0.8, {}, 2});
  EXPECT_EQ(a.Decide(69 * kSecond, 2, 2).desired, 4);
  for (int i = 70; i < 80; ++i) a.Observe({i * kSecond, 0, 0.8, {}, 2});
  EXPECT_EQ(a.Decide(79 * kSecond, 4, 2).desired, 4);
}

TEST(Autoscale, WithoutTargetsItKeepsItsCountWithinMinAndMax) {
  Autoscaler a(Service(2, 4, 0));
  a.Observe({0, 100, -1});
  EXPECT_EQ(a.Decide(0, 3, 3).desired, 3);
  EXPECT_EQ(a.Decide(0, 1, 1).desired, 2);
}

}  // namespace
}  // namespace rota::sched
