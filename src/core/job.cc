#include "core/job.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>

#include "base/strings.h"
#include "core/mig.h"

namespace rota {
namespace {

Status FieldError(const std::string& path, const std::string& reason) {
  return InvalidArgumentError(path + ": " + reason);
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
              c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

// A probe's path goes into an HTTP request line as it is: visible ASCII
// only (no space, CR or LF to end the line and start a header of the
// user's choosing), no fragment, and short.
std::string RequestPathError(const std::string& path) {
  if (path.empty() || path[0] != '/') return "must start with '/'";
  if (path.size() > 2048) return "must be at most 2048 characters, got " + std::to_string(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(path[i]);
    if (c <= 0x20 || c >= 0x7f || c == '#') {
      return "must be a URL path of visible ASCII characters (percent-encode others), without '#'; character " +
             std::to_string(i + 1) + " is " + (c == ' ' ? std::string("a space") : c == '#' ? std::string("'#'") :
             c >= 0x7f ? "byte " + std::to_string(c) : "control character " + std::to_string(c));
    }
  }
  return "";
}

// A path's control characters (NUL included) are refused: "" if it has none.
std::string ControlCharacterError(const std::string& path) {
  const size_t i = FindControlCharacter(path);
  if (i == std::string::npos) return "";
  return "must not hold control characters (a NUL, newline, ...); character " + std::to_string(i + 1) + " is byte " +
         std::to_string(static_cast<unsigned char>(path[i]));
}

}  // namespace

int64_t JobSpec::TotalReplicas() const {
  int64_t n = 0;
  for (const auto& t : tasks) n += t.replicas;
  return n;
}

int32_t GpuShare::milli() const {
  if (fraction_milli > 0) return fraction_milli;
  return mig_profile.empty() ? 0 : (MigProfileCompute(mig_profile) * 1000 + 6) / 7;
}

int64_t JobSpec::Bytes() const {
  constexpr int64_t kString = 32;  // (a std::string's own size, and a little for the node or slot holding it)
  int64_t n = 1024 + static_cast<int64_t>(name.size() + queue.size() + priority_class.size() + topology.level.size());
  for (const TaskGroupSpec& t : tasks) {
    n += 256 + static_cast<int64_t>(t.name.size() + t.gpu_model.size() + t.rootfs.size() + t.gpu_share.mig_profile.size());
    for (const std::string& arg : t.command) n += kString + static_cast<int64_t>(arg.size());
    for (const auto& [k, v] : t.env) n += 2 * kString + static_cast<int64_t>(k.size() + v.size());
  }
  for (const auto& [k, v] : node_selector) n += 2 * kString + static_cast<int64_t>(k.size() + v.size());
  for (const MountSpec& m : mounts) n += 64 + static_cast<int64_t>(m.source.size() + m.target.size());
  n += static_cast<int64_t>(service.readiness.path.size() + service.metrics_path.size() + checkpoint.signal.size());
  for (const MetricTarget& m : service.autoscale.metrics) n += 64 + static_cast<int64_t>(m.name.size());
  return n;
}

int64_t JobSpec::GpuEquivalent() const {
  int64_t milli = 0;
  for (const auto& t : tasks) milli += static_cast<int64_t>(t.replicas) * t.gpu_share.milli();
  return TotalGpus() + (milli + 999) / 1000;
}

namespace {
Status CheckUtf8(const JobSpec& spec) {
  auto bad = [](const std::string& v) { return !IsValidUtf8(v); };
  if (bad(spec.name)) return FieldError("name", "must be valid UTF-8");
  if (bad(spec.queue)) return FieldError("queue", "must be valid UTF-8");
  if (bad(spec.priority_class)) return FieldError("priority", "must be valid UTF-8");
  if (bad(spec.topology.level)) return FieldError("topology.level", "must be valid UTF-8");
  for (const auto& [k, v] : spec.node_selector) {
    if (bad(k) || bad(v)) return FieldError("node_selector", "must be valid UTF-8");
  }
  if (bad(spec.checkpoint.signal)) return FieldError("checkpoint.signal", "must be valid UTF-8");
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    if (bad(spec.mounts[i].source) || bad(spec.mounts[i].target)) {
      return FieldError("mounts[" + std::to_string(i) + "]", "must be valid UTF-8");
    }
  }
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskGroupSpec& t = spec.tasks[i];
    const std::string p = "tasks[" + std::to_string(i) + "]";
    if (bad(t.name)) return FieldError(p + ".name", "must be valid UTF-8");
    if (bad(t.gpu_model)) return FieldError(p + ".gpu_model", "must be valid UTF-8");
    if (bad(t.gpu_share.mig_profile)) return FieldError(p + ".gpu.mig", "must be valid UTF-8");
    if (bad(t.rootfs)) return FieldError(p + ".rootfs", "must be valid UTF-8");
    for (size_t k = 0; k < t.command.size(); ++k) {
      if (bad(t.command[k])) return FieldError(p + ".command[" + std::to_string(k) + "]", "must be valid UTF-8");
    }
    for (const auto& [k, v] : t.env) {
      if (bad(k) || bad(v)) return FieldError(p + ".env", "must be valid UTF-8");
    }
  }
  return Status::Ok();
}
}  // namespace

namespace {
// Appends every rule of ValidateJobSpec that `spec` breaks to *out, in the
// order of the checks (the first is the one ValidateJobSpec returns).
void CheckSpec(const JobSpec& spec, std::vector<Status>* out) {
  if (Status utf8 = CheckUtf8(spec); !utf8.ok()) return out->push_back(utf8);  // the rest would read garbage
  if (!ValidName(spec.name)) {
    out->push_back(FieldError("name", "must be 1-253 characters of letters, digits, '-', '_' or '.'"));
  }
  if (spec.queue.empty()) out->push_back(FieldError("queue", "must not be empty"));
  if (spec.priority < 0 || spec.priority > 1'000'000'000) {
    out->push_back(FieldError("priority", "must be between 0 and 1000000000"));
  }
  if (spec.tasks.empty()) out->push_back(FieldError("tasks", "a job needs at least one task group"));
  if (spec.tasks.size() > static_cast<size_t>(kMaxTaskGroups)) {
    // Nothing more: the checks below are per task group, and between them
    // (a hostile body of 100,000 groups must cost no more than one error).
    return out->push_back(FieldError("tasks", "at most " + std::to_string(kMaxTaskGroups) + " task groups"));
  }
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskGroupSpec& t = spec.tasks[i];
    const std::string p = "tasks[" + std::to_string(i) + "]";
    if (!ValidName(t.name)) out->push_back(FieldError(p + ".name", "must be 1-253 characters of letters, digits, '-', '_' or '.'"));
    for (size_t j = 0; j < i; ++j) {
      if (spec.tasks[j].name == t.name) out->push_back(FieldError(p + ".name", "duplicate task name '" + t.name + "'"));
    }
    if (t.replicas < 1) out->push_back(FieldError(p + ".replicas", "must be at least 1"));
    if (t.replicas > kMaxReplicas) out->push_back(FieldError(p + ".replicas", "must be at most " + std::to_string(kMaxReplicas)));
    if (t.gpus < 0) out->push_back(FieldError(p + ".gpus", "must not be negative"));
    if (t.gpus > kMaxGpusPerReplica) {
      out->push_back(FieldError(p + ".gpus", "must be at most " + std::to_string(kMaxGpusPerReplica) + " per replica"));
    }
    if (t.gpu_share.shared() && t.gpus > 0) {
      out->push_back(FieldError(p + ".gpu", "ask for whole GPUs (gpus) or a share (gpu: {mig|fraction}), not both"));
    }
    if (!t.gpu_share.mig_profile.empty() && t.gpu_share.fraction_milli > 0) {
      out->push_back(FieldError(p + ".gpu", "mig and fraction are exclusive"));
    }
    if (t.gpu_share.fraction_milli < 0 || t.gpu_share.fraction_milli >= 1000) {
      if (t.gpu_share.fraction_milli != 0) out->push_back(FieldError(p + ".gpu.fraction", "must be in (0, 1)"));
    }
    if (t.gpu_share.memory < 0) out->push_back(FieldError(p + ".gpu.memory", "must not be negative"));
    if (t.gpu_share.memory > 0 && t.gpu_share.fraction_milli == 0) {
      out->push_back(FieldError(p + ".gpu.memory", "bounds a fraction's GPU memory; set gpu.fraction too"));
    }
    if (t.gpu_memory < 0) out->push_back(FieldError(p + ".gpu_memory", "must not be negative"));
    if (t.cpu < 0) out->push_back(FieldError(p + ".cpu", "must not be negative"));
    if (t.memory < 0) out->push_back(FieldError(p + ".memory", "must not be negative"));
    if (t.gpus == 0 && !t.gpu_share.shared() && t.cpu == 0 && t.memory == 0) {
      out->push_back(FieldError(p, "asks for nothing: set gpus, gpu, cpu or memory"));
    }
  }
  if (spec.elastic_min_replicas < 0) out->push_back(FieldError("elastic.min_replicas", "must not be negative"));
  if (spec.elastic_min_replicas > spec.TotalReplicas()) {
    out->push_back(FieldError("elastic.min_replicas", "must not exceed the job's replicas (" +
                                                  std::to_string(spec.TotalReplicas()) + ")"));
  }
  if (spec.is_service()) {
    const ServiceSpec& sv = spec.service;
    if (spec.tasks.size() != 1) {
      out->push_back(FieldError("tasks", "a service has one task group (its replicas); this one has " +
                                     std::to_string(spec.tasks.size())));
    }
    if (sv.min_replicas < 0) out->push_back(FieldError("service.replicas.min", "must not be negative"));
    if (sv.max_replicas < 1) out->push_back(FieldError("service.replicas.max", "must be at least 1"));
    if (sv.min_replicas > sv.max_replicas) {
      out->push_back(FieldError("service.replicas.min", "must not exceed max (" + std::to_string(sv.max_replicas) + ")"));
    }
    if (!spec.tasks.empty() && spec.tasks[0].replicas != sv.max_replicas) {
      out->push_back(FieldError("tasks[0].replicas", "a service's replicas are service.replicas (min/max), not the task's"));
    }
    if (sv.port < 1 || static_cast<int64_t>(sv.port) + sv.max_replicas - 1 > 65535) {
      out->push_back(FieldError("service.port", "must be 1..65535, with port + max - 1 at most 65535 (replica r listens on port + r)"));
    }
    if (sv.port < 1024) out->push_back(FieldError("service.port", "must be 1024 or above (ports below are the node's own)"));
    if (sv.readiness.path.empty() || sv.readiness.path[0] != '/') {
      out->push_back(FieldError("service.readiness.path", "must start with '/'"));
    }
    if (sv.readiness.period < 100'000) out->push_back(FieldError("service.readiness.period", "must be at least 100ms"));
    if (sv.readiness.timeout < 10'000) out->push_back(FieldError("service.readiness.timeout", "must be at least 10ms"));
    if (sv.readiness.startup < 0) out->push_back(FieldError("service.readiness.startup", "must not be negative"));
    if (sv.readiness.failure_threshold < 1) out->push_back(FieldError("service.readiness.failure_threshold", "must be at least 1"));
    const AutoscaleSpec& a = sv.autoscale;
    if (a.target_inflight < 0) out->push_back(FieldError("service.autoscale.target_inflight", "must not be negative"));
    if (a.target_gpu_memory < 0 || a.target_gpu_memory > 1) {
      out->push_back(FieldError("service.autoscale.target_gpu_memory", "must be a fraction in (0, 1]"));
    }
    if (sv.metrics_path.empty() || sv.metrics_path[0] != '/') {
      out->push_back(FieldError("service.metrics_path", "must start with '/'"));
    }
    if (a.metrics.size() > 8) out->push_back(FieldError("service.autoscale.metrics", "at most 8"));
    for (size_t i = 0; i < a.metrics.size(); ++i) {
      const std::string p = "service.autoscale.metrics[" + std::to_string(i) + "]";
      const std::string& n = a.metrics[i].name;
      const bool valid = !n.empty() && n.size() <= 200 && !std::isdigit(static_cast<unsigned char>(n[0])) &&
                         std::all_of(n.begin(), n.end(), [](char c) {
                           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
                         });
      if (!valid) out->push_back(FieldError(p + ".name", "must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"));
      if (!(a.metrics[i].target > 0)) out->push_back(FieldError(p + ".target", "must be above 0"));
    }
    if (a.stable_window < 1'000'000) out->push_back(FieldError("service.autoscale.stable_window", "must be at least 1s"));
    if (a.panic_window < 1'000'000 || a.panic_window > a.stable_window) {
      out->push_back(FieldError("service.autoscale.panic_window", "must be 1s..stable_window"));
    }
    if (a.tolerance < 0 || a.tolerance >= 1) out->push_back(FieldError("service.autoscale.tolerance", "must be in [0, 1)"));
    if (a.panic_threshold < 1) out->push_back(FieldError("service.autoscale.panic_threshold", "must be at least 1"));
    if (a.scale_down_delay < 0) out->push_back(FieldError("service.autoscale.scale_down_delay", "must not be negative"));
    if (a.spare < 0 || (a.spare > 0 && a.spare >= sv.max_replicas)) {
      out->push_back(FieldError("service.autoscale.spare", "must be 0..max-1 (replicas beyond what the load asks, within max)"));
    }
    if (spec.time_limit > 0) out->push_back(FieldError("time_limit", "a service is never ended by a time limit"));
    if (spec.elastic_min_replicas != sv.min_replicas) {
      out->push_back(FieldError("elastic", "a service scales by service.replicas, not elastic"));
    }
  }
  if (spec.restart.max_restarts < 0) out->push_back(FieldError("restart.max_restarts", "must not be negative"));
  if (spec.time_limit < 0) out->push_back(FieldError("time_limit", "must not be negative"));
  if (spec.checkpoint.grace < 0) out->push_back(FieldError("checkpoint.grace", "must not be negative"));
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    const std::string p = "mounts[" + std::to_string(i) + "]";
    if (spec.mounts[i].source.empty() || spec.mounts[i].source[0] != '/') {
      out->push_back(FieldError(p + ".source", "must be an absolute path"));
    }
    if (spec.mounts[i].target.empty() || spec.mounts[i].target[0] != '/') {
      out->push_back(FieldError(p + ".target", "must be an absolute path"));
    }
  }
}

// Likewise for the rules only a new job must satisfy.
void CheckNewSpec(const JobSpec& spec, std::vector<Status>* out) {
  if (spec.is_service()) {
    const ServiceSpec& sv = spec.service;
    const AutoscaleSpec& a = sv.autoscale;
    // The probe's paths go into a request line as they are.
    if (std::string e = RequestPathError(sv.readiness.path); !e.empty() && sv.readiness.path.starts_with('/')) {
      out->push_back(FieldError("service.readiness.path", e));
    }
    if (std::string e = RequestPathError(sv.metrics_path); !e.empty() && sv.metrics_path.starts_with('/')) {
      out->push_back(FieldError("service.metrics_path", e));
    }
    // Durations of years overflow the router's timers (which count
    // nanoseconds) into the past: a probe loop with no pause.
    constexpr Duration kMinute = 60'000'000, kHour = 60 * kMinute, kDay = 24 * kHour;
    if (sv.readiness.period > kHour) out->push_back(FieldError("service.readiness.period", "must be at most 1h"));
    if (sv.readiness.timeout > 10 * kMinute) out->push_back(FieldError("service.readiness.timeout", "must be at most 10m"));
    if (sv.readiness.startup > 7 * kDay) out->push_back(FieldError("service.readiness.startup", "must be at most 7d"));
    if (a.stable_window > kDay) out->push_back(FieldError("service.autoscale.stable_window", "must be at most 1d"));
    if (a.scale_down_delay > 7 * kDay) out->push_back(FieldError("service.autoscale.scale_down_delay", "must be at most 7d"));
  }
  // A host path with a NUL in it is another path to the server's checks
  // (allowed_mounts reads "/\0/../data" as /data) than to the kernel ("/").
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    const std::string p = "mounts[" + std::to_string(i) + "]";
    if (std::string e = ControlCharacterError(spec.mounts[i].source); !e.empty()) out->push_back(FieldError(p + ".source", e));
    if (std::string e = ControlCharacterError(spec.mounts[i].target); !e.empty()) out->push_back(FieldError(p + ".target", e));
    // /rota is the job's directory inside a container, the agent's and
    // read-only (only its work/ is the task's): the runtime could not make
    // a mount point there, and one would be made in the agent's directory.
    const std::string target = std::filesystem::path(spec.mounts[i].target).lexically_normal().string();
    if (target == "/rota" || target == "/rota/" || target.starts_with("/rota/")) {
      out->push_back(FieldError(p + ".target", "'" + spec.mounts[i].target +
                                                   "' is within /rota, the job's own directory in a container "
                                                   "(read-only; its work/ is the task's): mount elsewhere"));
    }
  }
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskGroupSpec& t = spec.tasks[i];
    const std::string p = "tasks[" + std::to_string(i) + "]";
    // What execve takes: C strings, and NAME=VALUE for the environment, each
    // shorter than the kernel's MAX_ARG_STRLEN and all of them well inside
    // its total (a quarter of the 8 MiB stack; the agent adds its own
    // variables; the kernel also counts a pointer a string, which 1 MiB of
    // strings leaves room for). Refused here, not found out when the task
    // cannot start.
    size_t exec_bytes = 0;
    if (!t.command.empty() && t.command[0].empty()) {
      out->push_back(FieldError(p + ".command[0]", "must name the program to run (it is empty)"));
    }
    for (size_t k = 0; k < t.command.size(); ++k) {
      const std::string field = p + ".command[" + std::to_string(k) + "]";
      if (t.command[k].find('\0') != std::string::npos) out->push_back(FieldError(field, "must not hold a NUL byte"));
      if (t.command[k].size() > kMaxExecString) {
        out->push_back(FieldError(field, "is " + std::to_string(t.command[k].size()) + " bytes; an argument may be at most " +
                                             std::to_string(kMaxExecString) + " (the kernel's limit)"));
      }
      exec_bytes += t.command[k].size() + 1;
    }
    for (const auto& [name, value] : t.env) {
      if (name.empty() || name.find_first_of(std::string_view("=\0", 2)) != std::string::npos) {
        out->push_back(FieldError(p + ".env", "a variable's name must be non-empty, without '=' or a NUL byte"));
      } else if (value.find('\0') != std::string::npos) {
        out->push_back(FieldError(p + ".env." + name, "must not hold a NUL byte"));
      } else if (name.size() + 1 + value.size() > kMaxExecString) {
        out->push_back(FieldError(p + ".env." + name, "NAME=value is " + std::to_string(name.size() + 1 + value.size()) +
                                                     " bytes; a variable may be at most " + std::to_string(kMaxExecString) +
                                                     " (the kernel's limit)"));
      }
      exec_bytes += name.size() + value.size() + 2;
    }
    if (exec_bytes > kMaxExecBytes) {
      out->push_back(FieldError(p, "command and env are " + std::to_string(exec_bytes) + " bytes in all; at most " +
                                       std::to_string(kMaxExecBytes) + " (the kernel's limit on what a program starts with)"));
    }
    if (!t.gpu_share.mig_profile.empty() && MigProfileCompute(t.gpu_share.mig_profile) == 0) {
      out->push_back(FieldError(p + ".gpu.mig", "'" + t.gpu_share.mig_profile +
                                            "' is not a MIG profile name (<compute>g.<memory>gb, e.g. 1g.10gb)"));
    }
    if (!t.rootfs.empty() && t.rootfs[0] != '/') out->push_back(FieldError(p + ".rootfs", "must be an absolute path on the node"));
    if (std::string e = ControlCharacterError(t.rootfs); !e.empty()) out->push_back(FieldError(p + ".rootfs", e));
    if (!t.rootfs.empty() && t.command.empty()) {
      out->push_back(FieldError(p + ".command", "required with rootfs (what to run in the container)"));
    }
    if (!t.rootfs.empty() && !t.gpu_share.mig_profile.empty()) {
      out->push_back(FieldError(p + ".rootfs", "a MIG instance runs as a process: containers do not get its "
                                       "/dev/nvidia-caps device nodes yet"));
    }
  }
  if (spec.is_service() && spec.service.min_replicas == 0) {
    out->push_back(FieldError("service.replicas.min", "must be at least 1: scale to zero needs the router to hold requests "
                                              "until a replica is ready, which it does not yet"));
  }
  if (spec.elastic_min_replicas > 0 && !spec.is_service()) {
    if (spec.tasks.size() != 1) {
      out->push_back(FieldError("elastic", "an elastic job has one task group (its replicas grow and shrink); this one has " +
                                       std::to_string(spec.tasks.size())));
    }
    if (spec.tasks.size() == 1 && spec.tasks[0].gpu_share.shared()) {
      out->push_back(FieldError("elastic", "elastic replicas take whole GPUs (or none); GPU fractions and MIG slices are not "
                                   "resized"));
    }
  }
}
}  // namespace

std::vector<Status> JobSpecErrors(const JobSpec& spec, bool new_job) {
  std::vector<Status> out;
  CheckSpec(spec, &out);
  if (new_job) CheckNewSpec(spec, &out);
  return out;
}

Status ValidateJobSpec(const JobSpec& spec) {
  std::vector<Status> errors = JobSpecErrors(spec, false);
  return errors.empty() ? Status::Ok() : errors.front();
}

Status ValidateNewJobSpec(const JobSpec& spec) {
  std::vector<Status> errors = JobSpecErrors(spec, true);
  return errors.empty() ? Status::Ok() : errors.front();
}

StatusOr<ArrayRange> ParseArrayRange(std::string_view text) {
  const std::string shown(text);
  auto refuse = [&](const std::string& why) -> Status {
    return InvalidArgumentError("count: '" + shown + "' " + why +
                                " (N, A-B, N%K or A-B%K, like sbatch --array=0-99%8: indices 0 to 99, 8 at a time)");
  };
  auto number = [](std::string_view s, int64_t* out) {
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
    return !s.empty() && ec == std::errc() && end == s.data() + s.size();
  };
  ArrayRange r;
  std::string_view span = text;
  if (const size_t pct = text.find('%'); pct != std::string_view::npos) {
    int64_t k = 0;
    if (!number(text.substr(pct + 1), &k) || k < 1 || k > kMaxArrayIndex) {
      return refuse("has no limit of 1 or more after '%'");
    }
    r.max_running = static_cast<int32_t>(k);
    span = text.substr(0, pct);
  }
  if (const size_t dash = span.find('-'); dash != std::string_view::npos && dash > 0) {
    int64_t a = 0, b = 0;
    if (!number(span.substr(0, dash), &a) || !number(span.substr(dash + 1), &b)) return refuse("is not a range");
    if (a > b) return refuse("runs backwards");
    if (b > kMaxArrayIndex) return refuse("goes past index " + std::to_string(kMaxArrayIndex));
    r.first_index = a;
    r.count = b - a + 1;
    r.range = true;
  } else {
    // A count: its bounds are the caller's (kMaxArray, the config's max_array).
    if (!number(span, &r.count)) return refuse("is not a whole number or a range");
  }
  return r;
}

std::string_view TopologyModeName(TopologyMode mode) {
  return mode == TopologyMode::kRequired ? "required" : "preferred";
}

Status ServiceUpdateAllowed(const JobSpec& from, const JobSpec& to) {
  if (!to.is_service()) return FieldError("kind", "a service stays a service (cancel it to run a batch job)");
  if (to.name != from.name) return FieldError("name", "is the service's endpoint: it does not change");
  if (to.tasks.size() != 1 || from.tasks.size() != 1) return FieldError("tasks", "a service has one task group");
  const TaskGroupSpec& a = from.tasks[0];
  const TaskGroupSpec& b = to.tasks[0];
  auto refuse = [](const std::string& field) {
    return FieldError(field, "does not change in a running service (its replicas hold what it asked); "
                             "submit a new service under another name and cancel this one");
  };
  if (a.gpus != b.gpus || !(a.gpu_share == b.gpu_share)) return refuse("tasks[0].gpus");
  if (a.gpu_model != b.gpu_model) return refuse("tasks[0].gpu_model");
  if (a.gpu_memory != b.gpu_memory) return refuse("tasks[0].gpu_memory");
  if (a.cpu != b.cpu) return refuse("tasks[0].cpu");
  if (a.memory != b.memory) return refuse("tasks[0].memory");
  if (a.name != b.name) return refuse("tasks[0].name");
  if (to.queue != from.queue) return refuse("queue");
  if (to.priority != from.priority) return refuse("priority");
  if (to.preemptible != from.preemptible) return refuse("preemptible");
  if (to.node_selector != from.node_selector) return refuse("node_selector");
  if (!(to.topology == from.topology)) return refuse("topology");
  if (to.service.port != from.service.port) return refuse("service.port");
  return Status::Ok();
}

std::string_view JobKindName(JobKind kind) { return kind == JobKind::kService ? "service" : "batch"; }

std::string_view RestartPolicyName(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::kNever: return "never";
    case RestartPolicy::kOnFailure: return "on-failure";
    case RestartPolicy::kAlways: return "always";
  }
  return "never";
}

Status SetPriority(std::string_view text, JobSpec* spec) {
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-')) {
    spec->priority_class = std::string(text);
    return Status::Ok();
  }
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgumentError("priority: '" + std::string(text) + "' is neither a number nor a priority class name");
  }
  if (value < 0 || value > 1'000'000'000) return InvalidArgumentError("priority: must be between 0 and 1000000000");
  spec->priority = static_cast<int32_t>(value);
  spec->priority_class.clear();
  return Status::Ok();
}

}  // namespace rota
