#include "sim/time_sim.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <deque>
#include <limits>
#include <map>
#include <unordered_map>
#include <memory>
#include <numeric>
#include <queue>

#include "base/rng.h"
#include "core/cluster_state.h"
#include "sched/engine.h"
#include "sched/learned.h"
#include "sched/to_events.h"
#include "sim/profile_sim.h"

namespace rota::sim {
namespace {

using sched::LearnedGittins;

constexpr TimePoint kNever = std::numeric_limits<TimePoint>::max();
constexpr int kQueues = 3;
// Tiresias' queue limits (GPU-seconds; seconds for las); the third is never reached.
constexpr int64_t kQueueLimit[kQueues - 1] = {3250, 7200};
constexpr int64_t kGittinsDelta = 3250;

enum class Policy { kFifo, kSjf, kSrtf, kSrtfGpu, kLas, kTiresias, kGittins, kRota };
enum class Placement { kCount, kTopology, kBestFit, kSpread };

StatusOr<Policy> ParsePolicy(const std::string& name) {
  static const std::pair<const char*, Policy> kNames[] = {
      {"fifo", Policy::kFifo}, {"sjf", Policy::kSjf},           {"srtf", Policy::kSrtf},
      {"srtf-gpu", Policy::kSrtfGpu}, {"las", Policy::kLas},    {"tiresias", Policy::kTiresias},
      {"gittins", Policy::kGittins},  {"rota", Policy::kRota}};
  for (auto [n, p] : kNames) {
    if (name == n) return p;
  }
  std::string known;
  for (const std::string& n : TimePolicies()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("--policy: unknown policy '" + name + "' (known: " + known + ")");
}

StatusOr<Placement> ParsePlacement(const std::string& name) {
  if (name == "count") return Placement::kCount;
  if (name == "topology" || name == "default") return Placement::kTopology;
  if (name == "bestfit") return Placement::kBestFit;
  if (name == "spread") return Placement::kSpread;
  std::string known;
  for (const std::string& n : TimePlacements()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("--placement: unknown placement '" + name + "' for a time simulation (known: " + known +
                              "; fgd, packing, clustering, dotprod and random place openb pods)");
}

// One job's life in the simulation.
struct SimJob {
  enum State : uint8_t { kFuture, kPending, kRunning, kDone, kNever };
  const TraceJob* trace = nullptr;
  int64_t g = 0;  // GPUs over all replicas
  State state = kFuture;
  Duration exec = 0;      // attained service: time it has run (Tiresias' executed time)
  Duration progress = 0;  // useful work: exec less what failures took back
  Duration checkpoint = 0;
  TimePoint last_check = 0;
  TimePoint start = -1;
  TimePoint end = -1;
  int32_t q = 0;
  double rank = 0;
  int32_t preemptions = 0;
  int32_t restarts = 0;
  double lost = 0;  // GPU-seconds redone
  bool want = false;
  TimePoint last_start = 0;
  uint32_t epoch = 0;  // bumped when it stops: invalidates its queued end
  TimePoint waiting_since = -1;  // rota: pending since (-1 while running or done)
  std::vector<TimePoint> preempted_at;  // rota: its last few preemptions
  int32_t batch = -1;  // rota: jobs submitted together (same queue and GPUs, seconds apart)
  Duration remaining() const { return trace->duration - progress; }
  // Attained GPU-seconds.
  double gpu_seconds() const { return static_cast<double>(exec) * static_cast<double>(g) / kMicrosPerSecond; }
};

// Where jobs run: a GPU count, or nodes through ClusterState and the engine.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int64_t healthy_gpus() const = 0;
  virtual void Arrive(SimJob& j, size_t index, TimePoint t) = 0;
  virtual void Stop(SimJob& j, size_t index, TimePoint t, bool finished) = 0;
  // Starts jobs of `order` (pending, best first) that fit; with `strict`, none
  // after the first that does not. Sets started jobs kRunning.
  virtual void Start(std::vector<SimJob>& jobs, const std::vector<uint32_t>& order, bool strict, TimePoint t) = 0;
  // A failure: the jobs it hits (indices); after the driver has stopped them,
  // TakeDown marks the failed GPUs down.
  virtual void Fail(Rng& rng, bool whole_node, TimePoint t, TimePoint repair_at, std::vector<uint32_t>* hit) = 0;
  virtual void TakeDown() = 0;
  // Repairs due at or before t; returns the next repair time (kNever if none).
  virtual TimePoint Repair(TimePoint t) = 0;
  virtual bool Unplaceable(SimJob& j, size_t index, std::string* why) = 0;
  std::vector<double> cycle_ms;
};

class CountBackend final : public Backend {
 public:
  // `base`: the simulator's jobs (failures report hit jobs by index).
  CountBackend(int64_t gpus, int32_t gpus_per_node, const SimJob* base)
      : total_(gpus), free_(gpus), per_node_(gpus_per_node), base_(base) {}
  int64_t healthy_gpus() const override { return total_ - down_; }
  void Arrive(SimJob&, size_t, TimePoint) override {}
  void Stop(SimJob& j, size_t, TimePoint, bool) override {
    free_ += j.g;
    running_.erase(std::find(running_.begin(), running_.end(), &j));
  }
  void Start(std::vector<SimJob>& jobs, const std::vector<uint32_t>& order, bool strict, TimePoint) override {
    for (uint32_t i : order) {
      SimJob& j = jobs[i];
      if (j.g > free_) {
        if (strict) break;
        continue;
      }
      free_ -= j.g;
      j.state = SimJob::kRunning;
      running_.push_back(&j);
    }
  }
  void Fail(Rng& rng, bool whole_node, TimePoint, TimePoint repair_at, std::vector<uint32_t>* hit) override {
    const int64_t healthy = healthy_gpus();
    if (healthy <= 0) return;
    // Allocated GPUs are [0, allocated) in start order; the rest are free.
    const int64_t width = std::min<int64_t>(whole_node ? per_node_ : 1, healthy);
    const int64_t first = static_cast<int64_t>(rng.Uniform(static_cast<uint64_t>(healthy - width + 1)));
    int64_t at = 0;
    for (SimJob* j : running_) {
      if (at < first + width && first < at + j->g) hit->push_back(static_cast<uint32_t>(j - base_));
      at += j->g;
    }
    down_ += width;
    repairs_.push_back({repair_at, width});
    pending_down_ = width;
  }
  void TakeDown() override {
    free_ -= pending_down_;
    pending_down_ = 0;
  }
  TimePoint Repair(TimePoint t) override {
    TimePoint next = kNever;
    for (size_t i = 0; i < repairs_.size();) {
      if (repairs_[i].first <= t) {
        down_ -= repairs_[i].second;
        free_ += repairs_[i].second;
        repairs_.erase(repairs_.begin() + static_cast<ptrdiff_t>(i));
      } else {
        next = std::min(next, repairs_[i].first);
        ++i;
      }
    }
    return next;
  }
  bool Unplaceable(SimJob& j, size_t, std::string* why) override {
    if (j.g == 0) {
      *why = "asks for no GPUs (a GPU simulation runs GPU jobs)";
      return true;
    }
    if (j.g <= total_) return false;
    *why = "needs " + std::to_string(j.g) + " GPUs; the cluster has " + std::to_string(total_);
    return true;
  }

 private:
  int64_t total_;
  int64_t free_;
  int32_t per_node_;
  const SimJob* base_;
  int64_t down_ = 0;
  int64_t pending_down_ = 0;
  std::vector<SimJob*> running_;
  std::vector<std::pair<TimePoint, int64_t>> repairs_;
};

// Orders pending jobs by the rank the simulator gives them (lower first).
class RankOrder final : public sched::JobOrderPlugin {
 public:
  explicit RankOrder(const std::vector<double>* rank) : rank_(rank) {}
  std::string_view name() const override { return "sim-rank"; }
  int Compare(const JobRecord& a, const JobRecord& b, TimePoint) const override {
    const double x = (*rank_)[a.id.value() - 1], y = (*rank_)[b.id.value() - 1];
    return x < y ? -1 : (x > y ? 1 : 0);
  }

 private:
  const std::vector<double>* rank_;
};

class EngineBackend final : public Backend {
 public:
  static StatusOr<std::unique_ptr<EngineBackend>> Create(const ClusterConfig& config, const std::vector<NodeSpec>& nodes,
                                                         Placement placement) {
    auto b = std::unique_ptr<EngineBackend>(new EngineBackend(config));
    for (const NodeSpec& n : nodes) {
      ROTA_RETURN_IF_ERROR(b->state_.Apply(NodeAdded{n}));
      b->total_ += n.gpus;
    }
    sched::Registry registry = sched::BuiltinRegistry();
    const std::vector<double>* rank = &b->rank_;
    registry.Register("sim-rank", [rank] { return std::make_unique<RankOrder>(rank); });
    ProfileConfig profile;
    profile.name = "sim";
    // topology: the default placer (tightest domain, NVLink islands) with
    // binpack; bestfit: node by node, fullest fitting node first (no domains).
    profile.plugins = {{"sim-rank", 1}, {"resource-fit", 1}, {"gang", 1},
                       {placement == Placement::kBestFit ? "scan" : "topology", 1}};
    if (placement == Placement::kBestFit || placement == Placement::kTopology) profile.plugins.push_back({"binpack", 1});
    if (placement == Placement::kSpread) profile.plugins.push_back({"spread", 1});
    // The simulator's policy orders jobs and stops them (rank): the engine
    // only places, neither preempting nor reserving.
    profile.actions = {"allocate", "shrink-elastic", "grow-elastic"};
    // Queue quotas and fair share are not applied here.
    ClusterConfig engine_config;
    engine_config.profile = profile;
    ROTA_ASSIGN_OR_RETURN(b->scheduler_, sched::Scheduler::Create(engine_config, sched::EngineOptions{}, registry));
    for (const std::string& name : config.drained) {
      ROTA_RETURN_IF_ERROR(b->state_.Apply(NodeDrainChanged{name, true}));
    }
    return b;
  }
  int64_t healthy_gpus() const override { return total_ - down_; }
  // A job is submitted to the engine's state when it is first offered: the
  // backlog behind a blocked queue head need not sit in every cycle's snapshot.
  void Arrive(SimJob&, size_t index, TimePoint t) override {
    if (rank_.size() <= index) {
      rank_.resize(index + 1, std::numeric_limits<double>::max());
      submitted_at_.resize(index + 1, -1);
    }
    submitted_at_[index] = t;
  }
  void Stop(SimJob&, size_t index, TimePoint t, bool finished) override {
    if (finished) {
      Check(state_.Apply(JobFinished{JobId(index + 1), JobOutcome::kSucceeded, t, ""}));
    } else {
      Check(state_.Apply(JobRequeued{JobId(index + 1), t, "stopped by the policy"}));
    }
  }
  void Start(std::vector<SimJob>& jobs, const std::vector<uint32_t>& order, bool strict, TimePoint t) override {
    if (order.empty()) return;
    // Rank: position in `order`; pending jobs not offered go last, and the
    // engine stops after the offered ones.
    for (size_t k = 0; k < order.size(); ++k) {
      const uint32_t i = order[k];
      rank_[i] = static_cast<double>(k);
      if (submitted_at_[i] >= 0) {
        Check(state_.Apply(JobSubmitted{JobId(i + 1), Spec(*jobs[i].trace, i), submitted_at_[i], "sim"}));
        submitted_at_[i] = -1;
      }
    }
    sched::EngineOptions options = scheduler_->options();
    options.max_jobs_per_cycle = static_cast<int32_t>(order.size());
    scheduler_->SetOptions(options);
    sched::CycleResult& result = result_;
    {
      Snapshot snap = state_.GetSnapshot();
      auto begin = std::chrono::steady_clock::now();
      scheduler_->RunCycle(snap, &result);
      cycle_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count());
      sched::ToEvents(result, snap, t, &events_);
    }  // the snapshot goes before the first Apply, so nothing is copied
    // Strict order: the policy's jobs start in order up to the first that
    // did not fit (placements the engine made after it are dropped).
    for (uint32_t i : order) {
      const bool placed = std::any_of(result.placed.begin(), result.placed.end(),
                                      [&](const sched::Placed& p) { return p.job.value() == i + 1; });
      if (!placed) {
        if (strict) break;
        continue;
      }
      jobs[i].state = SimJob::kRunning;
    }
    // A bind is this cycle's (the engine places only pending jobs): kept if
    // its job was started just above.
    for (Event& e : events_) {
      if (const auto* b = std::get_if<JobBound>(&e); b != nullptr && jobs[b->id.value() - 1].state != SimJob::kRunning) {
        continue;
      }
      Check(state_.Apply(std::move(e)));
    }
    for (uint32_t i : order) rank_[i] = std::numeric_limits<double>::max();
  }
  void Fail(Rng& rng, bool whole_node, TimePoint, TimePoint repair_at, std::vector<uint32_t>* hit) override {
    Snapshot snap = state_.GetSnapshot();
    // A healthy GPU uniformly at random.
    std::vector<std::pair<uint32_t, int32_t>> healthy;
    for (const NodeState& n : snap.nodes()) {
      for (int32_t g = 0; g < n.spec.gpus; ++g) {
        if (n.healthy_mask >> g & 1) healthy.emplace_back(n.id.value(), g);
      }
    }
    if (healthy.empty()) return;
    const auto [node, gpu] = healthy[rng.Uniform(healthy.size())];
    const NodeState& n = snap.nodes()[node];
    const uint64_t mask = whole_node ? (n.healthy_mask) : (uint64_t{1} << gpu);
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->state != JobState::kRunning) continue;
      for (const ReplicaPlacement& r : job->placement) {
        if (r.node.value() == node && (r.gpu_mask & mask) != 0) {
          hit->push_back(static_cast<uint32_t>(id.value() - 1));
          break;
        }
      }
    }
    for (int32_t g = 0; g < n.spec.gpus; ++g) {
      if (mask >> g & 1) down_list_.push_back({repair_at, n.spec.name, g});
    }
    pending_down_.clear();
    for (int32_t g = 0; g < n.spec.gpus; ++g) {
      if (mask >> g & 1) pending_down_.emplace_back(n.spec.name, g);
    }
  }
  void TakeDown() override {
    for (const auto& [node, gpu] : pending_down_) {
      Check(state_.Apply(GpuHealthChanged{node, gpu, false}));
      ++down_;
    }
    pending_down_.clear();
  }
  TimePoint Repair(TimePoint t) override {
    TimePoint next = kNever;
    for (size_t i = 0; i < down_list_.size();) {
      if (down_list_[i].at <= t) {
        Check(state_.Apply(GpuHealthChanged{down_list_[i].node, down_list_[i].gpu, true}));
        --down_;
        down_list_.erase(down_list_.begin() + static_cast<ptrdiff_t>(i));
      } else {
        next = std::min(next, down_list_[i].at);
        ++i;
      }
    }
    return next;
  }
  bool Unplaceable(SimJob& j, size_t index, std::string* why) override {
    if (j.g == 0) {
      *why = "asks for no GPUs (a GPU simulation runs GPU jobs)";
      return true;
    }
    JobRecord probe;
    probe.id = JobId(index + 1);
    probe.SetSpec(Spec(*j.trace, index));
    if (Status s = ValidateJobSpec(probe.spec()); !s.ok()) {
      *why = std::string(s.message());
      return true;
    }
    Snapshot snap = state_.GetSnapshot();
    sched::PendingReason reason = scheduler_->CheckResolvable(snap, probe);
    if (reason.ok()) return false;
    *why = reason.message;
    return true;
  }

 private:
  explicit EngineBackend(const ClusterConfig& config) : config_(config), state_(config.topology) {}
  static void Check(const Status& s) {
    if (!s.ok()) {
      // The simulator only applies what the engine decided on the same state:
      // a refusal is a bug in the simulator or the engine.
      std::fprintf(stderr, "rota sim: internal error: %s\n", s.ToString().c_str());
      std::abort();
    }
  }
  // The engine's view of a trace job: the one the production profile
  // submits (profile_sim.h), preemptible (the policy stops what it likes).
  JobSpec Spec(const TraceJob& t, size_t index) const { return ProfileJobSpec(config_, t, index, TimeSimOptions{}); }

  const ClusterConfig& config_;  // the caller's: outlives the run
  ClusterState state_;
  std::unique_ptr<sched::Scheduler> scheduler_;
  std::vector<double> rank_;
  sched::CycleResult result_;  // reused: a cycle allocates nothing at steady state
  std::vector<Event> events_;   // this cycle's, from ToEvents
  std::vector<TimePoint> submitted_at_;  // arrived, not yet given to the engine (-1 once given)
  int64_t total_ = 0;
  int64_t down_ = 0;
  struct Down {
    TimePoint at;
    std::string node;
    int32_t gpu;
  };
  std::vector<Down> down_list_;
  std::vector<std::pair<std::string, int32_t>> pending_down_;
};

double Round(double v, int digits) {
  const double f = std::pow(10.0, digits);
  return std::nearbyint(v * f) / f;
}

// rota's job order, non-clairvoyant: it knows what a scheduler knows (a job's
// attained service, its GPUs, its queue, when it was submitted, and the run
// times of jobs that finished), never a job's duration.
//  - Jobs go by their Gittins index: the chance of finishing within the next
//    quantum over the expected GPU-time spent until then, from the attained
//    GPU-time of finished jobs (Kaplan-Meier: jobs still running count as at
//    least that long, so long jobs are not missing from the estimate).
//  - Jobs submitted together (same queue and GPU count, at most a minute
//    apart: a sweep; a job alone is a sweep of one) share a distribution.
//    Sweeps' durations are alike (Philly 0e4a51: variance of log duration
//    0.34 within, 10.8 overall), so a sweep's own jobs say more than the
//    workload does:
//     - until one of them finishes: the service its jobs have attained
//       (censored), with the whole workload's as a prior of two jobs' weight,
//       once one of them has run 600 GPU-seconds (before, the workload's);
//     - from its first finish on: a log-normal fitted to its finished jobs
//       and, censored, its unfinished ones, running or waiting (a posterior
//       mode, the workload's log GPU-time as the prior of its mean), again
//       with the workload's as a prior of two jobs' weight. Beyond the
//       service its jobs have attained, an empirical estimate knows only the
//       workload's long tail, so a sweep's longest jobs would look endless
//       and yield to every newcomer; the fit knows where the sweep ends.
//  - A waiting job never goes ahead of a running job of its own sweep (unless
//    starved): siblings share one distribution, and switching between them
//    only delays them all (a sweep of 118 jobs on 64 GPUs ran its jobs in
//    turns).
//  - No thrash: a job runs at least `min_runtime` after each start before it
//    may be preempted (30 s where preemption is free, as when counting GPUs;
//    10 minutes on nodes), and is preempted at most 3 times in any hour.
//  - No starvation: a job that has waited 3 days since its submission or its
//    last preemption goes first, in submission order.
//  - Without history yet: least attained GPU-time first.
class RotaOrder {
 public:
  static constexpr double kBatchWindowSeconds = 60;
  static constexpr Duration kStarved = 3 * 24 * 3600 * kMicrosPerSecond;
  static constexpr int kMaxPerHour = 3;

  explicit RotaOrder(Duration min_runtime) : min_runtime_(min_runtime) {}
  Duration min_runtime() const { return min_runtime_; }

  void Arrive(SimJob& j, const std::string& queue, TimePoint t) {
    auto [it, fresh] = open_.emplace(std::make_pair(queue, j.g), -1);
    if (it->second < 0 ||
        t - batches_[it->second].last_submit > static_cast<TimePoint>(kBatchWindowSeconds * kMicrosPerSecond)) {
      it->second = static_cast<int32_t>(batches_.size());
      batches_.emplace_back();
    }
    j.batch = it->second;
    batches_[j.batch].last_submit = t;
    j.waiting_since = t;
  }
  void Finished(SimJob& j) {
    global_.Add(j.gpu_seconds());
    const double l = std::log(std::max(1.0, j.gpu_seconds()));
    log_n_ += 1;
    log_sum_ += l;
    log_sq_ += l * l;
    Batch& b = batches_[j.batch];
    ++b.finished;
    b.log_sum += l;
    b.log_sq += l * l;
    j.waiting_since = -1;
  }
  void Started(SimJob& j) { j.waiting_since = -1; }
  void Stopped(SimJob& j, TimePoint t) {
    j.waiting_since = t;
    j.preempted_at.push_back(t);
    if (j.preempted_at.size() > kMaxPerHour) j.preempted_at.erase(j.preempted_at.begin());
  }
  // A running job that must not be preempted now.
  bool Protected(const SimJob& j, TimePoint t) const {
    if (t - j.last_start < min_runtime_) return true;
    return j.preempted_at.size() >= kMaxPerHour && t - j.preempted_at.front() < 3600 * kMicrosPerSecond;
  }
  // Sets every runnable job's rank (lower goes first).
  void Rank(std::vector<SimJob>& jobs, const std::vector<uint32_t>& runnable, TimePoint t) {
    ++stamp_;
    for (uint32_t i : grouped_) by_batch_[jobs[i].batch].clear();  // only last pass's batches
    by_batch_.resize(batches_.size());
    for (uint32_t i : runnable) by_batch_[jobs[i].batch].push_back(i);
    grouped_ = runnable;
    if (global_.stale()) {
      censored_.clear();
      for (uint32_t i : runnable) censored_.push_back(jobs[i].gpu_seconds());
      global_.Rebuild(censored_);
    }
    for (uint32_t i : runnable) {
      SimJob& j = jobs[i];
      if (j.state == SimJob::kPending && j.waiting_since >= 0 && t - j.waiting_since >= kStarved) {
        // Before every index (ranks from indices are -index, far above this), oldest first.
        j.rank = kStarvedRank + static_cast<double>(j.trace->submit) / kMicrosPerSecond;
        continue;
      }
      if (!global_.ready()) {
        j.rank = j.gpu_seconds();
        continue;
      }
      Batch& b = batches_[j.batch];
      if (b.stamp != stamp_) Refresh(b, by_batch_[j.batch], jobs);
      if (!b.index.informed()) {
        j.rank = -global_.Index(j.gpu_seconds());
        continue;
      }
      j.rank = -b.index.Index(j.gpu_seconds());
    }
    // No waiting job ahead of a running sibling: just behind the last one.
    last_running_.resize(batches_.size());
    for (uint32_t i : runnable) last_running_[jobs[i].batch] = -HUGE_VAL;
    for (uint32_t i : runnable) {
      const SimJob& j = jobs[i];
      if (j.state == SimJob::kRunning && !Starved(j)) {
        last_running_[j.batch] = std::max(last_running_[j.batch], j.rank);
      }
    }
    for (uint32_t i : runnable) {
      SimJob& j = jobs[i];
      if (j.state == SimJob::kPending && !Starved(j) && j.rank <= last_running_[j.batch]) {
        j.rank = std::nextafter(last_running_[j.batch], HUGE_VAL);
      }
    }
  }

 private:
  struct Batch {
    TimePoint last_submit = 0;
    size_t finished = 0;  // its finished jobs
    sched::SweepIndex index;
    uint64_t stamp = 0;  // the Rank pass that last looked at it
    double log_sum = 0, log_sq = 0;  // of its finished jobs' GPU-seconds
  };

  // Starved jobs' ranks: this plus their submission time in seconds.
  static constexpr double kStarvedRank = -1e12;
  static bool Starved(const SimJob& j) { return j.rank < kStarvedRank / 2; }
  const Duration min_runtime_;
  std::vector<double> last_running_;  // per batch: the worst rank of its running jobs
  sched::CensoredNormal fit_;         // SweepIndex::Update's scratch
  double log_n_ = 0, log_sum_ = 0, log_sq_ = 0;  // log GPU-seconds of finished jobs
  uint64_t stamp_ = 0;
  std::vector<std::vector<uint32_t>> by_batch_;  // this pass's runnable jobs by batch
  std::vector<uint32_t> grouped_;                // the jobs in by_batch_

  // The batch's evidence this pass: its finished jobs, and the attained
  // service of its unfinished ones (`members`; censored: each will run at
  // least that long).
  void Refresh(Batch& b, const std::vector<uint32_t>& members, const std::vector<SimJob>& jobs) {
    b.stamp = stamp_;
    censored_.clear();
    for (uint32_t k : members) censored_.push_back(jobs[k].gpu_seconds());
    b.index.Update(static_cast<int64_t>(b.finished), b.log_sum, b.log_sq, censored_, {log_n_, log_sum_, log_sq_},
                   global_, global_.built(), &fit_);
  }
  LearnedGittins global_;
  std::vector<Batch> batches_;
  std::map<std::pair<std::string, int64_t>, int32_t> open_;  // (queue, GPUs) -> latest batch
  std::vector<double> censored_;
};

}  // namespace

const std::vector<std::string>& TimePolicies() {
  static const std::vector<std::string> kNames = {"fifo",     "sjf",     "srtf", "srtf-gpu", "las",
                                                  "tiresias", "gittins", "rota", "profile"};
  return kNames;
}

const std::vector<std::string>& TimePlacements() {
  static const std::vector<std::string> kNames = {"count", "topology", "bestfit", "spread"};
  return kNames;
}

GittinsTable::GittinsTable(std::vector<int64_t> samples, int64_t delta) {
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  if (n == 0) return;
  data_ = samples;
  index_.resize(n + 1);
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + static_cast<double>(samples[i]);
  for (size_t i = 0; i < n; ++i) {
    // As the Tiresias simulator computes it (cal_r_gittins_index).
    const int64_t a = samples[i] - 1;
    const size_t idx = std::upper_bound(samples.begin(), samples.end(), a) - samples.begin();
    const int64_t na = a + delta;
    const size_t idd = na > samples[n - 1] - 1 ? n - 1 : std::upper_bound(samples.begin(), samples.end(), na) - samples.begin();
    const double left = static_cast<double>(n - idx);
    const double p = Round(static_cast<double>(idd - idx) / left, 5);
    const double e = Round((prefix[idd] - prefix[idx] + static_cast<double>(delta) * static_cast<double>(n - idd)) / left, 5);
    index_[i] = e == 0 ? 0 : Round(p * 1e6 / e, 4);
  }
  data_.push_back(std::numeric_limits<int64_t>::max());
  index_[n] = 0;
}

double GittinsTable::Index(double attained) const {
  if (data_.size() < 2) return 0;
  if (attained > static_cast<double>(data_[data_.size() - 2])) return 0;
  size_t k = std::upper_bound(data_.begin(), data_.end(), attained,
                              [](double a, int64_t d) { return a < static_cast<double>(d); }) -
             data_.begin();
  return index_[k];
}

void FinishSummary(TimeSimResult* result, int64_t total_gpus, std::chrono::steady_clock::time_point start) {
  result->summary = Summarize(result->jobs, result->samples, total_gpus);
  Summary& s = result->summary;
  s.cycles = static_cast<int64_t>(result->cycle_ms.size());
  s.cycles_skipped = result->cycles_skipped;
  if (!result->cycle_ms.empty()) {
    std::vector<double> c = result->cycle_ms;
    s.cycle_p50_ms = Percentile(c, 50);
    s.cycle_p99_ms = Percentile(c, 99);
  }
  s.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (s.wall_s > 0) s.sim_days_per_wall_s = s.makespan_s / 86400.0 / s.wall_s;
}

StatusOr<TimeSimResult> RunTimeSim(const ClusterConfig& config, const std::vector<NodeSpec>& nodes,
                                   const std::vector<TraceJob>& trace, const TimeSimOptions& options) {
  if (options.policy == "profile") {
    if (options.placement != "topology" && options.placement != "default") {
      return InvalidArgumentError("--placement " + options.placement +
                                  ": the production profile places with its own plugins (the config's profile:)");
    }
    return RunProfileSim(config, nodes, trace, options);
  }
  if (!options.services.empty()) return InvalidArgumentError("--services: simulated with --policy profile only");
  const auto wall_start = std::chrono::steady_clock::now();
  ROTA_ASSIGN_OR_RETURN(Policy policy, ParsePolicy(options.policy));
  ROTA_ASSIGN_OR_RETURN(Placement placement, ParsePlacement(options.placement));
  int64_t total_gpus = 0;
  int32_t per_node = 1;
  for (const NodeSpec& n : nodes) {
    total_gpus += n.gpus;
    per_node = std::max(per_node, n.gpus);
  }
  if (total_gpus == 0) return InvalidArgumentError("--cluster: the cluster has no GPUs");

  const size_t n = trace.size();
  std::vector<SimJob> jobs(n);
  for (size_t i = 0; i < n; ++i) {
    jobs[i].trace = &trace[i];
    jobs[i].g = trace[i].TotalGpus();
    jobs[i].checkpoint = trace[i].checkpoint_interval > 0 ? trace[i].checkpoint_interval : options.checkpoint_interval;
  }
  std::unique_ptr<Backend> backend;
  if (placement == Placement::kCount) {
    backend = std::make_unique<CountBackend>(total_gpus, per_node, jobs.data());
  } else {
    ROTA_ASSIGN_OR_RETURN(backend, EngineBackend::Create(config, nodes, placement));
  }

  const bool gpu_time = policy != Policy::kLas;
  const bool mlfq = policy == Policy::kLas || policy == Policy::kTiresias || policy == Policy::kGittins;
  GittinsTable gittins;
  std::vector<int64_t> learnt;  // GPU-seconds of finished jobs (gittins without given samples)
  if (policy == Policy::kGittins && !options.gittins_samples.empty()) {
    gittins = GittinsTable(options.gittins_samples, kGittinsDelta);
  }
  size_t learnt_at = 0;  // size of `learnt` when the table was last built
  // Preemption is free when counting GPUs; on nodes a job first runs 10 minutes.
  RotaOrder rota(placement == Placement::kCount ? 30 * kMicrosPerSecond : 10 * 60 * kMicrosPerSecond);

  TimeSimResult result;
  result.total_gpus = total_gpus;
  std::vector<uint32_t> runnable;         // pending and running, insertion order (sorted in place by sjf/srtf/rota)
  std::vector<uint32_t> running;          // the running ones
  std::deque<uint32_t> fifo;              // fifo's pending jobs
  std::vector<uint32_t> queues[kQueues];  // tiresias' queues
  std::vector<uint32_t> order, start, offer;
  Rng rng(options.seed);
  const bool failures = options.failure_rate > 0;
  auto next_failure = [&](TimePoint now) -> TimePoint {
    if (!failures) return kNever;
    const double per_hour = options.failure_rate * static_cast<double>(std::max<int64_t>(backend->healthy_gpus(), 1));
    const double hours = -std::log(std::max(1.0 - rng.UniformDouble(), 1e-300)) / per_hour;
    const double micros = hours * 3600.0 * kMicrosPerSecond;
    if (!(micros < static_cast<double>(kNever - now) / 2)) return kNever;  // beyond any trace
    return now + static_cast<TimePoint>(micros);
  };
  TimePoint fail_at = next_failure(0);
  TimePoint repair_at = kNever;
  size_t next_arrival = 0;
  size_t finished = 0;
  TimePoint next_end = kNever;
  TimePoint jump = kNever;
  int64_t allocated = 0;
  int32_t pending_count = 0;
  size_t last_progress = 0;
  auto erase = [](std::vector<uint32_t>& v, uint32_t i) { v.erase(std::find(v.begin(), v.end(), i)); };

  // Takes a running job off its GPUs: done, or back to pending.
  // fifo and sjf never read a running job's attained service: account for it
  // only when it stops, and find the next completion in a heap.
  const bool lazy = policy == Policy::kFifo || policy == Policy::kSjf;
  struct End {
    TimePoint at;
    uint32_t job;
    uint32_t epoch;
    bool operator>(const End& o) const { return at > o.at; }
  };
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends;
  std::vector<uint32_t> done_now;
  auto account = [&](uint32_t i, TimePoint t) {
    SimJob& j = jobs[i];
    const Duration d = t - j.last_check;
    j.exec += d;
    j.progress = std::min(j.trace->duration, j.progress + d);
    j.last_check = t;
  };
  auto stop = [&](uint32_t i, TimePoint t, bool done) {
    SimJob& j = jobs[i];
    if (lazy) account(i, t);
    ++j.epoch;
    backend->Stop(j, i, t, done);
    allocated -= j.g;
    erase(running, i);
    if (done) {
      j.state = SimJob::kDone;
      j.end = t;
      ++finished;
      learnt.push_back(std::max<int64_t>(1, static_cast<int64_t>(std::llround(j.gpu_seconds()))));
      if (policy == Policy::kRota) rota.Finished(j);
      erase(runnable, i);
      if (mlfq) erase(queues[j.q], i);
    } else {
      j.state = SimJob::kPending;
      ++pending_count;
      if (policy == Policy::kRota) rota.Stopped(j, t);
    }
  };

  while (finished < n) {
    const TimePoint st = next_arrival < n ? trace[next_arrival].submit : kNever;
    const TimePoint t = std::min({st, next_end, jump, fail_at, repair_at});
    if (t == kNever) break;  // what is left can never run

    // Account for running time; finish what is done (in start order).
    if (lazy) {
      // Policies that never read attained service: only the ending jobs.
      done_now.clear();
      while (!ends.empty() && ends.top().at <= t) {
        const End e = ends.top();
        ends.pop();
        if (e.epoch == jobs[e.job].epoch && jobs[e.job].state == SimJob::kRunning) done_now.push_back(e.job);
      }
      std::sort(done_now.begin(), done_now.end(), [&](uint32_t a, uint32_t b) { return jobs[a].last_start < jobs[b].last_start; });
      for (uint32_t i : done_now) {
        account(i, t);
        stop(i, t, /*done=*/true);
      }
    } else {
      for (uint32_t i : running) account(i, t);
      if (next_end <= t) {
        for (size_t k = 0; k < running.size();) {
          const uint32_t i = running[k];
          if (jobs[i].remaining() <= 0) {
            stop(i, t, /*done=*/true);
          } else {
            ++k;
          }
        }
      }
    }
    // Arrivals.
    while (next_arrival < n && trace[next_arrival].submit == t) {
      const uint32_t i = static_cast<uint32_t>(next_arrival++);
      SimJob& j = jobs[i];
      j.last_check = t;
      std::string why;
      if (backend->Unplaceable(j, i, &why)) {
        j.state = SimJob::kNever;
        ++finished;  // never runs; reported as unfinished
        result.never.push_back(trace[i].name + ": " + why);
        continue;
      }
      backend->Arrive(j, i, t);
      j.state = SimJob::kPending;
      ++pending_count;
      runnable.push_back(i);
      if (policy == Policy::kFifo) fifo.push_back(i);
      if (mlfq) queues[0].push_back(i);
      if (policy == Policy::kRota) rota.Arrive(j, trace[i].queue, t);
    }
    // Repairs and failures.
    if (repair_at <= t) repair_at = backend->Repair(t);
    if (fail_at <= t) {
      std::vector<uint32_t> hit;
      const bool whole_node = rng.Uniform(4) == 0;
      backend->Fail(rng, whole_node, t, t + options.repair_time, &hit);
      // Requeued at the front of fifo's queue in start order: iterate backwards.
      std::reverse(hit.begin(), hit.end());
      for (uint32_t i : hit) {
        SimJob& j = jobs[i];
        if (lazy) account(i, t);
        // Back to the last checkpoint.
        const Duration kept = j.checkpoint > 0 ? j.progress / j.checkpoint * j.checkpoint : 0;
        j.lost += static_cast<double>(j.progress - kept) * static_cast<double>(j.g) / kMicrosPerSecond;
        j.progress = kept;
        ++j.restarts;
        stop(i, t, /*done=*/false);
        if (policy == Policy::kFifo) fifo.push_front(i);  // it was running: ahead of the waiting ones
      }
      backend->TakeDown();
      repair_at = std::min(repair_at, t + options.repair_time);
      fail_at = next_failure(t);
    }

    // Demotions and ranks.
    if (mlfq) {
      if (policy == Policy::kGittins && options.gittins_samples.empty() && learnt.size() >= learnt_at * 2 + 16) {
        gittins = GittinsTable(learnt, kGittinsDelta);
        learnt_at = learnt.size();
      }
      for (uint32_t i : runnable) {
        SimJob& j = jobs[i];
        const double attained = gpu_time ? j.gpu_seconds() : static_cast<double>(j.exec) / kMicrosPerSecond;
        if (j.state == SimJob::kRunning && j.q < kQueues - 1 && attained >= static_cast<double>(kQueueLimit[j.q])) {
          erase(queues[j.q], i);
          ++j.q;
          queues[j.q].push_back(i);
        }
        if (policy == Policy::kGittins) j.rank = gittins.empty() ? 0 : gittins.Index(std::floor(j.gpu_seconds()));
      }
    }

    // Plan.
    start.clear();
    if (policy == Policy::kFifo) {
      // At most as many jobs can start as GPUs are free (each needs one).
      const int64_t free = backend->healthy_gpus() - allocated;
      order.clear();
      int64_t with_gpus = 0;
      for (size_t k = 0; k < fifo.size() && with_gpus <= free; ++k) {
        order.push_back(fifo[k]);
        with_gpus += jobs[fifo[k]].g > 0;
      }
      if (!order.empty() && (free > 0 || jobs[order[0]].g == 0)) backend->Start(jobs, order, /*strict=*/true, t);
      while (!fifo.empty() && jobs[fifo.front()].state == SimJob::kRunning) {
        start.push_back(fifo.front());
        fifo.pop_front();
      }
    } else {
      if (mlfq) {
        order.clear();
        for (auto& q : queues) {
          if (policy == Policy::kGittins) {
            std::stable_sort(q.begin(), q.end(), [&](uint32_t a, uint32_t b) {
              if (jobs[a].rank != jobs[b].rank) return jobs[a].rank > jobs[b].rank;
              return trace[a].submit < trace[b].submit;
            });
          }
          order.insert(order.end(), q.begin(), q.end());
        }
      } else if (policy == Policy::kRota) {
        rota.Rank(jobs, runnable, t);
        std::stable_sort(runnable.begin(), runnable.end(), [&](uint32_t a, uint32_t b) {
          if (jobs[a].rank != jobs[b].rank) return jobs[a].rank < jobs[b].rank;
          // Equal indices (same batch and bin): first submitted first. Least
          // attained first would round-robin them, and sharing GPUs in turns
          // delays every one of them (the ties are long jobs in the tail).
          return jobs[a].trace->submit < jobs[b].trace->submit;
        });
        order = runnable;
      } else {
        auto key = [&](uint32_t i) -> double {
          const SimJob& j = jobs[i];
          switch (policy) {
            case Policy::kSjf: return static_cast<double>(j.g);
            case Policy::kSrtf: return static_cast<double>(j.remaining());
            case Policy::kSrtfGpu: return static_cast<double>(j.remaining()) * static_cast<double>(j.g);
            default: return 0;
          }
        };
        std::stable_sort(runnable.begin(), runnable.end(), [&](uint32_t a, uint32_t b) { return key(a) < key(b); });
        order = runnable;
      }
      // The jobs that should run: greedy in order, skipping what does not
      // fit (rota: after the running jobs it may not preempt yet).
      int64_t free = backend->healthy_gpus();
      for (uint32_t i : order) jobs[i].want = false;
      if (policy == Policy::kRota) {
        for (uint32_t i : running) {
          if (rota.Protected(jobs[i], t)) {
            jobs[i].want = true;
            free -= jobs[i].g;
          }
        }
      }
      for (uint32_t i : order) {
        SimJob& j = jobs[i];
        if (j.want) continue;
        j.want = j.g <= free;
        if (j.want) free -= j.g;
      }
      for (uint32_t i : order) {
        SimJob& j = jobs[i];
        if (j.state == SimJob::kRunning && !j.want) {
          ++j.preemptions;
          if (lazy) account(i, t);
          if (placement != Placement::kCount && j.checkpoint == 0) {
            // Off the count model a preemption costs what the job has not
            // checkpointed; with a checkpoint interval it saves on the signal.
            j.lost += static_cast<double>(j.progress) * static_cast<double>(j.g) / kMicrosPerSecond;
            j.progress = 0;
          }
          stop(i, t, /*done=*/false);
        }
      }
      offer.clear();
      for (uint32_t i : order) {
        if (jobs[i].state == SimJob::kPending && jobs[i].want) offer.push_back(i);
      }
      backend->Start(jobs, offer, /*strict=*/false, t);
      for (uint32_t i : offer) {
        if (jobs[i].state == SimJob::kRunning) start.push_back(i);
      }
      if (mlfq) {
        for (auto& q : queues) {
          std::stable_partition(q.begin(), q.end(), [&](uint32_t i) { return jobs[i].state == SimJob::kRunning; });
        }
      }
    }
    for (uint32_t i : start) {
      SimJob& j = jobs[i];
      if (j.start < 0) j.start = t;
      j.last_start = t;
      j.last_check = t;
      allocated += j.g;
      --pending_count;
      running.push_back(i);
      if (policy == Policy::kRota) rota.Started(j);
    }

    // Nothing runs, nothing started, nothing more arrives or comes back from
    // repair: what still waits can never run here.
    if (running.empty() && start.empty() && next_arrival == n && repair_at == kNever) break;

    // Next completion and wake-up (a demotion, or a change of rota's index).
    next_end = kNever;
    jump = kNever;
    if (lazy) {
      for (uint32_t i : start) ends.push({t + jobs[i].remaining(), i, jobs[i].epoch});
      while (!ends.empty() && (ends.top().epoch != jobs[ends.top().job].epoch || jobs[ends.top().job].state != SimJob::kRunning)) ends.pop();
      if (!ends.empty()) next_end = ends.top().at;
    }
    for (uint32_t i : lazy ? std::vector<uint32_t>{} : running) {
      const SimJob& j = jobs[i];
      next_end = std::min(next_end, t + j.remaining());
      if (mlfq && j.q < kQueues - 1) {
        const int64_t limit = kQueueLimit[j.q] * kMicrosPerSecond;
        if (gpu_time) {
          // The crossing, rounded up to a whole second (trace times are seconds).
          const int64_t left = limit - j.exec * j.g;
          const int64_t per_second = j.g * kMicrosPerSecond;
          jump = std::min(jump, t + std::max<int64_t>(1, (left + per_second - 1) / per_second) * kMicrosPerSecond);
        } else {
          jump = std::min(jump, t + std::max<int64_t>(1, (limit - j.exec + kMicrosPerSecond - 1) / kMicrosPerSecond) *
                                        kMicrosPerSecond);
        }
      }
      if (policy == Policy::kRota) {
        const double edge = LearnedGittins::NextEdge(j.gpu_seconds());
        const double left = edge * static_cast<double>(kMicrosPerSecond) - static_cast<double>(j.exec) * static_cast<double>(j.g);
        const int64_t per_second = j.g * kMicrosPerSecond;
        const int64_t wait = (static_cast<int64_t>(std::ceil(left)) + per_second - 1) / per_second;
        jump = std::min(jump, t + std::max<int64_t>(1, wait) * kMicrosPerSecond);
        // When its protection after a start ends.
        if (t - j.last_start < rota.min_runtime()) jump = std::min(jump, j.last_start + rota.min_runtime());
      }
    }
    if (policy == Policy::kRota && pending_count > 0) {
      // The next job to cross the starvation line (a day of waiting).
      jump = std::min(jump, t + 3600 * kMicrosPerSecond);
    }
    if (result.samples.empty() || result.samples.back().allocated_gpus != allocated ||
        result.samples.back().pending != pending_count ||
        result.samples.back().running != static_cast<int32_t>(running.size())) {
      result.samples.push_back({t, allocated, pending_count, static_cast<int32_t>(running.size())});
    }
    if (options.progress && finished * 100 / n != last_progress) {
      last_progress = finished * 100 / n;
      options.progress(static_cast<double>(finished) / static_cast<double>(n));
    }
  }

  result.jobs.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const SimJob& j = jobs[i];
    JobResult& o = result.jobs[i];
    o.name = trace[i].name;
    o.queue = trace[i].queue;
    o.gpus = j.g;
    o.submit = trace[i].submit;
    o.first_start = j.start;
    o.end = j.end;
    o.duration = trace[i].duration;
    o.preemptions = j.preemptions;
    o.restarts = j.restarts;
    o.lost_gpu_seconds = j.lost;
  }
  result.cycle_ms = std::move(backend->cycle_ms);
  FinishSummary(&result, total_gpus, wall_start);
  return result;
}

}  // namespace rota::sim
