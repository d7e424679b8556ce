// JobSpec: what a user asks for, as in DESIGN.md's job format. A job is a gang
// of task groups, each `replicas` x a per-replica request; every replica of
// every group starts together or none does.
//
// Specs are plain values. ValidateJobSpec checks the rules that do not depend
// on a cluster (positive counts, known enum values, sane limits) and names the
// offending field by path, e.g. "tasks[0].replicas: must be at least 1".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/ids.h"
#include "base/quantity.h"
#include "base/status.h"

namespace rota {

using JobId = StrongId<struct JobTag, uint64_t>;
using Labels = std::map<std::string, std::string>;

// Upper bounds that reject absurd requests early with a clear message.
inline constexpr int32_t kMaxReplicas = 100'000;
inline constexpr int32_t kMaxGpusPerReplica = 64;  // GPUs on one node (a node's GPU mask is 64 bits)
inline constexpr int32_t kMaxTaskGroups = 64;
// What a task starts with (execve): an argument or NAME=value at most the
// kernel's MAX_ARG_STRLEN less its NUL; a task group's command and env
// together at most half the kernel's total under the usual 8 MiB stack.
inline constexpr size_t kMaxExecString = 128 * 1024 - 1;
inline constexpr size_t kMaxExecBytes = 1 << 20;

// How a replica uses GPUs. Whole GPUs are countable and indivisible; MIG
// slices and fractions are explicit sharing modes (scheduled from issue #7 on).
struct GpuShare {
  std::string mig_profile;   // e.g. "1g.10gb"; empty = not MIG
  int32_t fraction_milli = 0;  // 250 = a quarter of a GPU; 0 = not fractional
  MemoryMiB memory = 0;      // memory bound for a fraction
  bool shared() const { return !mig_profile.empty() || fraction_milli > 0; }
  // Its share of a GPU's compute, in milli-GPU: the fraction, or a MIG
  // slice's compute slices of 7 (2g = 286); 0 for whole GPUs.
  int32_t milli() const;
  bool operator==(const GpuShare&) const = default;
};

struct TaskGroupSpec {
  std::string name;
  int32_t replicas = 1;
  int32_t gpus = 0;  // whole GPUs per replica
  GpuShare gpu_share;
  std::string gpu_model;  // empty = any model
  MemoryMiB gpu_memory = 0;  // least memory per GPU; 0 = any
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  // Run in an OCI container (runc or crun) with this root filesystem: a
  // directory on the node, or an unpacked image directory holding rootfs/.
  // Empty = a plain process.
  std::string rootfs;
  bool operator==(const TaskGroupSpec&) const = default;
};

enum class TopologyMode { kRequired, kPreferred };

// Keep the gang within one domain of `level` (a topology level name, or
// "node"). Empty level = no constraint (the placer still packs tightly).
struct TopologyConstraint {
  std::string level;
  TopologyMode mode = TopologyMode::kRequired;
  bool operator==(const TopologyConstraint&) const = default;
};

struct CheckpointSpec {
  std::string signal = "SIGUSR1";
  Duration grace = 0;
  bool operator==(const CheckpointSpec&) const = default;
};

enum class RestartPolicy { kNever, kOnFailure, kAlways };

struct RestartSpec {
  RestartPolicy policy = RestartPolicy::kNever;
  int32_t max_restarts = 0;
  bool operator==(const RestartSpec&) const = default;
};

struct MountSpec {
  std::string source;
  std::string target;
  bool read_only = false;
  bool operator==(const MountSpec&) const = default;
};

// A service (kind: service): long-running replicas behind a stable endpoint
// (the server's router), restarted forever, never ended by a time limit, and
// scaled between min and max by the autoscaler (sched/autoscale.h). A
// service's one task group has `max` replicas; min is its floor.
struct ProbeSpec {
  std::string path = "/";    // HTTP GET on the replica's port; 2xx/3xx = ready
  Duration period = 1'000'000;   // between probes
  Duration timeout = 1'000'000;  // for one probe's answer
  // A replica not ready this long after it started is restarted (loading
  // weights takes time); one ready once that then fails `failure_threshold`
  // probes in a row is out of the router, and restarted if it stays out this
  // long again.
  Duration startup = 600'000'000;
  int32_t failure_threshold = 3;
  bool operator==(const ProbeSpec&) const = default;
};

// A metric the service's replicas expose in Prometheus text on
// service.metrics_path (vLLM's vllm:num_requests_waiting,
// vllm:gpu_cache_usage_perc, ...): summed over a replica's series, and the
// target is per replica (desired = ceil(sum over replicas / target)).
struct MetricTarget {
  std::string name;
  double target = 0;
  bool operator==(const MetricTarget&) const = default;
};

struct AutoscaleSpec {
  // Targets per replica (0 = not used): requests in flight, and the used
  // fraction of its GPUs' memory. The desired count is the largest any target asks.
  double target_inflight = 0;
  double target_gpu_memory = 0;
  std::vector<MetricTarget> metrics;
  Duration stable_window = 60'000'000;  // averages over this
  Duration panic_window = 6'000'000;    // and over this, to scale up fast
  double panic_threshold = 2.0;  // panic when the panic window asks this many times the ready replicas
  double tolerance = 0.1;        // no change within +-10% of the target
  Duration scale_down_delay = 300'000'000;  // scale down only to the most asked over this long
  // Replicas beyond what the load asks (within max): warm capacity that
  // absorbs a rise while the scale-up's own replicas start, or while the
  // training it evicts checkpoints (Knative's target-burst-capacity, in
  // replicas). 0 = none.
  int32_t spare = 0;
  bool enabled() const { return target_inflight > 0 || target_gpu_memory > 0 || !metrics.empty(); }
  bool operator==(const AutoscaleSpec&) const = default;
};

struct ServiceSpec {
  int32_t min_replicas = 1;
  int32_t max_replicas = 1;
  int32_t port = 0;  // replica r listens on port + r ($PORT)
  ProbeSpec readiness;
  std::string metrics_path = "/metrics";  // where autoscale.metrics are read
  AutoscaleSpec autoscale;
  bool operator==(const ServiceSpec&) const = default;
};

enum class JobKind { kBatch, kService };

struct JobSpec {
  std::string name;
  JobKind kind = JobKind::kBatch;
  ServiceSpec service;  // kind service only
  bool is_service() const { return kind == JobKind::kService; }
  std::string queue = "default";
  std::string priority_class = "normal";  // empty when given as an integer
  int32_t priority = 500;
  std::vector<TaskGroupSpec> tasks;
  TopologyConstraint topology;
  Labels node_selector;
  // Elastic: starts with min_replicas or more, grows toward tasks[0].replicas
  // when GPUs are free and shrinks (down to min) when others need them; each
  // resize restarts the gang with its new world size. 0 = not elastic.
  int32_t elastic_min_replicas = 0;
  // Elastic as scheduled: one task group of whole GPUs (or none). A journal
  // from before elastic scheduling may hold other shapes; they run as gangs.
  // A service of one task group is elastic too, between its min and max
  // (elastic_min_replicas = its min), on whole GPUs, fractions or MIG
  // slices, and a resize keeps its running replicas (ClusterState's
  // JobResized).
  bool elastic() const {
    return elastic_min_replicas > 0 && tasks.size() == 1 && (is_service() || !tasks[0].gpu_share.shared());
  }
  bool preemptible = false;
  CheckpointSpec checkpoint;
  RestartSpec restart;
  Duration time_limit = 0;  // 0 = none
  std::vector<MountSpec> mounts;

  int64_t TotalReplicas() const;
  int64_t TotalGpus() const {  // whole GPUs over all replicas (inline: orders read it per job a cycle)
    int64_t n = 0;
    for (const auto& t : tasks) n += static_cast<int64_t>(t.replicas) * t.gpus;
    return n;
  }
  // Whole GPUs plus its GPU fractions rounded up to whole GPUs: what quotas,
  // fair share and preemption cost count.
  int64_t GpuEquivalent() const;
  // About what the spec holds in memory (its strings, with a little for
  // each, and a base): the server bounds a user's pending specs by it, and a
  // dry run's copies.
  int64_t Bytes() const;
  bool operator==(const JobSpec&) const = default;
};

// Cluster-independent checks. Errors are InvalidArgument with a field path.
// Every job the state holds passes these (journal replay included).
Status ValidateJobSpec(const JobSpec& spec);

// `priority:` as a job spec (or `rota submit --priority`) gives it: a number
// (0..1,000,000,000) sets the priority itself, anything else names a priority
// class (resolved against the cluster's by ResolveJobPolicy).
Status SetPriority(std::string_view text, JobSpec* spec);
// What a job submitted now must also satisfy (rules newer than some
// journals: elastic shape, MIG profile names, rootfs): submission and job files.
Status ValidateNewJobSpec(const JobSpec& spec);
// Every rule the spec breaks, not only the first (empty when it is valid):
// ValidateJobSpec's, and with `new_job` ValidateNewJobSpec's too, in the
// order those check them. A user fixes a file once, not once an error.
std::vector<Status> JobSpecErrors(const JobSpec& spec, bool new_job);

// A job array as `rota submit --count` and POST /v1/jobs?count= give it, in
// sbatch --array's terms: "N" (indices 0..N-1), "A-B" (A..B), and either
// with "%K" (at most K elements run at once: "0-99%8"). A count is not
// bounded here: the caller checks it against its limits (1..kMaxArray, the
// config's max_array).
inline constexpr int64_t kMaxArrayIndex = 10'000'000;
struct ArrayRange {
  int64_t count = 1;
  int64_t first_index = 0;
  int32_t max_running = 0;  // 0 = no limit
  bool range = false;       // written A-B: an array even of one element
  // Submitted as an array (ROTA_ARRAY_* in its tasks), not as one job.
  bool is_array() const { return count > 1 || range || max_running > 0; }
};
StatusOr<ArrayRange> ParseArrayRange(std::string_view text);

std::string_view TopologyModeName(TopologyMode mode);
std::string_view RestartPolicyName(RestartPolicy policy);
std::string_view JobKindName(JobKind kind);
// What `rota apply` may change in a running service: its command, env,
// rootfs, readiness, autoscaling and replica range; not its resources,
// queue, priority, placement constraints or port (InvalidArgument naming
// the field otherwise).
Status ServiceUpdateAllowed(const JobSpec& from, const JobSpec& to);

}  // namespace rota
