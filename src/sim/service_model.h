// ServiceModel: a simulated service's requests through rota's router, for
// `rota sim --policy profile --services FILE` (profile_sim.h). The driver
// places and removes its replicas with the production engine; this model
// says what the router would measure, request by request, in virtual time:
//   - requests arrive as a Poisson process at a piecewise-constant rate
//     (requests/s from each point of `rate` on; the load ends at its last
//     point), each with exponential work of mean `work`;
//   - a replica is ready `startup` after it starts (JobBound or the
//     JobResized that added it), as the router's readiness probe would find
//     it; it works on up to `concurrency` requests at once, the rest wait
//     at it in order;
//   - the router sends each request to the ready replica with the fewest
//     outstanding (ties in turn); with none ready it waits, up to the
//     router's queue timeout (30 s), then fails (503); one beyond the
//     router's 4,096 connections is refused (failed); a request on a
//     replica that goes away is retried once on another, from the start;
//   - in flight, as the router counts it: from arrival to answer (waiting
//     for a replica included), averaged over each tick for the autoscaler;
//     GPU memory, when `memory_base`/`memory_per_request` are given: each
//     placed replica's used fraction is min(1, base + per_request x its
//     outstanding requests), averaged over them at the tick, loading ones
//     included, as the agents' telemetry reads every placed replica
//     (telemetry is a reading, not an average);
//   - replica failures, when `failure_every` is given: at each tick each
//     placed replica exits with probability 1 - exp(-tick/failure_every)
//     (a Poisson process of that mean per replica); the driver journals it
//     as the server's lifecycle does (RankRestarted: restarted alone, in
//     place), its requests are retried once on another ready replica, and
//     it is ready again `startup` later;
//   - the service's own metrics (autoscale.metrics), each a quantity of the
//     model the replicas would export, read at the tick and summed over the
//     ready replicas as the router sums them: `waiting` (requests waiting
//     at a replica for a free slot: vLLM's num_requests_waiting), `running`
//     (requests it works on) or `memory` (its used fraction, as above:
//     vLLM's gpu_cache_usage_perc).
// Queueing is arrival to the start of work; latency, arrival to answer;
// their percentiles come from histograms of 1% buckets (memory does not
// grow with the requests). Times in `rate` and `submit` are from the
// simulation's start; the job ends (JobCancelled) when its load does.
//
// Deterministic: one seed, no clock of its own. Thread-safety: one owner.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "base/status.h"
#include "core/event.h"
#include "core/job.h"
#include "sched/autoscale.h"

namespace rota::sim {

struct ServiceLoad {
  JobSpec spec;  // kind: service
  TimePoint submit = 0;
  // (from, requests/s), from ascending, the first at 0 or later; the load
  // ends at the last point (its rate is not used).
  std::vector<std::pair<TimePoint, double>> rate;
  Duration work = 100'000;  // mean work of one request
  int32_t concurrency = 1;  // requests a replica works on at once
  Duration startup = 30'000'000;  // a replica's start to its readiness
  double memory_base = -1;  // GPU memory used by an idle replica (fraction; < 0: no telemetry)
  double memory_per_request = 0;
  enum class Quantity { kWaiting, kRunning, kMemory };
  std::map<std::string, Quantity> metrics;  // what each exported metric is
  Duration failure_every = 0;  // a replica's mean time between exits; 0 = none
  TimePoint end() const { return rate.empty() ? submit : rate.back().first; }
};

// `rota sim --services FILE`: YAML
//   services:
//     - job: {...}          # a job spec of kind service, as rota submit takes
//       submit: 0s          # when it is submitted (default 0)
//       requests:
//         rate: [[0s, 20], [1h, 80], [3h, 0]]   # or rate_file: rates.csv
//                                               # (t_s,requests_per_s rows)
//         work: 200ms
//         concurrency: 4
//         startup: 30s
//         memory: {base: 0.3, per_request: 0.05}   # optional
//         metrics: {"vllm:num_requests_waiting": waiting}  # optional: waiting, running, memory
//       failures: {every: 6h}  # optional: a replica's mean time between exits
// Errors name the service's index and the field.
StatusOr<std::vector<ServiceLoad>> ParseServiceLoads(std::string_view text, std::string_view source);

struct ServiceScaling {
  TimePoint at = 0;
  int32_t from = 0, to = 0;
  bool panic = false;
  std::string reason;
};

struct ServiceResult {
  std::string name;
  uint64_t requests = 0;  // answered
  // No ready replica within the queue timeout, or none to retry on when
  // the replica a request was on went away (the router retries once).
  uint64_t failed = 0;
  uint64_t retried = 0;   // on a replica that went away
  double queue_p50_ms = 0, queue_p99_ms = 0;
  double latency_p50_ms = 0, latency_p99_ms = 0;
  std::vector<ServiceScaling> decisions;              // the autoscaler's, as journaled
  std::vector<std::pair<TimePoint, int32_t>> placed;  // (when, replicas placed) at each change
  int32_t direction_flips = 0;  // decisions that reverse the previous one's direction
  double replica_seconds = 0;   // replicas placed x time (what it cost)
  int32_t replica_failures = 0;  // simulated exits (failure_every)
};

class ServiceModel {
 public:
  static constexpr Duration kQueueTimeout = 30'000'000;  // the router's default
  // Requests in flight at most: the router's connection limit
  // (RouterOptions::max_connections); one more is refused (failed). It
  // bounds what a load far beyond the replicas' capacity holds in memory.
  static constexpr int64_t kMaxInFlight = 4'096;

  ServiceModel(ServiceLoad load, uint64_t seed);

  const ServiceLoad& load() const { return load_; }
  // Follows one journaled event of its job: replicas placed, added, removed.
  void Apply(const Event& e);
  // The requests up to `now`, and what the router and the agents would
  // report at that tick (the in-flight average since the last call).
  sched::AutoscaleSample Advance(TimePoint now);
  // Ready replicas at the last Advance.
  int32_t ready() const { return ready_; }
  // The placed replicas that fail at this tick, `dt` after the last one
  // (none without failure_every; the model's own draws otherwise).
  std::vector<uint32_t> Failures(Duration dt);
  // An autoscaler decision that was journaled at `at`.
  void Decided(TimePoint at, int32_t from, int32_t to, bool panic, const std::string& reason);
  ServiceResult Finish(TimePoint end);

 private:
  struct Request {
    TimePoint arrival = 0;
    Duration work = 0;
    TimePoint started = 0;  // its work, on the replica that answers it
    bool retried = false;
  };
  struct Replica {
    NodeId node;
    uint64_t gpu_mask = 0;  // (moved elsewhere: a new process)
    TimePoint ready_at = 0;
    bool ready = false;
    std::deque<Request> waiting;
    std::vector<std::pair<uint64_t, Request>> working;  // (completion id, request)
    int64_t outstanding() const { return static_cast<int64_t>(waiting.size() + working.size()); }
  };
  struct Completion {
    TimePoint at = 0;
    uint64_t id = 0;
    uint32_t replica = 0;
    bool operator>(const Completion& o) const { return at != o.at ? at > o.at : id > o.id; }
  };

  // The requests up to `to`, event by event.
  void Run(TimePoint to);
  // Its replicas are now `placement`'s: the others go, new ones start.
  void Place(TimePoint t, const std::vector<ReplicaPlacement>& placement);
  void Placed(TimePoint t);  // (the placed count's record)
  // Takes replica `replica` out; its requests are returned (to dispatch
  // once every replica going away is gone).
  void Take(uint32_t replica, std::vector<Request>* broken);
  void Retry(TimePoint t, std::vector<Request> broken);
  void Count(TimePoint t, int64_t delta);
  TimePoint NextArrival(TimePoint after);
  void Dispatch(TimePoint t, Request r);
  void StartWork(TimePoint t, uint32_t replica, Request r);

  ServiceLoad load_;
  Rng rng_;
  std::map<uint32_t, Replica> replicas_;
  std::priority_queue<Completion, std::vector<Completion>, std::greater<Completion>> completions_;
  std::deque<Request> router_queue_;  // no ready replica yet
  TimePoint cursor_ = 0;              // requests simulated up to here
  TimePoint next_arrival_ = -1;
  uint64_t next_id_ = 0;
  size_t turn_ = 0;
  int32_t ready_ = 0;
  // In flight, integrated since the last Advance.
  int64_t inflight_ = 0;
  double integral_ = 0;
  TimePoint last_change_ = 0, window_start_ = 0;
  // Replicas placed over time.
  TimePoint placed_since_ = 0;
  int32_t placed_count_ = 0;
  ServiceResult result_;
  // Milliseconds in 1% buckets (index 0: under 1 µs).
  struct Histogram {
    std::vector<uint64_t> counts;
    uint64_t total = 0;
    void Add(double ms);
    double Percentile(double p) const;
  };
  Histogram queueing_ms_, latency_ms_;
};

}  // namespace rota::sim
