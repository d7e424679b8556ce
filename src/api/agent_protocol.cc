#include "api/agent_protocol.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "api/json_text.h"
#include "base/base64.h"
#include "base/quantity.h"
#include "base/strings.h"

namespace rota::api {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

using V = json::value_t;

// The field `key` of `obj` if it has the type (an unsigned number counts as
// an integer); nullptr if absent and optional.
StatusOr<const json*> Field(const json& obj, const std::string& path, const char* key, V type, bool required) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    if (required) return InvalidArgumentError("request body: " + path + key + ": required");
    return static_cast<const json*>(nullptr);
  }
  const bool ok = it->type() == type || (type == V::number_integer && it->type() == V::number_unsigned) ||
                  (type == V::number_unsigned && it->type() == V::number_integer && it->get<int64_t>() >= 0);
  if (!ok) return InvalidArgumentError("request body: " + path + key + ": wrong type");
  return &*it;
}

template <typename T>
Status Read(const json& obj, const std::string& path, const char* key, T* out, bool required = false) {
  V type;
  if constexpr (std::is_same_v<T, bool>) type = V::boolean;
  else if constexpr (std::is_same_v<T, std::string>) type = V::string;
  else if constexpr (std::is_unsigned_v<T>) type = V::number_unsigned;
  else type = V::number_integer;
  ROTA_ASSIGN_OR_RETURN(const json* v, Field(obj, path, key, type, required));
  if (v == nullptr) return Status::Ok();
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // In range of the field's type, or refused (no silent wrap-around).
    if constexpr (std::is_unsigned_v<T>) {
      const uint64_t n = v->get<uint64_t>();
      if (n > std::numeric_limits<T>::max()) return InvalidArgumentError("request body: " + path + key + ": out of range");
      *out = static_cast<T>(n);
    } else {
      const int64_t n = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                            ? INT64_MAX
                            : v->get<int64_t>();
      if (n > std::numeric_limits<T>::max() || n < std::numeric_limits<T>::min()) {
        return InvalidArgumentError("request body: " + path + key + ": out of range");
      }
      *out = static_cast<T>(n);
    }
  } else {
    *out = v->get<T>();
  }
  return Status::Ok();
}

Status ReadStrings(const json& obj, const std::string& path, const char* key, std::vector<std::string>* out) {
  ROTA_ASSIGN_OR_RETURN(const json* v, Field(obj, path, key, V::array, false));
  if (v == nullptr) return Status::Ok();
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) {
      return InvalidArgumentError("request body: " + path + key + "[" + std::to_string(i) + "]: not a string");
    }
    out->push_back((*v)[i].get<std::string>());
  }
  return Status::Ok();
}

// A text an agent gives that people are shown (a drain's reason, why a task
// did not start): at most 1 KiB of UTF-8 without control characters (shown
// on terminals). A long one is cut, not the report refused: a refused report
// would make the node lost.
void ShownText(std::string* text) {
  if (!IsValidUtf8(*text)) *text = "(not UTF-8)";
  for (char& c : *text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (text->size() > 1024) {
    size_t cut = 1021;
    while (cut > 0 && (static_cast<unsigned char>((*text)[cut]) & 0xC0) == 0x80) --cut;  // (a whole character)
    *text = text->substr(0, cut) + "...";
  }
}

}  // namespace

ordered_json HeartbeatToJson(const HeartbeatReport& report) {
  ordered_json gpus = ordered_json::array();
  for (const GpuTelemetry& g : report.gpus) {
    ordered_json j{{"index", g.index},
                   {"utilization_pct", g.utilization_pct},
                   {"memory_used_mib", g.memory_used},
                   {"temperature_c", g.temperature_c},
                   {"power_w", g.power_w},
                   {"healthy", g.healthy},
                   {"health_reason", g.health_reason}};
    if (g.samples > 0) {
      j["window"] = {{"samples", g.samples},           {"activity", g.activity},       {"activity_sum", g.activity_sum},
                     {"memory_peak_mib", g.memory_peak}, {"energy_mj", g.energy_mj},
                     {"pcie_rx_kbps", g.pcie_rx_kbps},   {"pcie_tx_kbps", g.pcie_tx_kbps}};
      if (g.sm_active_pct >= 0) {
        j["window"]["gpm"] = {{"sm_active", g.sm_active_pct},
                              {"sm_occupancy", g.sm_occupancy_pct},
                              {"tensor_active", g.tensor_active_pct},
                              {"dram_active", g.dram_active_pct}};
      }
    }
    gpus.push_back(std::move(j));
  }
  ordered_json tasks = ordered_json::array();
  for (const TaskReport& t : report.tasks) {
    ordered_json j{{"job", t.job.value()},        {"task", t.task},
                   {"replica", t.replica},        {"attempt", t.attempt},
                   {"state", t.exited ? "exited" : "running"}, {"exit_code", t.exit_code},
                   {"exit_reason", t.exit_reason}};
    if (t.exited && t.ended_ago > 0) j["ended_ago_ms"] = t.ended_ago / 1000;
    if (!t.log.empty()) {
      j["log_b64"] = Base64Encode(t.log);  // any bytes survive JSON
      j["log_offset"] = t.log_offset;
    }
    if (!t.checkpoint_path.empty() && t.checkpoint_at != 0) {
      j["checkpoint_path"] = t.checkpoint_path;
      j["checkpoint_at"] = FormatTime(t.checkpoint_at);
    }
    if (t.cpu_used_us >= 0) j["cpu_used_us"] = t.cpu_used_us;
    if (t.cpu_throttled_us >= 0) j["cpu_throttled_us"] = t.cpu_throttled_us;
    if (t.memory_peak >= 0) j["memory_peak_mib"] = t.memory_peak;
    tasks.push_back(std::move(j));
  }
  ordered_json out{{"node", report.node}, {"gpus", std::move(gpus)}, {"tasks", std::move(tasks)}};
  if (report.wait_ms > 0) out["wait_ms"] = report.wait_ms;
  if (!report.disk_problem.empty()) out["disk_problem"] = report.disk_problem;
  if (!report.runtime_problem.empty()) out["runtime_problem"] = report.runtime_problem;
  if (!report.instance.empty()) out["instance"] = report.instance;
  if (report.revision > 0) out["revision"] = report.revision;
  return out;
}

Status CheckInstance(std::string_view instance, std::string_view field) {
  if (instance.size() > 64 || std::any_of(instance.begin(), instance.end(), [](char c) {
        return !std::isalnum(static_cast<unsigned char>(c)) && c != '-';
      })) {
    return InvalidArgumentError(std::string(field) + ": must be up to 64 letters, digits or '-'");
  }
  return Status::Ok();
}

Status CheckAddress(std::string_view address, std::string_view field) {
  if (address.size() > 253 || std::any_of(address.begin(), address.end(), [](char c) {
        return !std::isalnum(static_cast<unsigned char>(c)) && std::string_view("-.:_%[]").find(c) == std::string_view::npos;
      })) {
    return InvalidArgumentError(std::string(field) + ": must be a host name or IP address (up to 253 letters, digits, "
                                                     "'-', '.', ':', '_', '%', '[' or ']')");
  }
  return Status::Ok();
}

Status CheckNodeText(const NodeSpec& spec, std::string_view field) {
  auto control = [](const std::string& text) { return FindControlCharacter(text) != std::string::npos; };
  const std::string why = ": must not hold control characters (it is shown on terminals and in reports)";
  if (control(spec.gpu_model)) return InvalidArgumentError(std::string(field) + ".gpu_model" + why);
  if (spec.labels.size() > kMaxNodeLabels) {
    return InvalidArgumentError(std::string(field) + ".labels: " + std::to_string(spec.labels.size()) +
                                " labels; a node has at most " + std::to_string(kMaxNodeLabels));
  }
  for (const auto& [key, value] : spec.labels) {
    if (control(key) || control(value)) return InvalidArgumentError(std::string(field) + ".labels" + why);
    if (key.size() > kMaxLabelKey || value.size() > kMaxLabelValue) {
      return InvalidArgumentError(std::string(field) + ".labels: '" + key.substr(0, 32) +
                                  (key.size() > 32 ? "...'" : "'") + ": a key has at most " + std::to_string(kMaxLabelKey) +
                                  " bytes and a value at most " + std::to_string(kMaxLabelValue));
    }
  }
  return Status::Ok();
}

StatusOr<HeartbeatReport> HeartbeatFromJson(const json& body) {
  if (!body.is_object()) return InvalidArgumentError("request body: not a JSON object");
  HeartbeatReport r;
  ROTA_RETURN_IF_ERROR(Read(body, "", "node", &r.node, true));
  if (auto w = body.find("wait_ms"); w != body.end() && w->is_number_integer()) {
    r.wait_ms = std::clamp<int64_t>(w->get<int64_t>(), 0, 30000);
  }
  ROTA_RETURN_IF_ERROR(Read(body, "", "disk_problem", &r.disk_problem));
  ShownText(&r.disk_problem);
  ROTA_RETURN_IF_ERROR(Read(body, "", "runtime_problem", &r.runtime_problem));
  ShownText(&r.runtime_problem);
  ROTA_RETURN_IF_ERROR(Read(body, "", "instance", &r.instance));
  ROTA_RETURN_IF_ERROR(CheckInstance(r.instance, "instance"));
  if (auto v = body.find("revision"); v != body.end()) {
    if (!v->is_number_unsigned()) return InvalidArgumentError("revision: must be a whole number of at least 0");
    r.revision = v->get<uint64_t>();
  }
  ROTA_ASSIGN_OR_RETURN(const json* gpus, Field(body, "", "gpus", V::array, false));
  if (gpus != nullptr) {
    for (size_t i = 0; i < gpus->size(); ++i) {
      const json& g = (*gpus)[i];
      const std::string p = "gpus[" + std::to_string(i) + "].";
      if (!g.is_object()) return InvalidArgumentError("request body: gpus[" + std::to_string(i) + "]: not an object");
      GpuTelemetry t;
      ROTA_RETURN_IF_ERROR(Read(g, p, "index", &t.index, true));
      ROTA_RETURN_IF_ERROR(Read(g, p, "utilization_pct", &t.utilization_pct));
      ROTA_RETURN_IF_ERROR(Read(g, p, "temperature_c", &t.temperature_c));
      ROTA_RETURN_IF_ERROR(Read(g, p, "power_w", &t.power_w));
      ROTA_RETURN_IF_ERROR(Read(g, p, "memory_used_mib", &t.memory_used));
      ROTA_RETURN_IF_ERROR(Read(g, p, "healthy", &t.healthy));
      ROTA_RETURN_IF_ERROR(Read(g, p, "health_reason", &t.health_reason));
      ShownText(&t.health_reason);  // (in the requeue reason of every job on the GPU)
      // A window that does not parse is dropped, not the report (health
      // matters more than accounting).
      if (auto w = g.find("window"); w != g.end() && w->is_object()) {
        GpuTelemetry win;
        const bool ok = Read(*w, p, "samples", &win.samples).ok() &&
                        Read(*w, p, "memory_peak_mib", &win.memory_peak).ok() &&
                        Read(*w, p, "energy_mj", &win.energy_mj).ok() &&
                        Read(*w, p, "pcie_rx_kbps", &win.pcie_rx_kbps).ok() &&
                        Read(*w, p, "pcie_tx_kbps", &win.pcie_tx_kbps).ok();
        const auto a = w->find("activity");
        bool buckets = a != w->end() && a->is_array() && a->size() <= 21;
        int64_t in_buckets = 0;
        for (size_t b = 0; buckets && b < a->size(); ++b) {
          buckets = (*a)[b].is_number_integer() && (*a)[b].get<int64_t>() >= 0 && (*a)[b].get<int64_t>() <= 1'000'000;
          if (buckets) win.activity.push_back((*a)[b].get<int64_t>()), in_buckets += win.activity.back();
        }
        if (!buckets) win.activity.clear();
        // Bounds: a million samples, 1 PiB of GPU memory, 10 kW for 1e5 s.
        if (ok && win.samples > 0 && win.samples <= 1'000'000 && win.energy_mj >= 0 && win.energy_mj <= 1'000'000'000'000 &&
            win.memory_peak >= 0 && win.memory_peak <= (int64_t{1} << 30) && in_buckets <= win.samples) {
          t.samples = win.samples;
          t.activity = std::move(win.activity);
          t.memory_peak = win.memory_peak;
          t.energy_mj = win.energy_mj;
          t.pcie_rx_kbps = win.pcie_rx_kbps;
          t.pcie_tx_kbps = win.pcie_tx_kbps;
          // At most 100% a sample of those in the buckets (older agents send none).
          if (Read(*w, p, "activity_sum", &win.activity_sum).ok() && win.activity_sum >= 0 &&
              win.activity_sum <= in_buckets * 100) {
            t.activity_sum = win.activity_sum;
          }
          // GPM percentages; one out of 0..100 drops them all.
          if (auto gpm = w->find("gpm"); gpm != w->end() && gpm->is_object()) {
            int32_t v[4] = {-1, -1, -1, -1};
            const char* keys[] = {"sm_active", "sm_occupancy", "tensor_active", "dram_active"};
            bool fine = true;
            for (int k = 0; k < 4; ++k) fine = fine && Read(*gpm, p, keys[k], &v[k]).ok() && v[k] >= -1 && v[k] <= 100;
            if (fine) {
              t.sm_active_pct = v[0];
              t.sm_occupancy_pct = v[1];
              t.tensor_active_pct = v[2];
              t.dram_active_pct = v[3];
            }
          }
        }
      }
      r.gpus.push_back(std::move(t));
    }
  }
  ROTA_ASSIGN_OR_RETURN(const json* tasks, Field(body, "", "tasks", V::array, false));
  if (tasks != nullptr) {
    for (size_t i = 0; i < tasks->size(); ++i) {
      const json& t = (*tasks)[i];
      const std::string p = "tasks[" + std::to_string(i) + "].";
      if (!t.is_object()) return InvalidArgumentError("request body: tasks[" + std::to_string(i) + "]: not an object");
      TaskReport tr;
      uint64_t job = 0;
      std::string state;
      ROTA_RETURN_IF_ERROR(Read(t, p, "job", &job, true));
      ROTA_RETURN_IF_ERROR(Read(t, p, "task", &tr.task, true));
      ROTA_RETURN_IF_ERROR(Read(t, p, "replica", &tr.replica, true));
      ROTA_RETURN_IF_ERROR(Read(t, p, "state", &state));
      ROTA_RETURN_IF_ERROR(Read(t, p, "exit_code", &tr.exit_code));
      ROTA_RETURN_IF_ERROR(Read(t, p, "attempt", &tr.attempt));
      ROTA_RETURN_IF_ERROR(Read(t, p, "exit_reason", &tr.exit_reason));
      ShownText(&tr.exit_reason);
      // A span that does not parse is dropped (the exit counts as at the report), not the report.
      if (auto e = t.find("ended_ago_ms"); e != t.end() && e->is_number_integer() && e->get<int64_t>() > 0) {
        tr.ended_ago = std::min<int64_t>(e->get<int64_t>(), int64_t{365} * 24 * 3600 * 1000) * 1000;
      }
      tr.job = JobId(job);
      tr.exited = state == "exited";
      // Accounting figures that do not parse are dropped, not the report.
      for (auto [key, out] : {std::pair{"cpu_used_us", &tr.cpu_used_us}, std::pair{"cpu_throttled_us", &tr.cpu_throttled_us},
                              std::pair{"memory_peak_mib", &tr.memory_peak}}) {
        if (auto v = t.find(key); v != t.end() && v->is_number_integer() && v->get<int64_t>() >= 0) *out = v->get<int64_t>();
      }
      // A checkpoint report that does not parse is dropped, not the report
      // (its exits and health matter more).
      if (t.contains("checkpoint_path") && t.contains("checkpoint_at") && t["checkpoint_path"].is_string() &&
          t["checkpoint_at"].is_string()) {
        auto at = ParseTime(t["checkpoint_at"].get<std::string>());
        std::string ckpt = t["checkpoint_path"].get<std::string>();
        // (The next attempt gets it in its environment, which holds no NUL.)
        if (at.ok() && !ckpt.empty() && ckpt.size() <= 4096 && IsValidUtf8(ckpt) && ckpt.find('\0') == std::string::npos) {
          tr.checkpoint_path = std::move(ckpt);
          tr.checkpoint_at = *at;
        }
      }
      // A log piece that does not parse is dropped, not the report.
      if (t.contains("log_b64") && t["log_b64"].is_string() && t.contains("log_offset") &&
          t["log_offset"].is_number_integer() && t["log_offset"].get<int64_t>() >= 0) {
        if (auto bytes = Base64Decode(t["log_b64"].get<std::string>())) {
          tr.log = std::move(*bytes);
          tr.log_offset = t["log_offset"].get<int64_t>();
        }
      }
      r.tasks.push_back(std::move(tr));
    }
  }
  return r;
}

// (WriteAssignment, below, writes the same fields in the same order: change both.)
ordered_json AssignmentToJson(const TaskAssignment& a) {
  ordered_json out{{"job", a.job.value()},           {"job_name", a.job_name},
                   {"task", a.task},                 {"task_name", a.task_name},
                   {"replica", a.replica},           {"gpus", a.gpus},
                   {"command", a.command},           {"env", a.env},
                   {"world_size", a.world_size},     {"rank", a.rank},
                   {"local_rank", a.local_rank},     {"node_rank", a.node_rank},
                   {"master_addr", a.master_addr},   {"master_port", a.master_port},
                   {"hosts", a.hosts},               {"cpu_milli", a.cpu},
                   {"memory_mib", a.memory},         {"attempt", a.attempt},
                   {"checkpoint_signal", a.checkpoint_signal},
                   {"checkpoint_grace_ms", a.checkpoint_grace / 1000}};
  if (!a.user.empty()) out["user"] = a.user;
  if (a.uid >= 0) out["uid"] = a.uid;
  if (a.gid >= 0) out["gid"] = a.gid;
  if (a.allow_root) out["allow_root"] = true;
  if (a.service) out["service"] = true;
  if (a.bound_at > 0) out["bound_at_us"] = a.bound_at;
  if (!a.last_checkpoint.empty()) out["last_checkpoint"] = a.last_checkpoint;
  if (a.gpu_milli > 0) {
    out["gpu_milli"] = a.gpu_milli;
    out["gpu_memory_limit_mib"] = a.gpu_memory_limit;
  }
  if (a.mig_start >= 0) {
    out["mig_profile"] = a.mig_profile;
    out["mig_start"] = a.mig_start;
  }
  if (!a.rootfs.empty()) {
    out["rootfs"] = a.rootfs;
    ordered_json mounts = ordered_json::array();
    for (const MountSpec& m : a.mounts) {
      mounts.push_back({{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
    }
    out["mounts"] = std::move(mounts);
  }
  return out;
}

StatusOr<TaskAssignment> AssignmentFromJson(const json& j, const std::string& p) {
  if (!j.is_object()) return InvalidArgumentError("request body: " + p + ": not an object");
  TaskAssignment a;
  uint64_t job = 0;
  int64_t grace_ms = 0;
  ROTA_RETURN_IF_ERROR(Read(j, p, "job", &job, true));
  a.job = JobId(job);
  ROTA_RETURN_IF_ERROR(Read(j, p, "task", &a.task, true));
  ROTA_RETURN_IF_ERROR(Read(j, p, "replica", &a.replica, true));
  ROTA_RETURN_IF_ERROR(Read(j, p, "job_name", &a.job_name));
  ROTA_RETURN_IF_ERROR(Read(j, p, "task_name", &a.task_name));
  ROTA_ASSIGN_OR_RETURN(const json* gpus, Field(j, p, "gpus", V::array, false));
  if (gpus != nullptr) {
    for (const json& g : *gpus) {
      if (!g.is_number_integer() || g.get<int64_t>() < 0 || g.get<int64_t>() >= 64) {
        return InvalidArgumentError("request body: " + p + "gpus: GPU indices are 0..63");
      }
      a.gpus.push_back(g.get<int32_t>());
    }
  }
  ROTA_RETURN_IF_ERROR(Read(j, p, "gpu_milli", &a.gpu_milli));
  ROTA_RETURN_IF_ERROR(Read(j, p, "gpu_memory_limit_mib", &a.gpu_memory_limit));
  ROTA_RETURN_IF_ERROR(Read(j, p, "mig_profile", &a.mig_profile));
  ROTA_RETURN_IF_ERROR(Read(j, p, "mig_start", &a.mig_start));
  ROTA_RETURN_IF_ERROR(Read(j, p, "last_checkpoint", &a.last_checkpoint));
  ROTA_RETURN_IF_ERROR(ReadStrings(j, p, "command", &a.command));
  ROTA_ASSIGN_OR_RETURN(const json* env, Field(j, p, "env", V::object, false));
  if (env != nullptr) {
    for (const auto& [k, v] : env->items()) {
      if (!v.is_string()) return InvalidArgumentError("request body: " + p + "env." + k + ": not a string");
      a.env[k] = v.get<std::string>();
    }
  }
  ROTA_RETURN_IF_ERROR(Read(j, p, "rootfs", &a.rootfs));
  ROTA_ASSIGN_OR_RETURN(const json* mounts, Field(j, p, "mounts", V::array, false));
  if (mounts != nullptr) {
    for (size_t i = 0; i < mounts->size(); ++i) {
      const std::string mp = p + "mounts[" + std::to_string(i) + "].";
      MountSpec m;
      if (!(*mounts)[i].is_object()) return InvalidArgumentError("request body: " + mp + ": not an object");
      ROTA_RETURN_IF_ERROR(Read((*mounts)[i], mp, "source", &m.source, true));
      ROTA_RETURN_IF_ERROR(Read((*mounts)[i], mp, "target", &m.target, true));
      ROTA_RETURN_IF_ERROR(Read((*mounts)[i], mp, "read_only", &m.read_only));
      a.mounts.push_back(std::move(m));
    }
  }
  ROTA_RETURN_IF_ERROR(Read(j, p, "world_size", &a.world_size));
  ROTA_RETURN_IF_ERROR(Read(j, p, "rank", &a.rank));
  ROTA_RETURN_IF_ERROR(Read(j, p, "local_rank", &a.local_rank));
  ROTA_RETURN_IF_ERROR(Read(j, p, "node_rank", &a.node_rank));
  ROTA_RETURN_IF_ERROR(Read(j, p, "master_addr", &a.master_addr));
  ROTA_RETURN_IF_ERROR(Read(j, p, "master_port", &a.master_port));
  ROTA_RETURN_IF_ERROR(ReadStrings(j, p, "hosts", &a.hosts));
  ROTA_RETURN_IF_ERROR(Read(j, p, "cpu_milli", &a.cpu));
  ROTA_RETURN_IF_ERROR(Read(j, p, "memory_mib", &a.memory));
  ROTA_RETURN_IF_ERROR(Read(j, p, "attempt", &a.attempt));
  ROTA_RETURN_IF_ERROR(Read(j, p, "checkpoint_signal", &a.checkpoint_signal));
  ROTA_RETURN_IF_ERROR(Read(j, p, "checkpoint_grace_ms", &grace_ms));
  a.checkpoint_grace = std::clamp<int64_t>(grace_ms, 0, int64_t{1} << 40) * 1000;
  ROTA_RETURN_IF_ERROR(Read(j, p, "user", &a.user));
  ROTA_RETURN_IF_ERROR(Read(j, p, "uid", &a.uid));
  ROTA_RETURN_IF_ERROR(Read(j, p, "gid", &a.gid));
  ROTA_RETURN_IF_ERROR(Read(j, p, "allow_root", &a.allow_root));
  ROTA_RETURN_IF_ERROR(Read(j, p, "service", &a.service));
  ROTA_RETURN_IF_ERROR(Read(j, p, "bound_at_us", &a.bound_at));
  return a;
}

ordered_json AnswerToJson(const AgentAnswer& answer) {
  ordered_json tasks = ordered_json::array();
  for (const TaskAssignment& a : answer.tasks) tasks.push_back(AssignmentToJson(a));
  return {{"tasks", std::move(tasks)},
          {"revision", answer.revision},
          {"fence_after_ms", answer.fence_after_ms},
          {"heartbeat_interval_ms", answer.heartbeat_interval_ms},
          {"log_cap_bytes", answer.log_cap_bytes},
          {"server", answer.server}};
}

namespace {

// AssignmentToJson's fields, in its order (the test compares the bytes).
void WriteAssignment(TextWriter& w, const TaskAssignment& a) {
  w.BeginObject();
  w.Field("job", a.job.value());
  w.Field("job_name", a.job_name);
  w.Field("task", a.task);
  w.Field("task_name", a.task_name);
  w.Field("replica", a.replica);
  w.Key("gpus");
  w.BeginArray();
  for (int32_t g : a.gpus) w.Number(g);
  w.EndArray();
  w.Strings("command", a.command);
  w.Key("env");
  w.BeginObject();
  for (const auto& [k, v] : a.env) w.Field(k, v);
  w.EndObject();
  w.Field("world_size", a.world_size);
  w.Field("rank", a.rank);
  w.Field("local_rank", a.local_rank);
  w.Field("node_rank", a.node_rank);
  w.Field("master_addr", a.master_addr);
  w.Field("master_port", a.master_port);
  w.Strings("hosts", a.hosts);
  w.Field("cpu_milli", a.cpu);
  w.Field("memory_mib", a.memory);
  w.Field("attempt", a.attempt);
  w.Field("checkpoint_signal", a.checkpoint_signal);
  w.Field("checkpoint_grace_ms", a.checkpoint_grace / 1000);
  if (!a.user.empty()) w.Field("user", a.user);
  if (a.uid >= 0) w.Field("uid", a.uid);
  if (a.gid >= 0) w.Field("gid", a.gid);
  if (a.allow_root) w.Field("allow_root", true);
  if (a.service) w.Field("service", true);
  if (a.bound_at > 0) w.Field("bound_at_us", a.bound_at);
  if (!a.last_checkpoint.empty()) w.Field("last_checkpoint", a.last_checkpoint);
  if (a.gpu_milli > 0) {
    w.Field("gpu_milli", a.gpu_milli);
    w.Field("gpu_memory_limit_mib", a.gpu_memory_limit);
  }
  if (a.mig_start >= 0) {
    w.Field("mig_profile", a.mig_profile);
    w.Field("mig_start", a.mig_start);
  }
  if (!a.rootfs.empty()) {
    w.Field("rootfs", a.rootfs);
    w.Key("mounts");
    w.BeginArray();
    for (const MountSpec& m : a.mounts) {
      w.BeginObject();
      w.Field("source", m.source);
      w.Field("target", m.target);
      w.Field("read_only", m.read_only);
      w.EndObject();
    }
    w.EndArray();
  }
  w.EndObject();
}

}  // namespace

std::string AnswerText(const AgentAnswer& answer, int indent) {
  std::string out;
  out.reserve(256 + answer.tasks.size() * 700);
  TextWriter w(&out, indent);
  w.BeginObject();
  w.Key("tasks");
  w.BeginArray();
  for (const TaskAssignment& a : answer.tasks) WriteAssignment(w, a);
  w.EndArray();
  w.Field("revision", answer.revision);
  w.Field("fence_after_ms", answer.fence_after_ms);
  w.Field("heartbeat_interval_ms", answer.heartbeat_interval_ms);
  w.Field("log_cap_bytes", answer.log_cap_bytes);
  w.Field("server", answer.server);
  w.EndObject();
  return out;
}

StatusOr<AgentAnswer> AnswerFromJson(const json& body) {
  if (!body.is_object()) return InvalidArgumentError("answer: not a JSON object");
  AgentAnswer answer;
  ROTA_RETURN_IF_ERROR(Read(body, "", "revision", &answer.revision));
  ROTA_RETURN_IF_ERROR(Read(body, "", "fence_after_ms", &answer.fence_after_ms));
  ROTA_RETURN_IF_ERROR(Read(body, "", "heartbeat_interval_ms", &answer.heartbeat_interval_ms));
  ROTA_RETURN_IF_ERROR(Read(body, "", "log_cap_bytes", &answer.log_cap_bytes));
  ROTA_RETURN_IF_ERROR(Read(body, "", "server", &answer.server));
  ROTA_ASSIGN_OR_RETURN(const json* tasks, Field(body, "", "tasks", V::array, true));
  for (size_t i = 0; i < tasks->size(); ++i) {
    ROTA_ASSIGN_OR_RETURN(TaskAssignment a, AssignmentFromJson((*tasks)[i], "tasks[" + std::to_string(i) + "]."));
    answer.tasks.push_back(std::move(a));
  }
  return answer;
}

}  // namespace rota::api
