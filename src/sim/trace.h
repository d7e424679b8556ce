// Trace readers: real cluster traces (Microsoft Philly, the Tiresias
// simulator's CSV, Alibaba openb pods and nodes) and rota's own trace format,
// read into one job list in virtual time; plus a synthetic generator fitted to
// Philly. Pure: the caller reads the file, these parse text.
//
// Errors name the file, line and column: "jobs.csv:12: num_gpu: not an
// integer: 'x'".
//
// rota's trace format (CSV with a header, or JSON lines with the same keys):
//   name,submit_s,duration_s,gpus[,replicas,queue,priority,checkpoint_s,time_limit_s,gpu_model]
// submit_s and duration_s are seconds (decimals allowed); gpus are whole GPUs
// per replica; checkpoint_s is the job's checkpoint interval (0 = never, a
// restart loses all progress); time_limit_s defaults to none.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/quantity.h"
#include "base/status.h"
#include "core/node.h"

namespace rota::sim {

struct TraceJob {
  std::string name;
  TimePoint submit = 0;   // microseconds from the trace's start
  Duration duration = 0;  // run time on its GPUs, uninterrupted
  int32_t gpus = 1;       // whole GPUs per replica (openb: GPUs it shares, see gpu_milli)
  int32_t replicas = 1;
  int32_t gpu_milli = 1000;  // per-GPU share; < 1000 only for one shared GPU
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  std::vector<std::string> gpu_models;  // any of these; empty = any model
  std::string queue = "default";
  int32_t priority = 500;
  Duration checkpoint_interval = 0;  // 0 = no checkpoints
  Duration time_limit = 0;           // 0 = none

  int64_t TotalGpus() const { return static_cast<int64_t>(gpus) * replicas; }
  // Milli-GPUs over the whole job (openb's request measure).
  int64_t TotalGpuMilli() const { return static_cast<int64_t>(gpus) * gpu_milli * replicas; }
};

enum class TraceFormat { kRota, kPhilly, kTiresias, kOpenb };
StatusOr<TraceFormat> ParseTraceFormat(std::string_view name);

// `text` is the file's contents; `file` names it in errors. Jobs come back
// sorted by submit time (stable: ties keep file order), submit times shifted
// so the first job arrives at 0. kRota accepts CSV or JSON lines (a first
// non-blank character '{').
StatusOr<std::vector<TraceJob>> ParseTrace(TraceFormat format, std::string_view text, std::string_view file);

// A node of an openb node list (or any node list in that format:
// sn,cpu_milli,memory_mib,gpu,model).
struct TraceNode {
  std::string name;
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  int32_t gpus = 0;
  std::string model;
};
StatusOr<std::vector<TraceNode>> ParseNodeList(std::string_view text, std::string_view file);
// The cluster's nodes from a node list (one rack).
std::vector<NodeSpec> NodesFromList(const std::vector<TraceNode>& list);

// A Tiresias cluster spec (num_switch,num_node_p_switch,num_gpu_p_node,...):
// each switch is a rack of identical nodes.
StatusOr<std::vector<NodeSpec>> ParseClusterSpec(std::string_view text, std::string_view file);

// A one-column CSV of GPU-seconds (a header line, then whole numbers), such
// as the Tiresias simulator's yarn-gput1000.csv: a Gittins distribution.
StatusOr<std::vector<int64_t>> ParseGpuSeconds(std::string_view text, std::string_view file);

// Jobs in the Philly shape: Poisson arrivals at `load` x `cluster_gpus` of
// offered GPU demand; GPU counts drawn from Philly's distribution (capped at
// `max_gpus`), durations log-normal with Philly's median (1,144 s) and mean
// (13,136 s). Deterministic for a seed.
std::vector<TraceJob> SyntheticPhilly(int32_t jobs, int64_t cluster_gpus, double load, int32_t max_gpus, uint64_t seed);

// A request rate over time (`rota sim --services`' rate_file): a CSV with
// columns t_s (seconds from the simulation's start) and requests_per_s, as a
// metrics system exports a rate; each row's rate holds until the next. Errors
// name the file, line and column. (The caller checks the order and range.)
StatusOr<std::vector<std::pair<TimePoint, double>>> ParseRequestRate(std::string_view text, std::string_view file);

// One CSV line split on commas (double quotes group; "" is a quote).
std::vector<std::string> SplitCsv(std::string_view line);

}  // namespace rota::sim
