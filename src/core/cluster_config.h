// ClusterConfig: the cluster and policy configuration of DESIGN.md as plain
// data. The simulator, `rota plan` and the server read the same file (its
// YAML codec lives in src/api); this header only knows the values.
//
// ExpandNodes turns node groups into NodeSpecs: group `h100` with count 16
// gives nodes h100-0 ... h100-15, rack label h100-r<i / nodes_per_rack>,
// spine label h100-s<rack / racks_per_spine>.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/node.h"

namespace rota {

struct NodeGroupConfig {
  std::string name;
  int32_t count = 0;
  int32_t gpus = 0;
  std::string gpu_model;
  MemoryMiB gpu_memory = 0;
  int32_t nvlink_islands = 1;
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  int32_t nodes_per_rack = 0;   // 0 = the whole group is one rack
  int32_t racks_per_spine = 0;  // 0 = all of the group's racks share one spine
  Labels labels;
  // MIG mode: `mig: [3g.40gb, 3g.40gb]` puts the group's GPUs (the first
  // `mig_gpus` of each node; -1 = all) in MIG mode with these instances;
  // `mig: []` in MIG mode with none yet (the scheduler partitions on demand).
  bool has_mig = false;
  std::vector<std::string> mig;
  int32_t mig_gpus = -1;
  bool spot = false;
  // What one of its GPUs costs an hour, in millionths of the accounting
  // currency (-1 = accounting.gpu_hour_price of its model, if any).
  int64_t gpu_hour_price = -1;
};

// `accounting:` prices for the usage report's cost: per GPU model, for the
// nodes no node group prices (agents that register), in millionths.
struct AccountingConfig {
  std::string currency;  // shown beside costs ("USD"); "" = none
  std::map<std::string, int64_t> gpu_hour_price;
};

struct QueueConfig {
  std::string name;
  int32_t weight = 1;
  std::map<std::string, int64_t> quota;            // guaranteed GPUs per model
  std::map<std::string, int64_t> borrowing_limit;  // per model; absent = unlimited
  std::map<std::string, int64_t> lending_limit;
  std::vector<QueueConfig> children;
  std::vector<std::string> users;  // who may submit here (and below); empty = anyone
  // What GPUs its jobs (and those below) may ask for: "any", "whole" (whole
  // GPUs only: training tiers) or "shares" (GPU fractions only: inference).
  std::string accepts = "any";
  // Its jobs (and those below) may run as uid 0 on the nodes. Off by
  // default: a user whose account is root is refused unless a queue says so
  // (the server's own user, the admin, always may).
  bool allow_root = false;
  int64_t max_pending = 0;  // pending jobs in this leaf queue (0 = limits.max_pending_per_queue)
  // The highest priority its users' jobs (and those below) may have, as the
  // config gives it (a priority class's name, or a number; "" = no limit)
  // and its value (-1 = none): a team's queue kept from `high`, as a
  // Kubernetes ResourceQuota scoped to a PriorityClass or a Slurm
  // partition's AllowQos keeps a namespace or partition from one.
  std::string max_priority;
  int64_t max_priority_value = -1;
};

// What one tenant may put in the queue (`limits:` in the config); a
// submission past a limit is refused with 429 naming it.
struct TenantLimits {
  int64_t max_pending_per_user = 100'000;
  int64_t max_pending_per_queue = 1'000'000;
  // What one user's pending specs may hold in the server's memory, in all
  // (JobSpec::Bytes; an array's shared spec once): 100,000 pending jobs of
  // a 1 MiB spec each would be 100 GiB.
  int64_t max_pending_bytes_per_user = 512LL << 20;
  int64_t max_array = 100'000;  // elements of one job array
  // Job submissions (array elements count one each) per user and second,
  // with a burst of one max_array.
  int64_t submit_rate = 5'000;
  // Task logs the server keeps per job (shipped by remote agents).
  int64_t log_cap_bytes = 64LL << 20;
  // Node ports one user's live services may claim, in all (a service's
  // replica r listens on port + r on any node, so its range is kept from
  // every other service): no tenant can take the port space. Admins: any.
  int64_t max_service_ports_per_user = 1'024;
  // The longest checkpoint.grace a job may ask: its tasks run that long
  // after a stop signal (a cancel, a time limit, an eviction), and a task
  // that ignores the signal keeps its GPUs for all of it (Slurm's GraceTime
  // and KillWait are the admin's alone).
  Duration max_checkpoint_grace = 15 * 60 * kMicrosPerSecond;
};

// A rota user's Unix account on the nodes, where it is not found by name
// (NSS): `accounts: [{user: alice, uid: 1001, gid: 1001}]`.
struct AccountConfig {
  std::string user;
  int64_t uid = -1;
  int64_t gid = -1;  // -1 = the account's primary group (or = uid)
};

// Where job mounts and rootfs may come from: paths under `prefix`,
// read-only unless `read_write`.
struct MountRule {
  std::string prefix;
  bool read_write = false;
};

struct PriorityClassConfig {
  std::string name;
  int32_t value = 0;
  bool preemptible = false;
  // Who may ask for it (admins always may): anyone unless `restricted`,
  // then only `users` (none: admins only). A priority goes ahead of every
  // queue's fair share and may evict, so the built-in `critical` is the
  // admins' (as Kubernetes keeps its system classes to kube-system).
  bool restricted = false;
  std::vector<std::string> users;
  bool OpenTo(const std::string& user) const {
    return !restricted || std::find(users.begin(), users.end(), user) != users.end();
  }
};

struct PluginConfig {
  std::string name;
  int32_t weight = 1;
};

struct ProfileConfig {
  std::string name = "default";
  std::vector<PluginConfig> plugins;  // empty = the default profile
  // The cycle's actions in order (empty = allocate, shrink-elastic, preempt,
  // reserve, grow-elastic): see sched/actions/action.h.
  std::vector<std::string> actions;
  // Where GPU fractions go: "fgd" (fragmentation gradient descent over the
  // live jobs' task mix, best fit on ties) or "bestfit" (the GPU left fullest).
  std::string share_placement = "fgd";
};

struct ClusterConfig {
  std::vector<std::string> topology{"nvlink", "node", "rack", "spine"};
  std::vector<NodeGroupConfig> node_groups;
  std::vector<std::string> drained;
  std::vector<QueueConfig> queues;  // empty = one queue "default"
  std::vector<PriorityClassConfig> priority_classes;  // empty = DefaultPriorityClasses()
  ProfileConfig profile;
  // Fair share counts past usage too, decayed with this half-life (0 = only
  // what queues hold now).
  Duration fair_share_half_life = 7 * 24 * 3600 * kMicrosPerSecond;
  // Backfill: how many blocked jobs (in order) get a reservation each cycle,
  // and how far ahead one may start (0 = any time); later jobs backfill around them.
  int32_t reservation_depth = 1;
  Duration reservation_window = 0;
  TenantLimits limits;
  std::vector<AccountConfig> accounts;
  // Mounts and rootfs of non-admin users must lie under one of these (none
  // configured: users may name neither).
  std::vector<MountRule> allowed_mounts;
  // Who sees which jobs (Slurm's PrivateData, inverted): "all", the
  // default as in Slurm (every user sees every job's owner, queue, size,
  // state and reason, to know whom they wait behind; only its owner and
  // admins see its spec, logs and environment, or act on it) or "own"
  // (users see their own jobs; admins every one).
  std::string job_visibility = "all";
  AccountingConfig accounting;
  // One GPU-hour on node `node` (of `model`), in millionths: its node
  // group's price, else its model's (-1 = none declared).
  int64_t GpuHourPrice(const std::string& node, const std::string& model) const;
};

// low 100 (preemptible), normal 500, high 1000, inference 2000 (services'),
// critical 10000 (admins only).
std::vector<PriorityClassConfig> DefaultPriorityClasses();
// The classes jobs may name: the config's, else the defaults. (A config
// that lists its own still has the built-in inference, services' default,
// where it lists none of that name.)
std::vector<PriorityClassConfig> PriorityClasses(const ClusterConfig& config);
// The class `name` names among `classes` (PriorityClasses); the built-in
// inference (a service's default) where they have none of that name; else
// nullptr.
const PriorityClassConfig* FindPriorityClass(const std::vector<PriorityClassConfig>& classes, const std::string& name);

// Checks the config and expands its node groups, in declaration order.
StatusOr<std::vector<NodeSpec>> ExpandNodes(const ClusterConfig& config);

// Sets spec->priority from spec->priority_class (when named) using the
// config's classes; checks that spec->queue is a leaf queue.
Status ResolveJobPolicy(const ClusterConfig& config, JobSpec* spec);

// The queue on `path` with the lowest max_priority (which is the one that
// holds), or nullptr if none has one.
const QueueConfig* PriorityCapOnPath(const ClusterConfig& config, const std::string& path);
// PermissionDenied unless `user` may submit to leaf queue `path`: every queue
// on the path that lists users must list this one (admins always may).
Status QueueAllows(const ClusterConfig& config, const std::string& path, const std::string& user, bool admin);
// Whether `user` may ask for `spec`'s priority (after ResolveJobPolicy):
// a class only where it is open to them, a number only up to the highest
// class open to them, and either only up to the max_priority of every
// queue on the job's path. Admins may ask for any. PermissionDenied naming
// the class, the highest value, or the queue, otherwise.
// `kept`: the priority the job has already (a live service that `rota
// apply` updates), allowed again whatever the caps are now (-1: none).
Status PriorityAllowed(const ClusterConfig& config, const JobSpec& spec, const std::string& user, bool admin,
                       int64_t kept = -1);

// PermissionDenied, naming the field and the rule, unless every mount and
// rootfs of `spec` lies under an allowed prefix (read-write mounts only
// under read-write rules); admins may mount anything.
Status MountsAllowed(const ClusterConfig& config, const JobSpec& spec, bool admin);

// InvalidArgument, naming the field and the limit, if `spec` asks a longer
// checkpoint.grace than limits.max_checkpoint_grace.
Status GraceAllowed(const ClusterConfig& config, const JobSpec& spec);
// The grace a job's tasks get (what it asked, at most the limit: a job
// stored before the limit was lowered gets the limit).
Duration StopGrace(const ClusterConfig& config, const JobSpec& spec);

// True if some queue on `path` allows uid 0.
bool RootAllowedOnPath(const ClusterConfig& config, const std::string& path);

// The queues from the top down to `path` ("research/nlp": research, nlp);
// stops at the first name that is not there.
std::vector<const QueueConfig*> QueuesOnPath(const ClusterConfig& config, const std::string& path);

// The tightest GPU tier on `path`: "whole", "shares", or "any".
std::string AcceptsOnPath(const ClusterConfig& config, const std::string& path);

// Leaf queue paths ("research/nlp"), or {"default"} when none are configured.
std::vector<std::string> LeafQueuePaths(const ClusterConfig& config);

}  // namespace rota
