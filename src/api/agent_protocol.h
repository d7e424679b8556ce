// The agent protocol: what a node agent and the server say to each other,
// as types, with the one codec both sides use.
//
//   POST /v1/agents/register   {"node": NodeSpec, "simulated", "address", "mps"}
//   GET  /v1/agents/watch?node=NAME
//        a stream (chunked, application/x-ndjson): one AgentAnswer per line,
//        sent when the stream opens and each time the node's tasks change;
//        empty lines between keep it alive (at least every 20 s).
//   POST /v1/agents/heartbeat  HeartbeatReport -> AgentAnswer
//        periodic (every heartbeat_interval_ms), and at once for an exit or
//        a new checkpoint. "wait_ms" > 0 long-polls: the answer waits until
//        the node's tasks change (the older transport, `--transport poll`).
//
// An answer is level-triggered: the whole set of tasks the node should run,
// read at state `revision`; an agent applies one only if its revision is not
// older than the last it applied (a watch event and a heartbeat's answer may
// cross). A task is keyed by job/task/replica/attempt: a new attempt is a new
// process.
//
// Decoding names the field that is wrong ("request body: tasks[2].job:
// required"). Pieces that matter less than the rest are dropped instead of
// failing the report: a checkpoint or log piece that does not parse.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "core/job.h"
#include "core/node.h"

namespace rota::api {

struct GpuTelemetry {
  int32_t index = 0;
  int32_t utilization_pct = 0;
  MemoryMiB memory_used = 0;
  int32_t temperature_c = 0;
  int32_t power_w = 0;
  bool healthy = true;
  std::string health_reason;  // "xid 79", "ecc", "temperature 95C"
  // Since the last report, from the agent's 1 Hz samples (GpuMeter): how many
  // it took, their utilisation (ActivityHistogram buckets; none in MIG mode,
  // where NVML knows no utilisation), the highest memory used, the energy
  // used (from the GPU's total-energy counter, or power integrated where the
  // driver has none) and the mean PCIe throughput (-1 = unknown).
  int32_t samples = 0;
  std::vector<int64_t> activity;
  int64_t activity_sum = -1;  // the utilisation samples' sum, % (their exact mean; -1 = not sent)
  MemoryMiB memory_peak = 0;
  int64_t energy_mj = 0;
  int32_t pcie_rx_kbps = -1;
  int32_t pcie_tx_kbps = -1;
  // GPM (Hopper and later): the window's mean SM activity, SM occupancy,
  // tensor-pipe activity and DRAM bandwidth use, percent (-1 = none).
  int32_t sm_active_pct = -1, sm_occupancy_pct = -1, tensor_active_pct = -1, dram_active_pct = -1;
};

// What a node's agent should be running: one replica of a job.
struct TaskAssignment {
  JobId job;
  std::string job_name;
  uint16_t task = 0;
  std::string task_name;
  uint32_t replica = 0;
  std::vector<int32_t> gpus;
  int32_t gpu_milli = 0;           // a share of gpus[0] (0 = whole GPUs)
  MemoryMiB gpu_memory_limit = 0;  // the share's GPU memory bound
  std::string mig_profile;         // a MIG instance of gpus[0]: its profile and start slot
  int32_t mig_start = -1;
  std::string last_checkpoint;     // where a restarted attempt resumes ("" = from the start)
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string rootfs;              // an OCI container's root filesystem ("" = a process)
  std::vector<MountSpec> mounts;   // the job's data mounts (containers)
  int32_t world_size = 1;
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t node_rank = 0;
  std::string master_addr;
  int32_t master_port = 0;
  std::vector<std::string> hosts;  // one per replica, by rank
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  int32_t attempt = 0;  // the replica's attempt: a new attempt is a new process
  std::string checkpoint_signal = "SIGUSR1";
  Duration checkpoint_grace = 0;
  std::string user;  // the job's owner: the account it runs as on the node ("" = none named)
  int64_t uid = -1;  // an explicit mapping from the config's accounts (-1 = by name)
  int64_t gid = -1;
  bool allow_root = false;
  // When the server bound this attempt of the gang (its clock, microseconds
  // since the epoch: the deciding cycle's time; a rank restarted alone
  // carries the gang's; 0 = not said): latency figures, bind to agent.
  TimePoint bound_at = 0;
  // A service's replica: restarted forever, so the agent backs off one that
  // keeps exiting (1 s doubling to 60 s, like the kubelet's CrashLoopBackOff).
  bool service = false;
  // The whole GPUs it holds (not a share, not a MIG instance).
  bool whole_gpus() const { return gpu_milli == 0 && mig_start < 0; }
};

inline constexpr std::string_view kCouldNotStart = "start: ";
// An exit reason: its node's fence ended it (the server answered none of
// the agent's reports before its lease ran out): not the program's end.
inline constexpr std::string_view kFenced = "fenced";
struct TaskReport {
  JobId job;
  uint16_t task = 0;
  uint32_t replica = 0;
  int32_t attempt = 0;
  bool exited = false;
  int32_t exit_code = 0;
  std::string exit_reason;  // "oom": killed by the kernel at its memory limit; "lost": its supervisor
                            // vanished, or could not be recorded (and so started nothing); kFenced;
                            // kCouldNotStart and why: it did not start (no such program, user, ...)
  // How long before the report an exited task ended, where the agent found
  // it ended later (it ended while no agent ran: its supervisor's exit file
  // says when); 0: at the report. A span, not a time: the node's clock may
  // be off the server's. The server takes it within the attempt.
  Duration ended_ago = 0;
  // The task's last checkpoint (it wrote the path to $ROTA_CHECKPOINT_FILE at
  // checkpoint_at); journaled once per newer time.
  std::string checkpoint_path;
  TimePoint checkpoint_at = 0;
  // The next piece of the replica's log from byte `log_offset` (agents that
  // ship logs); "" = none.
  std::string log;
  int64_t log_offset = 0;
  // The task's CPU time and throttled time since it started (its cgroup's
  // cpu.stat; its process's own where it has no cgroup), and its host memory
  // peak; -1 = unknown.
  int64_t cpu_used_us = -1;
  int64_t cpu_throttled_us = -1;
  MemoryMiB memory_peak = -1;
};

// Whether `tasks` (a node's report) lists replica `replica` of task group
// `task` of `job` running (an exit listed is a process that ended).
inline bool ListsRunning(const std::vector<TaskReport>& tasks, JobId job, uint16_t task, uint32_t replica) {
  for (const TaskReport& t : tasks) {
    if (t.job == job && t.task == task && t.replica == replica && !t.exited) return true;
  }
  return false;
}

struct HeartbeatReport {
  std::string node;
  std::vector<GpuTelemetry> gpus;
  std::vector<TaskReport> tasks;
  int64_t wait_ms = 0;  // > 0: a long poll (0..30000)
  // Why the node's disk cannot take new tasks ("" = it can): the agent's
  // state or logs directory is read-only, or has less free than the
  // agent's reserve. The server drains the node while it says so.
  std::string disk_problem;
  // Why the node's task runtime cannot take new tasks ("" = it can): its
  // starts' programs hung in exec several times in a row, or the OCI
  // runtime's delete of a container hung (Agent's RuntimeTrouble). The
  // server drains the node while it says so, as for `disk_problem` (which
  // goes first when both are said).
  std::string runtime_problem;
  // The reporting agent (its AgentInstance; "" from an agent older than
  // that): another agent's, once it registered for the node, is refused.
  std::string instance;
  // The revision of the last answer the agent applied before it listed
  // `tasks` (0: none since it registered, or not said): every task it runs
  // is listed, so a replica an answer this new no longer holds, missing from
  // the list, runs no longer.
  uint64_t revision = 0;
};

struct AgentAnswer {
  std::vector<TaskAssignment> tasks;
  uint64_t revision = 0;
  int64_t fence_after_ms = 0;         // tasks run on this long after the last answered heartbeat
  int64_t heartbeat_interval_ms = 0;  // how often to report
  // The most of a job's logs the server keeps (limits.log_cap): past it a
  // file's further pieces are dropped, so the agent ships no more of it.
  // 0: not said (an older server).
  int64_t log_cap_bytes = 0;
  // Which server process answered (Controller::server_id, also in its
  // registration's answer): revisions count from each one's start, so an
  // answer of another process than the one the agent registered with (a
  // server restarted, an old leader) is not the agent's to apply. "": not
  // said (an older server).
  std::string server;
};

// InvalidArgument naming `field` unless `instance` is an agent instance's
// form (up to 64 letters, digits or '-'; "" too).
Status CheckInstance(std::string_view instance, std::string_view field);

// InvalidArgument naming `field` unless `address` (how other nodes reach an
// agent's node: every gang's hostfile lists it, a line per host, and the
// router connects to it) is a host name or IP address ("" too).
Status CheckAddress(std::string_view address, std::string_view field);

// InvalidArgument naming `field`.gpu_model or `field`.labels if a
// registering node's GPU model or labels hold control characters (an
// escape sequence for whoever lists nodes; a CR that splits a CSV report's
// row), or its labels are more than kMaxNodeLabels or longer than
// kMaxLabelKey / kMaxLabelValue bytes (each is journaled, kept in every
// copy of the node, and shown to every user; the bounds leave room for a
// feature discovery's hundred-odd labels, and Kubernetes' 253-byte prefix
// and 63-byte name). Checked as a node registers: one stored before loads
// as it was, and its agent's next registration is checked.
inline constexpr size_t kMaxNodeLabels = 256, kMaxLabelKey = 317, kMaxLabelValue = 1024;
Status CheckNodeText(const NodeSpec& spec, std::string_view field);

nlohmann::ordered_json HeartbeatToJson(const HeartbeatReport& report);
StatusOr<HeartbeatReport> HeartbeatFromJson(const nlohmann::json& body);

nlohmann::ordered_json AssignmentToJson(const TaskAssignment& a);
// `path` prefixes field names in errors ("tasks[0].").
StatusOr<TaskAssignment> AssignmentFromJson(const nlohmann::json& j, const std::string& path = "");

nlohmann::ordered_json AnswerToJson(const AgentAnswer& answer);
// The same answer's text, byte for byte what AnswerToJson(answer).dump(indent,
// ' ', false, replace) writes, without building the tree: the server writes
// one for every report it answers and every watch event (a 20,000-job array
// on 12,500 nodes is 2,500 events of 8 tasks, and 40,000 answers).
std::string AnswerText(const AgentAnswer& answer, int indent = -1);
StatusOr<AgentAnswer> AnswerFromJson(const nlohmann::json& body);

}  // namespace rota::api
