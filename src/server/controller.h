// Controller: the control plane's state machine. It owns the ClusterState and
// the Store on one actor thread; every mutating call becomes a message to it.
// The actor drains all queued messages into one batch, applies their events
// to the state as it validates them, appends the batch to the store in one
// durable transaction (group commit), and only then answers the callers. A
// failed append (a full or read-only disk) undoes the batch in memory and
// refuses its callers (InsufficientStorage, HTTP 507): nothing is ever
// acknowledged that is not durable, reads keep working, and writes resume
// when the disk takes them again.
//
// A scheduler thread runs the engine on the latest immutable snapshot
// whenever something changed (many triggers coalesce into one pending cycle)
// and at least every `schedule_interval`; its decisions go back to the actor,
// which validates them against the current state before journaling them.
//
// Thread-safety: all public methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "api/agent_protocol.h"
#include "base/clock.h"
#include "base/random_hex.h"
#include "core/cluster_config.h"
#include "sched/engine.h"
#include "server/auth.h"
#include "server/batch.h"
#include "server/gpu_history.h"
#include "server/job_lifecycle.h"
#include "server/recovery.h"
#include "server/usage.h"
#include "core/right_size.h"
#include "store/store.h"

namespace rota::server {

struct ControllerOptions {
  ClusterConfig config;          // queues, priority classes, profile; node_groups are declared nodes
  const Clock* clock = nullptr;  // required
  uint64_t snapshot_every = 10'000;              // journal events between snapshots
  Duration schedule_interval = kMicrosPerSecond;  // a cycle at least this often
  // A change (a submission, an exit) wakes the scheduler for a cycle. Off,
  // cycles run only on ScheduleNow and every schedule_interval: for a driver
  // that owns time (the test that replays a trace through the controller and
  // the simulator alike, sim/differential_test.cc).
  bool cycle_on_change = true;
  // While nothing changes (the state's revision stands and the last cycle
  // decided nothing) only time moves the answer (reservation windows,
  // minimum run times, fair-share decay): cycles then come no more often
  // than 40 times their own cost, so they take at most 2.5% of a core, and
  // at least every quiet_interval. (A cycle over a million pending jobs
  // costs a sort; one over a few hundred runs every interval as before.)
  Duration quiet_interval = 30 * kMicrosPerSecond;
  Duration node_timeout = 30 * kMicrosPerSecond;  // heartbeat age after which a node shows as lost
  // How long an agent's tasks run on after the last heartbeat the server
  // answered before they stop themselves (0 = node_timeout). A lost node's
  // gangs are requeued only after this plus kFenceMargin.
  Duration fence_after = 0;
  size_t max_batch = 0;  // messages per journal transaction; 0 = all queued (group commit), 1 = none
  // Right-sizing: a running job whose GPUs stay below `idle_utilization_pct`
  // for `idle_after` is flagged idle; one whose peak GPU memory stays under
  // `overprovisioned_pct` of its GPUs' memory for that long, over-provisioned.
  int32_t idle_utilization_pct = 5;
  Duration idle_after = 30 * 60 * kMicrosPerSecond;
  int32_t overprovisioned_pct = 25;
  // Accounting: usage records older than this are dropped (0 = kept forever).
  Duration usage_retention = 400LL * 24 * 3600 * kMicrosPerSecond;
  // A job that ended this long ago leaves the state (JobsForgotten): it is
  // no longer listed or shown, and its memory goes; its usage records stay
  // (usage_retention). 0 = every job is kept.
  Duration job_retention = 14LL * 24 * 3600 * kMicrosPerSecond;
  // Where the API keeps the logs agents ship (logs_dir/<job>/*.log): a
  // forgotten job's go with it (DropLogsOf). "" = none kept.
  std::string logs_dir;
  // Per-GPU history (server/gpu_history.h): minute points kept this long,
  // hour points this long (0 = forever), written every history_flush
  // (0 = only by FlushHistory and at Stop: tests).
  Duration history_minutes = 8LL * 24 * 3600 * kMicrosPerSecond;
  Duration history_hours = 400LL * 24 * 3600 * kMicrosPerSecond;
  Duration history_flush = 5 * 60 * kMicrosPerSecond;
  // Preemption: a gang runs at least this long before it can be evicted; an
  // evicted gang that has not stopped this long after its grace period is
  // requeued anyway (its agent is gone or stuck).
  Duration min_runtime = 10 * 60 * kMicrosPerSecond;
  Duration preempt_slack = 30 * kMicrosPerSecond;
  // The Unix user the server runs as: the bootstrap admin token is theirs,
  // and their jobs may run as uid 0 where that is who they are.
  std::string owner;
};

// Slack between an agent's fence deadline and the server's requeue of its
// gangs: the agent's lease starts when it reads the answer (after the server
// sent it), and supervisors check it every 100 ms.
inline constexpr Duration kFenceMargin = 2 * kMicrosPerSecond;
// How often, at most, the scheduling loop looks for silent nodes and
// overdue jobs when no cycle is asked for (scheduling_loop.cc).
inline constexpr Duration kCheckEvery = kMicrosPerSecond / 10;  // 100 ms

// The agent protocol's types (api/agent_protocol.h).
using api::GpuTelemetry;
using api::HeartbeatReport;
using api::TaskAssignment;
using api::TaskReport;

// What the control plane knows of a node beyond the journaled state.
struct NodeLive {
  bool registered = false;  // an agent has registered since this server started
  bool expected = false;    // runs work from before a restart: must heartbeat or be declared lost
  bool simulated = false;
  bool mps = false;  // an MPS control daemon serves its GPUs
  std::string address;
  // The agent that registered last (its AgentInstance; "" from an agent
  // older than that): another's registration is refused while it reports,
  // its reports and watches after that.
  std::string instance;
  // When it last reported, on the clock's Steady() (a step of the wall
  // clock neither declares a healthy node lost, with its gangs requeued
  // beside their running ranks, nor keeps a dead one).
  TimePoint last_heartbeat = 0;
  std::vector<GpuTelemetry> gpus;
  // Each GPU's energy in the reports since this server started (mJ, by
  // index): a counter for /metrics.
  std::map<int32_t, int64_t> energy_mj;
  // A report's GPUs, those of the node's `count` only (an agent cannot grow
  // the server's tables by naming GPUs its node does not have).
  void Note(const std::vector<GpuTelemetry>& report, int32_t count) {
    if (report.empty()) return;
    gpus.clear();
    for (const GpuTelemetry& g : report) {
      if (g.index < 0 || g.index >= count) continue;
      gpus.push_back(g);
      if (g.samples > 0 && g.energy_mj > 0) energy_mj[g.index] += g.energy_mj;
    }
  }
};

struct ControllerMetrics {
  std::vector<uint64_t> cycle_buckets;  // histogram counts for kCycleBuckets
  double cycle_sum_seconds = 0;
  uint64_t cycles = 0;
  // The actor's batches (kBatchBuckets): from taking their messages to
  // answering them (applied, journaled, published), and of that the
  // journal's append; batches that journal nothing, or that the journal
  // refused, are not counted.
  std::vector<uint64_t> batch_buckets, append_buckets;
  double batch_sum_seconds = 0, append_sum_seconds = 0;
  uint64_t jobs_submitted = 0;
  uint64_t preemptions = 0;
};
inline constexpr double kCycleBuckets[] = {0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0};
inline constexpr double kBatchBuckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0};

// What keys gangs' rendezvous ports: 126 random bits the store keeps
// (Store::Keep: made by the first server that leads on it, read by every
// replica), and when they were made: a gang attempt that began before
// (bound by a server of an older version, which has its ranks meet at the
// old port) keeps the old port.
struct RendezvousKey {
  uint64_t key[2] = {0, 0};
  TimePoint since = 0;
};
// The names it is kept under (`rota store migrate` copies them).
inline const std::vector<std::string> kRendezvousKeyNames = {"rendezvous_since", "rendezvous_key_0", "rendezvous_key_1"};
StatusOr<RendezvousKey> LoadRendezvousKey(Store& store, TimePoint now);
// A gang's rendezvous port (MASTER_PORT) for its gang attempt, which began
// `began` (its bind or last resize): HMAC-SHA256 of the job and the attempt
// under the key, in kRendezvousPorts, so that another user cannot compute
// it. Before, it was 20000 + (job id x 7 + attempt) mod 20000, which any
// user could, and bind on the gang's first node before its rank 0; an
// attempt that began before the key was made keeps that port. It is not
// secret: a user with a task on the gang's nodes may see it (docs/trust.md).
// (The range is below Linux's ephemeral ports, 32768 and up by default,
// which other processes' connections take at random.)
inline constexpr std::pair<int32_t, int32_t> kRendezvousPorts{20000, 32767};
int32_t RendezvousPort(const RendezvousKey& key, JobId job, int64_t gang_attempt, TimePoint began);

class Controller {
 public:
  Controller(ControllerOptions options, std::unique_ptr<Store> store);
  ~Controller();

  // Replays the store, adds the config's declared nodes that are missing,
  // and starts the actor and scheduler threads.
  Status Start();

  // A standby's controller (server/replica.h), before any Start:
  // StartFollowing replays the store and publishes the state for readers,
  // running nothing; CatchUp applies the events the leader has appended
  // since (Store::Follow) and publishes them; ReloadTokens reads the tokens
  // again. A later Start (the takeover) begins from that state. A CatchUp
  // that fails leaves the state unusable (the caller builds a new one).
  Status StartFollowing();
  Status CatchUp();
  Status ReloadTokens();
  void Stop();

  // Accounting: the usage records of attempts that ended in [since, until),
  // and with `running` the running attempts' measure so far (end
  // "running"); a user's own only unless `who` is an admin.
  StatusOr<std::vector<UsageRecord>> Usage(const Principal& who, TimePoint since, TimePoint until, bool running) const;
  // One job's records, by attempt (a forgotten job's too); none unless it
  // is `who`'s or `who` is an admin.
  StatusOr<std::vector<UsageRecord>> UsageOfJob(const Principal& who, JobId job) const;
  // What a job's report needs (describe, GET /v1/jobs/ID/usage): the job's
  // own records, its running attempt's measure so far (`job`, when running),
  // and its family's last attempts (`user`'s jobs named `name`, kept in
  // memory as for FamilyShape), not a month of every tenant's records read
  // for each; none unless it is `who`'s or `who` is an admin.
  StatusOr<std::vector<UsageRecord>> JobUsage(const Principal& who, JobId id, const std::string& user,
                                              const std::string& name, const JobRecord* job = nullptr) const;
  // A running job's attempt measured so far (UsageTracker::Peek).
  UsageRecord PeekUsage(const Snapshot& snap, const JobRecord& job) const {
    return usage_.Peek(snap, job, options_.clock->Now());
  }
  // The right size of `user`'s jobs named `name`, from their last attempts
  // (kept in memory: the last 8 of each of up to 20,000 such families, read
  // from the store's last 30 days at start): a submission's note.
  RightSize FamilyShape(const std::string& user, const std::string& name) const;
  // Those last attempts of `user`'s jobs named `name` (a copy), oldest first.
  std::deque<UsageRecord> FamilyAttempts(const std::string& user, const std::string& name) const;
  // Node `node`'s GPUs' history of `step_s` (60 or 3600) in blocks starting
  // in [since, until): what the store holds, with the blocks still filling
  // as they are now.
  StatusOr<std::vector<GpuHistoryBlock>> GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                    TimePoint until) const;
  // Writes the history's changed blocks and drops those past retention (the
  // history thread does, every history_flush).
  // `all`: the minutes under way too (at a stop).
  void FlushHistory(bool all = false);

  // Mutations: each returns once its effect is durable, or with why not.
  // Submit: InvalidArgument (bad queue or priority class), PermissionDenied
  // (queue restricted, mount not allowed, a priority not open to the user), OutOfRange (unresolvable on this
  // cluster), ResourceExhausted (a tenant limit, named).
  StatusOr<JobId> Submit(const Principal& who, JobSpec spec);
  // `count` copies of one job (a job array, 1..kMaxArray) with consecutive
  // ids: all accepted and durable, or none. Committed kArrayChunk at a time
  // so that other writers interleave; a failed chunk takes back the earlier
  // ones. (A crash between chunks leaves the committed part, never
  // acknowledged.) Returns the first id.
  static constexpr int64_t kMaxArray = 100'000;
  // Array elements committed per batch (so other writes interleave).
  static constexpr int64_t kArrayChunk = 2'000;
  StatusOr<JobId> SubmitArray(const Principal& who, JobSpec spec, int64_t count);
  // The same with the client's Idempotency-Key `request_id` (may be ""): a
  // key this user has used before returns the jobs it made (and sets
  // *replayed) instead of new ones; reused for a different spec or count it
  // is a Conflict (FailedPrecondition), naming the jobs it made.
  StatusOr<JobId> SubmitArray(const Principal& who, JobSpec spec, int64_t count, const std::string& request_id,
                              bool* replayed);
  // The same for an array given as a range (`0-99%8`: its indices, and how
  // many of its elements may run at once).
  StatusOr<JobId> SubmitArray(const Principal& who, JobSpec spec, const ArrayRange& array,
                              const std::string& request_id, bool* replayed);
  // The checks of a submission that need no state (the spec, its priority
  // class and queue, who may use them, its grace, its mounts); resolves
  // `spec` as a submission would. For a dry run; Submit runs them too.
  // `kept`: the live service `rota apply` updates, whose priority and
  // checkpoint grace (admitted before a cap came or was lowered) the new
  // spec may keep.
  Status CheckSubmission(const Principal& who, JobSpec* spec, const JobSpec* kept = nullptr) const;
  // What the tenant limits would refuse a submission of `count` copies for, taking nothing (dry runs).
  Status CheckTenantLimits(const Principal& who, const JobSpec& spec, int64_t count);
  // Cancels `ids` (at most kMaxCancelMany) in one journaled batch: one
  // status per id, in order, OK where it was cancelled, else why not
  // (NotFound for another's job, or PermissionDenied with `others_visible`,
  // as the API's job_visibility: all shows them; FailedPrecondition for one
  // that ended). An error for the whole: none was cancelled. Cancel is the
  // same for one job, others' invisible.
  Status Cancel(const Principal& who, JobId id);
  static constexpr size_t kMaxCancelMany = 10'000;
  StatusOr<std::vector<Status>> CancelMany(const Principal& who, const std::vector<JobId>& ids,
                                           bool others_visible = false);
  // Holds a pending job (it is not scheduled) or releases it, like Slurm's
  // scontrol hold/release (its owner or an admin; an admin's hold only an
  // admin releases: PermissionDenied). FailedPrecondition: not pending, or
  // already so.
  Status SetHold(const Principal& who, JobId id, bool held);
  // Puts a running job back in the queue (its tasks stop; it restarts from
  // its last checkpoint when placed again), like scontrol requeue.
  // FailedPrecondition: not running.
  Status Requeue(const Principal& who, JobId id);
  // Records that the job saved a checkpoint at `path` now (its owner or an admin).
  Status Checkpoint(const Principal& who, JobId id, const std::string& path);
  // A service's autoscaler (server/services.h): its desired replica count
  // (journaled if it changed), and a replica its readiness says to restart
  // (if it still runs that attempt).
  Status ScaleService(JobId id, int32_t desired, const std::string& reason);
  // rota apply: replaces the live service of spec's name (its owner or an
  // admin); the ServiceManager then rolls its replicas onto it.
  StatusOr<JobId> UpdateService(const Principal& who, JobSpec spec);
  // No live service but `self` holds a port of spec's (port + replica);
  // the refusal names the other service as `who` may see it.
  Status PortsFree(const Snapshot& snap, const JobSpec& spec, JobId self, const Principal& who) const;
  // Whether `who` may see `job` (job_visibility): its owner, an admin, or
  // anyone where all see all (with `own`, another's job is as if it did not exist).
  bool Sees(const Principal& who, const JobRecord& job) const;
  // The ports `who`'s live services (but `self`) claim, with `spec`'s, within
  // limits.max_service_ports_per_user (admins: any).
  Status PortsWithinLimit(const Snapshot& snap, const JobSpec& spec, const Principal& who, JobId self) const;
  // A new service's name, count and ports (Ok for any other job).
  Status ServiceSubmittable(const Snapshot& snap, const JobSpec& spec, const Principal& who, int64_t count) const;
  Status RestartReplica(JobId id, uint16_t task, uint32_t replica, int32_t attempt, const std::string& reason);
  Status SetDrain(const Principal& who, const std::string& node, bool drained, const std::string& reason = "");
  // `mps`: an NVIDIA MPS control daemon serves the node's GPUs (GPU fractions
  // there get their compute share and memory limit enforced). `instance`:
  // the agent (AgentInstance; "" from an older agent): a second agent of the
  // node's name is refused (FailedPrecondition) while the one registered
  // reports, and takes the node over once it has not for the node timeout.
  Status RegisterNode(const Principal& who, const NodeSpec& spec, bool simulated, const std::string& address,
                      bool mps = false, const std::string& instance = "");
  // `revision` (if given) gets the state revision the tasks were read at:
  // agents apply an answer only if it is not older than the last they applied
  // (a long poll and an exit report may answer out of order).
  StatusOr<std::vector<TaskAssignment>> Heartbeat(const Principal& who, const HeartbeatReport& report,
                                                  uint64_t* revision = nullptr);
  // The same without blocking the caller: `done(tasks, revision)` runs once
  // the report is durable (on the actor thread: it must only hand the
  // answer on), or at once for a report that changes nothing journaled.
  void HeartbeatAsync(const Principal& who, HeartbeatReport report,
                      std::function<void(StatusOr<std::vector<TaskAssignment>>, uint64_t)> done);
  // PermissionDenied unless `who` may report for the report's node.
  Status CheckReporter(const Principal& who, const HeartbeatReport& report) const;
  // FailedPrecondition unless `instance` ("" from an older agent: any) is
  // the agent that registered `node` last.
  Status CheckAgentInstance(const std::string& node, const std::string& instance) const;
  // The instance of the agent that registered `node` last ("" if none, or an older agent).
  std::string AgentInstanceOf(const std::string& node) const;
  // A new token for `user`. A user or admin token names a user record: a
  // name already issued needs `existing` (so a new person cannot be given
  // another's identity by a name that happens to match). `ttl` > 0 expires it.
  StatusOr<std::string> CreateToken(const Principal& who, const std::string& user, Role role, const std::string& node,
                                    Duration ttl = 0, bool existing = false);
  StatusOr<std::vector<TokenRecord>> ListTokens(const Principal& who) const;
  // Revokes the token with TokenId `id`, durably; at once for every request after.
  Status RevokeToken(const Principal& who, const std::string& id);
  // Authenticates against the tokens and the clock (expiry).
  StatusOr<Principal> Authenticate(std::string_view authorization_header) const {
    return auth_.Authenticate(authorization_header, options_.clock->Now());
  }
  // First start: creates and returns an admin token if no token exists yet; "" otherwise.
  // `save` (if given) keeps the token where the admin finds it before it is
  // stored: a token stored that nobody holds (a kill, or a full disk,
  // between the two) would lock the admin out for good, as a store with a
  // token makes none again. Its error is returned and nothing is stored.
  StatusOr<std::string> BootstrapAdminToken(const std::function<Status(const std::string&)>& save = nullptr);

  // Reads (never block on the actor).
  Snapshot snapshot() const;
  // Whether the controller's lock is held at this moment. The event loop,
  // which must not wait for it (a cycle's waiting reasons are sorted under
  // it, a large batch's jobs indexed), hands a report to a worker instead.
  // A hint: it may be taken a moment later, for as long as a report holds it.
  bool Busy() const;
  Duration FenceAfter() const { return options_.fence_after > 0 ? options_.fence_after : options_.node_timeout; }
  // Why journal writes are being refused ("" while the store writes).
  std::string StoreError() const;
  std::optional<sched::PendingReason> pending_reason(JobId id) const;
  // The queues' decayed past usage (average GPUs) as the scheduler had it
  // after its last cycle: what a projection's fair share starts from.
  std::map<std::string, double> usage_history() const {
    std::lock_guard<std::mutex> lock(mu_);
    return usage_history_;
  }
  // Right-sizing flags of a running job ("idle: ...", "over-provisioned: ..."); empty if none.
  std::vector<std::string> job_flags(const JobRecord& job) const;
  std::map<std::string, NodeLive> nodes_live() const;
  // Those of `names` only: a reader of a few nodes copies no other node's.
  std::map<std::string, NodeLive> nodes_live(const std::vector<std::string>& names) const;
  // An agent has registered `node` since this server started.
  bool NodeRegistered(const std::string& node) const;
  ControllerMetrics metrics() const;
  Duration job_retention() const { return options_.job_retention; }
  const ClusterConfig& config() const { return options_.config; }
  const Auth& auth() const { return auth_; }
  const Clock& clock() const { return *options_.clock; }
  // This process's id, random at its start: the agents apply answers (whose
  // revisions count from this start) of the server they registered with only.
  const std::string& server_id() const { return server_id_; }
  Duration node_timeout() const { return options_.node_timeout; }
  Duration min_runtime() const { return options_.min_runtime; }
  Duration preempt_slack() const { return options_.preempt_slack; }

  // How often agents report (a third of the node timeout or the fence
  // interval, whichever is shorter: a lease is renewed by each answered
  // report): announced in every answer to an agent.
  Duration heartbeat_interval() const { return std::min(options_.node_timeout, FenceAfter()) / 3; }

  // The tasks `node` should run now, read from the published state through
  // the per-node job index: O(that node's jobs), no actor round trip (agent
  // watch streams and heartbeats that change nothing). `revision` gets the
  // state revision they were read at. NotFound for an unknown node.
  StatusOr<std::vector<TaskAssignment>> NodeTasks(const std::string& node, uint64_t* revision = nullptr) const;
  // Called after each commit with the nodes whose tasks changed (on the
  // actor, outside the controller's lock: it must only queue work). Null
  // removes it; once this returns, the old listener is not running.
  void SetNodeListener(std::function<void(const std::vector<std::string>&)> listener);

  // A counter per node that moves whenever the tasks it should run change
  // (a gang bound to it, a job on it ended). Agents long-poll on it.
  uint64_t NodeVersion(const std::string& node) const;
  // Waits until NodeVersion(node) != version or `timeout` passes; true if it moved.
  bool WaitNodeChange(const std::string& node, uint64_t version, Duration timeout) const;

  // Runs one scheduling cycle now and waits for its decisions to be durable
  // (tests and `rota up` use it to avoid waiting for the interval).
  void ScheduleNow();

 private:
  // At start: cancels what an array cut short by the last stop committed
  // (its ids reserved past every id journaled), and drops its key, so that
  // an array is all or none across restarts and failovers.
  Status CancelCutArrays();
  template <typename T>
  // Runs `fn` on the actor in the next batch; its result once the batch is
  // durable. `standalone`: `fn` journals nothing and depends on no state the
  // batch changes (token records), so a failed journal write does not refuse it.
  StatusOr<T> Call(std::function<StatusOr<T>(Batch&)> fn, bool standalone = false);
  // Call without waiting: `done` gets the result once the batch is durable (on the actor).
  template <typename T>
  void CallAsync(std::function<StatusOr<T>(Batch&)> fn, std::function<void(StatusOr<T>)> done, bool standalone = false);
  StatusOr<std::vector<TaskAssignment>> HeartbeatOnActor(Batch& batch, const HeartbeatReport& report, uint64_t* revision);
  void ActorLoop();
  void SchedulerLoop();
  void SnapshotLoop();
  // Runs a cycle that answers ScheduleNow's requests up to `requested`.
  void RunOneCycle(uint64_t requested);
  sched::CycleResult cycle_;  // the scheduling loop's: its buffers kept between cycles
  // Declares nodes lost whose agents stopped heartbeating, and requeues their gangs.
  void CheckNodes();
  // On the actor: the node registry's part of a heartbeat (the agent is
  // live; a lost node is back); false (with why) if it may not report.
  Status NoteAlive(Batch& batch, const HeartbeatReport& report, std::vector<GpuTelemetry>* health_changes);
  // The binder's answer to a node: its tasks in the working state, at its
  // revision (the jobs indexed on it plus those this batch bound or resized).
  std::vector<TaskAssignment> TasksFor(Batch& batch, const std::string& node, uint64_t* revision);
  // ResourceExhausted unless `user` may submit `jobs` more now (limits.submit_rate);
  // a negative `jobs` gives back what a refused submission took.
  // Takes `jobs` from the user's submission budget (refunds if negative);
  // with !take only checks that it could.
  Status TakeSubmitBudget(const std::string& user, int64_t jobs, bool take = true);
  Status PendingLimits(const Principal& who, const JobSpec& spec, int64_t count, const Snapshot& snap);
  Status ArrayLimit(int64_t count) const;  // limits.max_array
  void Publish();
  // REQUIRES: mu_ held. Counts a journaled batch in the metrics.
  void NoteBatch(double append_seconds, double batch_seconds);
  // After a batch is durable: publishes the new state, re-indexes the jobs
  // its events name, moves the versions of the nodes they touch and tells
  // the node listener (watches).
  void PublishBatch(const std::vector<Event>& events);
  // After a batch is durable, before it is published: the attempts it ended
  // (a running job that stopped, was requeued or resized) become usage
  // records in the store. Records the store refuses wait for the next batch.
  void RecordUsage(const std::vector<Event>& events);
  // The names of the nodes a running or preempting job holds a replica on
  // in `snap`, in placement order without repeats; none for any other job.
  static std::vector<std::string> PlacedNodes(const Snapshot& snap, JobId id);
  // REQUIRES: mu_ held. Indexes job `id` under `nodes` (none: not indexed),
  // in place of the nodes it was indexed under.
  void Reindex(JobId id, std::vector<std::string> nodes);
  // REQUIRES: mu_ held. The running or preempting jobs with a replica on `node`.
  const std::set<JobId>* JobsOn(const std::string& node) const;
  // A heartbeat that changes nothing journaled (no exit of a live task, no
  // newer checkpoint, no health change, node not lost): answered from the
  // published state. False if it needs the actor.
  bool QuietHeartbeat(const HeartbeatReport& report, std::vector<TaskAssignment>* tasks, uint64_t* revision);
  // REQUIRES: mu_ held. Folds the report's GPU telemetry into the usage of the jobs on `node`.
  void FoldUsage(const Snapshot& snap, const NodeState& node, const HeartbeatReport& report);
  // Expired time limits and evicted gangs past their grace, ended or requeued.
  void CheckTimes(TimePoint now);
  // Requeues (or, for a service, drops the replicas of) the running gangs
  // with a replica on node `name`, whose tasks have fenced themselves, for
  // `why`. On the actor.
  void GiveUpGangsOn(Batch& batch, const std::string& name, const std::string& why);
  // Forgets the jobs that ended job_retention before `now` (at most once a
  // minute, at most 50,000 a pass): the jobs it forgot.
  std::vector<JobId> ForgetEnded(TimePoint now);
  // Cancels what is left of arrays partly committed whose take-back the store
  // refused too (their elements never start: they wait for a last element
  // that will not come), once it writes again.
  void TakeBackCutArrays();
  struct CutArray;
  // Cancels the committed elements of an array not accepted (SubmitArray's
  // take-back, and TakeBackCutArrays' later one).
  void CancelArrayPart(Batch& batch, const CutArray& cut);
  // Removes the logs kept of `ids` (forgotten): logs_dir/<id>/*.log and the
  // mark of a capped log, and the directory once empty (in `rota up`, the
  // local agent's job directory: the task's work/ stays). Off the actor.
  void DropLogsOf(const std::vector<JobId>& ids) const;
  // DropLogsOf every job with a directory there that the state no longer
  // holds (forgotten before a crash, between a pass and its removal): once
  // after a start.
  void DropForgottenLogs();
  void Trigger();
  TaskAssignment Assignment(const Snapshot& snap, const JobRecord& job, size_t index) const;

  ControllerOptions options_;
  std::unique_ptr<Store> store_;
  Auth auth_;
  std::unique_ptr<sched::Scheduler> scheduler_;  // scheduler thread only
  std::unique_ptr<sched::Scheduler> probe_;      // actor only: resolvability checks at submission

  // Actor-owned.
  std::unique_ptr<Recovered> recovered_;  // owns state_; what Start (or StartFollowing) recovered
  bool warm_ = false;                     // StartFollowing replayed the store already
  ClusterState& state_;
  uint64_t next_job_id_ = 1;
  // The key of gangs' rendezvous ports (RendezvousPort), loaded by Start
  // (a standby answers no agent), before any answer is made.
  RendezvousKey rendezvous_key_;
  std::atomic<uint64_t> last_snapshot_seq_{0};
  // The journal snapshot in progress: (seq, the state at it), handed from
  // the actor to the snapshot thread.
  std::mutex snapshot_mu_;
  std::condition_variable snapshot_cv_;
  std::optional<std::pair<uint64_t, Snapshot>> snapshot_pending_;
  bool snapshot_stop_ = false;
  std::thread snapshot_thread_;
  JobLifecycle lifecycle_;  // exits, restarts, requeues, time limits
  // Stopping jobs, and when a report last listed one of their replicas
  // running (under mu_: quiet heartbeats note it too); CheckTimes reads it.
  JobLifecycle::SeenRunningMap stop_seen_;
  // With mu_ held: `report`'s running replicas of stopping jobs, seen now.
  void NoteSeenRunning(const Snapshot& snap, const HeartbeatReport& report);

  std::atomic<uint64_t> store_failures_{0};  // journal writes refused in a row
  mutable std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::deque<std::function<void(Batch&)>> inbox_;
  bool stopping_ = false;
  bool trigger_ = false;
  uint64_t cycles_requested_ = 0;
  uint64_t cycles_done_ = 0;
  std::condition_variable cycle_cv_;
  std::optional<Snapshot> published_;
  mutable std::mutex store_error_mu_;  // guards store_error_ (read by /healthz on the event loop)
  std::string store_error_;  // why the last journal write failed; "" once one succeeds
  struct SubmitBucket {
    double tokens = 0;
    TimePoint last = 0;
  };
  std::map<std::string, SubmitBucket> submit_budget_;  // per user: limits.submit_rate
  // On the actor: jobs of arrays accepted but not yet all committed, per
  // user and per queue, counted against the pending limits.
  std::map<std::string, int64_t> array_reserved_user_;
  RequestIds request_ids_;  // actor only: the submissions' idempotency keys
  std::map<std::string, int64_t> array_reserved_queue_;
  // Arrays partly committed and not taken back (the store refused that too):
  // their first id, how many were committed, why (TakeBackCutArrays). Under mu_.
  struct CutArray {
    uint64_t first = 0;
    int64_t committed = 0;
    std::string why;
  };
  std::vector<CutArray> cut_arrays_;
  // The last cycle's pending jobs and why each waits (the cycle's own list,
  // swapped in: a million waiting jobs cost no map of a million nodes each
  // cycle). Sorted by id when first looked up after a cycle, not by it: with
  // several priorities the cycle's order is not id order, and most cycles'
  // reasons are never read.
  // Under their own mutex, not mu_: the first lookup after a cycle sorts a
  // million of them, and the event loop's heartbeats must not wait for that.
  mutable std::mutex reasons_mu_;
  mutable std::vector<sched::Waiting> reasons_;
  mutable bool reasons_by_id_ = false;
  std::map<std::string, double> usage_history_;  // the scheduler's, after its last cycle
  std::map<std::string, NodeLive> live_;
  // The labels the config declares per node (set at start): an agent's do
  // not replace them.
  std::unordered_map<std::string, Labels> declared_labels_;
  ControllerMetrics metrics_;
  std::map<std::string, uint64_t> node_versions_;
  // Per node, the jobs (running or preempting) with a replica there, and
  // per job the nodes it is indexed under: kept as batches commit, so a
  // heartbeat or watch reads one node's jobs, not every live job. Read under
  // mu_; written under it by one thread at a time (the actor, or a
  // follower's catch-up), which may read them without it.
  std::unordered_map<std::string, std::set<JobId>> node_jobs_;
  std::map<JobId, std::vector<std::string>> job_nodes_;
  std::mutex listener_mu_;  // guards node_listener_ (held while it runs)
  std::function<void(const std::vector<std::string>&)> node_listener_;
  UsageTracker usage_;  // right-sizing (thread-safe)
  GpuHistoryRecorder history_;  // per-GPU history (thread-safe)
  void HistoryLoop();
  std::mutex history_mu_;  // guards the history thread's wake-up and its retries
  std::condition_variable history_cv_;
  bool history_stop_ = false;
  std::vector<GpuHistoryBlock> unwritten_history_;  // blocks the store refused, retried
  TimePoint history_trimmed_at_ = 0;
  std::thread history_thread_;
  const std::string server_id_ = RandomHex(16);
  std::vector<UsageRecord> unwritten_usage_;  // actor only: records the store refused, retried
  void NoteFamilyUsage(const UsageRecord& record);
  mutable std::mutex family_mu_;  // guards family_usage_
  std::map<std::string, std::deque<UsageRecord>> family_usage_;  // by user + '\n' + name
  TimePoint usage_trimmed_at_ = 0;            // CheckNodes only: the last retention pass
  TimePoint jobs_forgotten_at_ = 0;           // ForgetEnded only (the scheduling loop): its last pass
  bool logs_swept_ = false;                   // the scheduling loop: DropForgottenLogs ran since the start
  // Scheduler thread only: what the last cycle saw and did.
  uint64_t last_cycle_revision_ = 0;
  bool last_cycle_idle_ = false;  // it decided nothing
  double last_cycle_seconds_ = 0;  // what it cost
  std::chrono::steady_clock::time_point last_cycle_at_{};
  std::optional<TimePoint> last_checked_at_;  // the last CheckNodes, on the controller's clock
  mutable std::condition_variable node_cv_;

  std::thread actor_;
  std::thread scheduler_thread_;
};

}  // namespace rota::server
