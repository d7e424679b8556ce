// Orders by what a job has had or asks, the research baselines of the
// Tiresias simulator as JobOrder plugins any profile may enable (after
// priority: priorities still come first):
//   las             least attained service first: run time so far, over its
//                   attempts (JobRecord::AttainedAt)
//   tiresias        discretized 2D-LAS: attained GPU-time (run time x GPUs)
//                   in three queues, below 3,250 GPU-seconds, below 7,200, and
//                   beyond; a lower queue first, ties to the next plugin (fifo)
//   smallest-first  fewest GPUs first (SJF without durations)
// All three are preemptive: a blocked job they put first may evict a running
// gang of its queue and priority (framework.h), within the preempt action's
// limits.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

int64_t TotalGpus(const JobRecord& j) {
  int64_t g = 0;
  for (const TaskGroupSpec& t : j.spec().tasks) g += static_cast<int64_t>(t.replicas) * t.gpus;
  return g;
}

int Less(int64_t a, int64_t b) { return a < b ? -1 : (a > b ? 1 : 0); }

class Las final : public JobOrderPlugin {
 public:
  std::string_view name() const override { return "las"; }
  bool preemptive() const override { return true; }
  // A pending job's attained service is fixed (AttainedAt adds only while running).
  bool stable() const override { return true; }
  int Compare(const JobRecord& a, const JobRecord& b, TimePoint now) const override {
    return Less(a.AttainedAt(now), b.AttainedAt(now));
  }
  bool keyed() const override { return true; }
  int64_t Key(const JobRecord& j, TimePoint now) const override { return j.AttainedAt(now); }
};

class Tiresias final : public JobOrderPlugin {
 public:
  // The Tiresias simulator's queue limits, in GPU-seconds.
  static constexpr int64_t kLimits[] = {3250, 7200};
  std::string_view name() const override { return "tiresias"; }
  bool preemptive() const override { return true; }
  bool stable() const override { return true; }
  int Compare(const JobRecord& a, const JobRecord& b, TimePoint now) const override {
    return Less(Queue(a, now), Queue(b, now));
  }
  bool keyed() const override { return true; }
  int64_t Key(const JobRecord& j, TimePoint now) const override { return Queue(j, now); }

 private:
  static int Queue(const JobRecord& j, TimePoint now) {
    const int64_t gpu_seconds = j.AttainedAt(now) / kMicrosPerSecond * TotalGpus(j);
    int q = 0;
    while (q < 2 && gpu_seconds >= kLimits[q]) ++q;
    return q;
  }
};

class SmallestFirst final : public JobOrderPlugin {
 public:
  std::string_view name() const override { return "smallest-first"; }
  bool preemptive() const override { return true; }
  bool stable() const override { return true; }
  bool timeless() const override { return true; }
  int Compare(const JobRecord& a, const JobRecord& b, TimePoint) const override { return Less(TotalGpus(a), TotalGpus(b)); }
  bool keyed() const override { return true; }
  int64_t Key(const JobRecord& j, TimePoint) const override { return TotalGpus(j); }
};

}  // namespace

void RegisterAttainedOrders(Registry& r) {
  r.Register("las", [] { return std::make_unique<Las>(); });
  r.Register("tiresias", [] { return std::make_unique<Tiresias>(); });
  r.Register("smallest-first", [] { return std::make_unique<SmallestFirst>(); });
}

}  // namespace rota::sched
