// Agent: the node agent. Registers its node with the server, then every
// heartbeat reports GPU telemetry and the state of its tasks and receives
// the tasks it should run (an idempotent reconcile loop): it starts what is
// missing and stops what is no longer wanted.
//
// Three threads: one watches the server (a long-lived stream of this node's
// tasks, pushed as they change, resumed after any break with jittered
// backoff), one sends periodic heartbeats (the interval the server
// announces: its node timeout / 3), one reaps exited processes every 20 ms
// and reports them (and new checkpoints) at once. With `watch` off, the
// heartbeat long-polls for new work instead (the older transport).
//
// A task's process sees exactly its GPUs (CUDA_VISIBLE_DEVICES,
// NVIDIA_VISIBLE_DEVICES), ROTA_JOB_ID, ROTA_TASK, and the distributed
// training variables MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK,
// NODE_RANK and ROTA_HOSTFILE. Its output goes to
// LOGS_DIR/<job id>/<task>-<replica>.log.
//
// Every task started with a state directory runs under a supervisor and has
// a durable record there (job, replica, attempt, pids, cgroup): a restarted
// agent adopts the tasks still running, so a rank never runs twice, and a
// task whose node lost the control plane for the fence interval stops on
// its own (launcher.h). Stop() leaves supervised tasks running for the next
// agent to adopt.
//
// Thread-safety: Start/Stop from one thread; the loop runs on its own.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <nlohmann/json_fwd.hpp>
#include <random>
#include <deque>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agent/cgroups.h"
#include "agent/inventory.h"
#include "agent/launcher.h"
#include "agent/meter.h"
#include "api/agent_protocol.h"
#include "api/server_list.h"

namespace httplib {
class Client;
}

namespace rota::agent {

struct AgentOptions {
  // The server, or every replica of a replicated one ("URL1,URL2,..."): the
  // agent follows the leader across them (api/server_list.h).
  std::string server = "http://127.0.0.1:7070";
  std::string token;
  // Over https the server's certificate is verified, and its name against
  // the URL's host: against `ca_cert` (a PEM file of the certificates to
  // trust: the CA that signed the server's, or the server's own), else the
  // system's CAs. An agent that trusted any certificate would hand its token
  // to, and run the tasks of, whoever answers. `insecure_skip_tls_verify`
  // turns that off (`rota up`'s own agent, on loopback to its own process).
  std::string ca_cert;
  bool insecure_skip_tls_verify = false;
  std::string node_name;  // default: the host name
  std::string address;    // how other nodes reach this one (MASTER_ADDR); default: the node name
  Inventory inventory;
  std::string logs_dir;
  // How often to report; 0 = what the server announces (its node timeout / 3).
  int heartbeat_ms = 0;
  // Watch the server for new work (one long-lived stream, heartbeats only
  // report); false = the older long poll on the heartbeat.
  bool watch = true;
  int stop_grace_ms = 10000;  // SIGTERM, then SIGKILL after this
  Labels labels;
  // A file listing GPUs to report unhealthy, one "INDEX REASON" a line (for
  // simulated inventories and tests; NVML health is read directly).
  std::string health_file;
  int32_t max_temperature_c = 90;  // above this a GPU is reported unhealthy
  // Where the GPU device nodes are (nvidia<N>): the devices cgroup denies a
  // task every one but its own. Tests point it at stand-ins.
  std::string device_dir = "/dev";
  // The driver's MIG capabilities (minors of /dev/nvidia-caps/*), read to
  // leave a MIG task its own instance's capability alone.
  std::string mig_caps_proc = "/proc/driver/nvidia/capabilities";
  // Where to put tasks' CPU and memory limits; "" = no limits.
  std::string cgroup_root = "/sys/fs/cgroup";
  // Where no device controller can keep a task off the node's other GPUs
  // (no writable cgroups, no BPF), tasks of other accounts that do not hold
  // every GPU run anyway (--allow-unisolated-gpus); by default they do not start.
  bool allow_unisolated_gpus = false;
  // Tasks that name a rootfs run in OCI containers: "runc", "crun" or "auto".
  std::string oci_runtime = "auto";
  // Where the agent keeps a durable record of each task it started (and the
  // lease its tasks' supervisors fence on); "" = no records: tasks are
  // stopped with the agent and cannot be adopted.
  std::string state_dir;
  // How long tasks run on after the last heartbeat the server answered
  // before they fence themselves; the server's answers override it.
  int fence_after_ms = 30000;
  // Send task logs to the server with the heartbeats (so `rota logs` works
  // for this node); off for the agent inside `rota up`, which shares the
  // server's log directory.
  bool ship_logs = true;
  // How often the GPUs are sampled for accounting (GpuMeter; each report
  // carries the samples since the last): 0 = only at reports.
  int meter_interval_ms = 1000;
  // Free space the state and logs directories keep: below it (or on a
  // read-only file system) the agent reports a disk problem, and the server
  // drains the node until it clears (HeartbeatReport::disk_problem). 0 = off.
  int64_t disk_reserve_mib = 64;
  // The processes and threads one task may hold at once (its cgroup's
  // pids.max; a container's pids limit), so that a fork bomb takes down its
  // own task, not the node. 0 = no limit.
  int64_t task_pids_max = 32768;
};

// Why the file systems of `dirs` cannot take new tasks ("" = they can):
// one cannot be read, is read-only, has fewer than `reserve_mib` MiB free
// (`had_problem`: fewer than half as much again, so that a disk near the
// line does not drain and undrain the node at every report), or no inodes
// left. Nothing with a reserve of 0.
std::string DiskProblem(const std::vector<std::string>& dirs, int64_t reserve_mib, bool had_problem = false);

// What keeps a node's task runtime from taking new tasks though its disk is
// fine (HeartbeatReport::runtime_problem): the server drains the node
// rather than send it tasks that would fail there (Slurm drains a node
// whose prolog fails or whose job's processes it cannot kill):
//  - kExecTimeoutsToDrain starts in a row, within kWindow, whose program
//    did not exec within 10 s (a hung file system; each held the agent that
//    long), of at least two users: a user can make the exec of a program of
//    theirs hang at will (on a FUSE mount of their own), and must not drain
//    nodes by it. Only a start that execs ends the run; the drain lifts once
//    fewer than that many are left within the window (a drained node gets
//    no start that could show it well: the next starts try it). With
//    `one_user` (an agent that is not root runs every task as itself) there
//    is no other tenant, and one user's count.
//  - a container the OCI runtime could not delete (its delete hung and was
//    killed: processes that will not die, which may hold its GPUs), until
//    it is gone: the agent tries again (Agent::ReapDeletes).
// What it says names no job or container (a drain's reason is every user's
// to read); the agent's log does.
class RuntimeTrouble {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr int kExecTimeoutsToDrain = 3;
  static constexpr Clock::duration kWindow = std::chrono::minutes(10);
  explicit RuntimeTrouble(bool one_user = false) : one_user_(one_user) {}
  // A start of `uid`'s whose program did not exec in time.
  void ExecTimedOut(uid_t uid, Clock::time_point now);
  // A start whose program did exec.
  void Execed() { exec_timeouts_.clear(); }
  // `container`'s delete was killed after it hung / the container is gone.
  void DeleteHung(const std::string& container) { stuck_.insert(container); }
  void ContainerGone(const std::string& container) { stuck_.erase(container); }
  // What to report ("" = none).
  std::string Problem(Clock::time_point now) const;

 private:
  bool one_user_;
  // Since the last start that execed: when each timed out, and whose (the
  // last 16 within kWindow).
  std::deque<std::pair<Clock::time_point, uid_t>> exec_timeouts_;
  std::set<std::string> stuck_;  // containers the runtime could not delete
};

// Why a server could not listen on TCP `port` of every address, IPv4 and
// IPv6, now ("" = it could): another process holds it. A gang's rank 0 is
// not started on a rendezvous port another process holds.
std::string PortTaken(int port);

// Which agent this is, for the server to tell two agents of one node name
// apart (a second one started by mistake, a cloned machine): 32 hex digits
// kept in `state_dir`/agent-id, so that the same agent restarted keeps them
// (a new random one without a state directory).
std::string AgentInstance(const std::string& state_dir);

class Agent {
 public:
  explicit Agent(AgentOptions options);
  ~Agent();
  // Starts the loop (it keeps retrying registration until the server answers).
  void Start();
  void Stop();  // stops every task it runs, then the loop

 private:
  struct Task;
  static void NotStarted(Task* t, const std::string& log_path, const std::string& why);
  // Sets an ended supervised task's exit reason to api::kFenced if its
  // supervisor's fence ended it (its exit file says so).
  static void NoteFenced(Task& t);
  void PollLoop();
  void WatchLoop();
  void ReapLoop();
  void MeterLoop();
  // REQUIRES: mu_ held. Applies the server's answer (a heartbeat's or a
  // watch event): starts wanted tasks that are missing, stops unwanted ones.
  // With `may_start` false (the heartbeat thread's when watching, whose
  // next report must not wait on a start that hangs) the starts are left to
  // the reap loop, woken at once.
  void Reconcile(const api::AgentAnswer& answer, bool may_start = true);
  int IntervalMs() const;
  // Sleeps up to `ms`, or until Stop.
  void Sleep(int ms);
  // The heartbeat loop's sleep: also ends at HeartbeatSoon.
  void SleepUntilBeat(int ms);
  // The watch lost its server: report at once (to renew the tasks' lease
  // with whichever server leads now) instead of an interval later.
  void HeartbeatSoon();
  // The wait before retry number `failures` (jittered exponential).
  int Backoff(int failures);
  bool Register();
  // REQUIRES: mu_ not held. wait_ms > 0 asks the server to hold the answer until something changes.
  bool Heartbeat(int wait_ms);
  // REQUIRES: mu_ held. True if a task ended since the last report.
  bool Reap();
  void StopTask(Task& t, bool now);
  // REQUIRES: mu_ held. The task's exit status if it has ended, else -1.
  int PollTask(Task& t);
  // REQUIRES: mu_ held. Loads the records a previous agent left, adopts
  // the tasks still running and stops unrecorded ones.
  void AdoptTasks();
  // Writes the task's record (whole or not at all); false, said on stderr, if it could not.
  bool SaveRecord(const std::string& key, Task& t);
  void ForgetRecord(const Task& t);
  std::string LeaseFile() const;
  // The GPU instance id of the MIG instance assignment `a` names (-1: not MIG).
  int32_t MigGpuInstance(const api::TaskAssignment& a, const std::vector<int32_t>& gpus) const;
  // Moves the lease's deadline to `sent_at_ns` (CLOCK_BOOTTIME, when the
  // answered heartbeat was sent) + `fence_after_ms` (its answer's).
  void RenewLease(int64_t sent_at_ns, int64_t fence_after_ms);
  // REQUIRES: mu_ held. All of the task's log has reached the server (or is not shipped).
  bool LogShipped(const Task& t);

  AgentOptions options_;
  api::ServerList servers_{options_.server};
  ProcessLauncher launcher_;
  std::unique_ptr<Cgroups> cgroups_;  // null: limits not enforced
  std::mutex mu_;  // guards tasks_
  std::map<std::string, std::unique_ptr<Task>> tasks_;
  // Keys (job/task/replica/attempt) that ended here: a stale answer listing
  // one again must not start it twice. A real restart has a new attempt.
  std::set<std::string> finished_;
  // Log files (by path) and how much of each the server has; a task's entry
  // is dropped once it has ended and all of its log is shipped.
  std::map<std::string, int64_t> log_shipped_;
  std::atomic<int64_t> log_cap_{0};  // the server's log cap (AgentAnswer::log_cap_bytes), 0 = not said
  size_t ship_turn_ = 0;             // (mu_) which file's log ships first in the next report
  // The state revision of the last answer reconciled: an older answer (two
  // heartbeats in flight) is not applied. Reset when registering again.
  uint64_t applied_revision_ = 0;
  std::deque<std::string> finished_order_;  // oldest first, to keep finished_ bounded
  // Services' replicas that keep exiting start again only after a back-off
  // (1 s doubling to 60 s; reset by a run of 60 s), keyed job/task/replica.
  // A start held back waits here, and the reap loop reconciles the answer
  // again when the earliest back-off ends.
  struct ReplicaBackoff {
    int failures = 0;
    std::chrono::steady_clock::time_point not_before{};
  };
  std::map<std::string, ReplicaBackoff> backoff_;
  std::unique_ptr<api::AgentAnswer> deferred_answer_;
  std::chrono::steady_clock::time_point deferred_until_{};
  // (mu_) The OCI runtime's deletes (`delete --force`), by container id:
  // started without waiting and reaped by later passes (ReapDeletes), so
  // that a runtime stuck on a cgroup never holds mu_. `runs`: how many have
  // ended for the container since it was last started.
  struct OciDelete {
    pid_t pid = 0;     // 0: none in flight
    pid_t killed = 0;  // one killed after kOciDeleteLimit, not reaped yet
    std::chrono::steady_clock::time_point started{};
    int runs = 0;
    // One was killed, and none has deleted the container since (then
    // tried again: ReapDeletes); with what.
    bool stuck = false;
    int retries = 0;  // since it got stuck
    std::string runtime, root;
  };
  std::map<std::string, OciDelete> oci_deletes_;
  // REQUIRES: mu_ held. Starts a delete of container `id` unless one is in
  // flight; true while one is (then or still).
  bool DeleteContainer(const std::string& runtime, const std::string& id, const std::string& root);
  // REQUIRES: mu_ held. Reaps the deletes that ended; kills one that has run
  // kOciDeleteLimit (then counted as ended); forgets those that ended a
  // minute ago.
  void ReapDeletes();
  void PollDelete(const std::string& id, OciDelete& d, std::chrono::steady_clock::time_point now);
  // REQUIRES: mu_ held. Whether the start of `a` (a container) waits for a
  // delete of a stale container of its name (started here if needed).
  bool StaleContainerWaits(const api::TaskAssignment& a);
  // A task attempt's name on this machine: its cgroup's; with "rota-"
  // before it, its container's (ContainerId). Tagged with this agent's
  // instance_tag_: another agent on the machine, with a job of the same
  // number, has other names.
  std::string TaskName(uint64_t job, uint16_t task, uint32_t replica, int32_t attempt) const;
  std::string ContainerId(uint64_t job, uint16_t task, uint32_t replica, int32_t attempt) const {
    return "rota-" + TaskName(job, task, replica, attempt);
  }
  // REQUIRES: mu_ held. Notes a service replica's exit for its back-off.
  void NoteServiceExits();
  std::string instance_tag_;  // "-<hash of state_dir>" on task cgroup names ("" without a state directory)
  std::string instance_;      // AgentInstance: sent with registrations, reports and watches
  // (mu_) The server process this agent registered with last (its answer's
  // "server"): answers of another are not applied. "" = an older server.
  std::string server_id_;
  // Whether `answer` comes from that server (or either does not say):
  // Of... with mu_ held, From... takes it.
  bool OfRegisteredServer(const api::AgentAnswer& answer) const;
  bool FromRegisteredServer(const api::AgentAnswer& answer);
  // How long a task of `a` has between its stop signal and SIGKILL (the
  // job's grace, at least the agent's own), in ms.
  int GraceMs(const api::TaskAssignment& a) const;
  std::atomic<int> register_refusals_{0};
  std::atomic<int> fence_after_ms_{30000};
  std::mutex lease_mu_;           // RenewLease's (heartbeats go from two threads); guards:
  int64_t lease_sent_at_ = 0;     // the heartbeat whose answer it last wrote (its sent_at_ns)
  bool lease_failing_ = false;    // the last renewal could not be written
  std::atomic<bool> disk_short_{false};  // the last report had a disk problem
  RuntimeTrouble trouble_;              // (mu_)
  bool runtime_short_ = false;          // (mu_) the last report had a runtime problem
  std::atomic<bool> stop_{false};
  std::atomic<bool> registered_{false};
  std::atomic<int> server_interval_ms_{10000};
  std::mutex wake_mu_;  // guards wake_, rng_
  std::condition_variable wake_cv_;
  bool wake_ = false;
  bool beat_now_ = false;  // (wake_mu_) HeartbeatSoon
  std::minstd_rand rng_;
  // The reap thread's sleep: 20 ms while a task runs, is stopping or an
  // answer is deferred; with none, until Reconcile or Stop wakes it (or a
  // second passes), so that an idle agent does not wake 50 times a second.
  std::mutex reap_mu_;  // guards reap_wake_
  std::condition_variable reap_cv_;
  bool reap_wake_ = false;
  void WakeReaper();
  // Reports (heartbeats, exits, checkpoints) go on a kept-alive connection:
  // a request on an open connection, not a TCP (and TLS) handshake each,
  // which at thousands of nodes is most of the server's work for a report.
  // One client is kept between reports, to the server it was opened to; a
  // sender takes it (the poll and the reap thread may send at once: the
  // other opens one of its own), and gives it back unless it failed.
  std::mutex reporters_mu_;
  std::unique_ptr<httplib::Client> reporter_;
  std::string reporter_server_;
  // The kept client to `server` (unless `fresh`), else a new one; `*reused`
  // says which.
  std::unique_ptr<httplib::Client> TakeReporter(const std::string& server, bool fresh, bool* reused);
  void GiveBackReporter(const std::string& server, std::unique_ptr<httplib::Client> client);
  std::mutex watch_mu_;  // guards watch_client_
  httplib::Client* watch_client_ = nullptr;  // the open watch, for Stop to interrupt
  std::string watch_server_;                 // where it is open
  std::atomic<int> heartbeat_failures_{0};   // in a row (logged)
  std::atomic<bool> said_tls_{false};         // a certificate refusal was logged
  std::atomic<int64_t> last_answered_ns_{0};  // boot-time clock of the last answered heartbeat
  std::atomic<bool> watch_done_{false};  // the watch thread has returned
  std::thread poll_thread_;
  std::thread watch_thread_;
  std::thread reap_thread_;
  std::thread meter_thread_;
  GpuMeter meter_;  // the GPUs' 1 Hz samples between reports (thread-safe)
  GpmSampler gpm_;  // the meter thread's GPM samples (that thread only)
};

}  // namespace rota::agent
