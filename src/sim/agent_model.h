// AgentModel: what the node agents of a simulated cluster report about the
// jobs bound to them, in virtual time, from the journal's job events alone.
// Both drivers of the production profile use it: `rota sim --policy profile`
// (profile_sim.h) and the test that replays the same trace through the real
// controller (differential_test.cc), so both see the same agents.
//
// A job is a trace job: `duration` of work, uninterrupted.
//  - Bound (JobBound at t): its replicas start, resuming from the progress of
//    the job's last journaled checkpoint (JobCheckpointed; its path is
//    "progress-<microseconds of work>"), and all exit with code 0 once the
//    rest of its work is done.
//  - Every `checkpoint_interval` of running it saves a checkpoint (reported
//    by its first replica's node).
//  - Evicted (JobPreempting at t): it gets its checkpoint signal. A job that
//    checkpoints and has a grace period saves on the signal and exits
//    min(grace, save_time) later; any other exits kStopTime later, keeping
//    only its last periodic checkpoint. One whose work ends first exits then.
//  - Requeued, finished or cancelled: its replicas are gone.
// Resized elastic gangs restart like a new binding; replicas restarted alone
// (RankRestarted) are not modelled (the model's jobs never fail).
//
// Thread-safety: one owner.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/cluster_state.h"

// (Declared only: the protocol's header brings nlohmann's JSON, which the
// simulator's other includers need not compile.)
namespace rota::api {
struct TaskReport;
}  // namespace rota::api

namespace rota::sim {

struct ModelWork {
  Duration duration = 0;             // work to do
  Duration checkpoint_interval = 0;  // 0 = never checkpoints
  Duration grace = 0;                // the spec's checkpoint grace
  int64_t gpus = 0;                  // whole GPUs over its replicas (for lost work)
};

class AgentModel {
 public:
  static constexpr TimePoint kNever = std::numeric_limits<TimePoint>::max();
  // How long a process takes to exit on its signal when it saves nothing.
  static constexpr Duration kStopTime = kMicrosPerSecond;

  // `work(id)`: the job's work; asked once per binding.
  AgentModel(std::function<ModelWork(JobId)> work, Duration save_time);

  // Follows one journaled event (in journal order).
  void Apply(const Event& e);
  // When the next exit is due (kNever: none). Checkpoints need no step of
  // their own: each is reported, with its time, at the first step after it
  // (agents report them in their next heartbeat), before any cycle that
  // could evict its job.
  TimePoint NextReport();
  // When the job's run next saves a checkpoint (kNever: it does not).
  TimePoint NextCheckpoint(JobId id) const {
    auto it = runs_.find(id.value());
    return it == runs_.end() ? kNever : it->second.next_checkpoint;
  }
  // The reports due at or before `now`: the checkpoints saved by then and
  // the exits, grouped by node name (sorted), each node's checkpoints
  // first, then exits, by job, task and replica. Attempts are read from
  // `snap`, the state they report against.
  void TakeDue(const Snapshot& snap, TimePoint now, std::vector<std::pair<std::string, std::vector<api::TaskReport>>>* out);
  // GPU-seconds of work lost so far: what evicted or requeued attempts had
  // done past their last checkpoint.
  double lost_gpu_seconds(JobId id) const;

 private:
  struct Run {
    std::vector<ReplicaPlacement> placement;
    ModelWork work;
    TimePoint started = 0;
    Duration from = 0;                // progress at the start
    TimePoint finish = 0;             // its work done
    TimePoint next_checkpoint = kNever;
    TimePoint stop_at = kNever;       // evicted: when it exits
    bool save_on_stop = false;
    TimePoint exited_at = kNever;  // its replicas reported their exit
    uint32_t generation = 0;
    Duration ProgressAt(TimePoint t) const { return std::min(work.duration, from + (t - started)); }
    TimePoint Next() const { return std::min(finish, stop_at); }
  };
  struct Due {
    TimePoint at;
    uint64_t job;
    uint32_t generation;
    bool operator>(const Due& o) const { return at != o.at ? at > o.at : job > o.job; }
  };
  void Start(JobId id, const std::vector<ReplicaPlacement>& placement, TimePoint at);
  void Push(JobId id, const Run& run);

  std::function<ModelWork(JobId)> work_;
  Duration save_time_;
  std::unordered_map<uint64_t, Run> runs_;
  std::unordered_map<uint64_t, Duration> saved_;  // progress at the last journaled checkpoint
  std::unordered_map<uint64_t, double> lost_;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due_;          // exits
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> checkpoints_;  // periodic checkpoints
  uint32_t generation_ = 0;
};

}  // namespace rota::sim
