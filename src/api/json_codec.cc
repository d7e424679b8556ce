#include "api/json_codec.h"

#include <charconv>
#include <limits>

#include <nlohmann/json.hpp>
#include <stdexcept>


namespace rota::api {

using nlohmann::json;
using nlohmann::ordered_json;

std::vector<int32_t> GpuIndices(uint64_t mask) {
  std::vector<int32_t> out;
  for (int32_t g = 0; g < 64; ++g) {
    if ((mask >> g) & 1) out.push_back(g);
  }
  return out;
}

ordered_json JobSpecToJson(const JobSpec& s) {
  ordered_json j;
  j["name"] = s.name;
  j["queue"] = s.queue;
  if (s.priority_class.empty()) j["priority"] = s.priority;
  else j["priority"] = s.priority_class;
  j["tasks"] = ordered_json::array();
  for (const TaskGroupSpec& t : s.tasks) {
    ordered_json tj;
    tj["name"] = t.name;
    tj["replicas"] = t.replicas;
    if (t.gpus > 0) tj["gpus"] = t.gpus;
    if (t.gpu_share.shared()) {
      ordered_json g;
      if (!t.gpu_share.mig_profile.empty()) g["mig"] = t.gpu_share.mig_profile;
      if (t.gpu_share.fraction_milli > 0) g["fraction"] = FormatMilliCpu(t.gpu_share.fraction_milli);
      if (t.gpu_share.memory > 0) g["memory"] = FormatMemoryMiB(t.gpu_share.memory);
      tj["gpu"] = g;
    }
    if (!t.gpu_model.empty()) tj["gpu_model"] = t.gpu_model;
    if (t.gpu_memory > 0) tj["gpu_memory"] = FormatMemoryMiB(t.gpu_memory);
    if (t.cpu > 0) tj["cpu"] = FormatMilliCpu(t.cpu);
    if (t.memory > 0) tj["memory"] = FormatMemoryMiB(t.memory);
    if (!t.command.empty()) tj["command"] = t.command;
    if (!t.rootfs.empty()) tj["rootfs"] = t.rootfs;
    if (!t.env.empty()) tj["env"] = t.env;
    j["tasks"].push_back(std::move(tj));
  }
  if (!s.topology.level.empty()) {
    j["topology"] = {{"level", s.topology.level}, {"mode", std::string(TopologyModeName(s.topology.mode))}};
  }
  if (!s.node_selector.empty()) j["node_selector"] = s.node_selector;
  if (s.is_service()) {
    const ServiceSpec& sv = s.service;
    const AutoscaleSpec& a = sv.autoscale;
    j["kind"] = "service";
    j["service"] = {
        {"replicas", {{"min", sv.min_replicas}, {"max", sv.max_replicas}}},
        {"port", sv.port},
        {"readiness",
         {{"path", sv.readiness.path}, {"period", FormatDuration(sv.readiness.period)},
          {"timeout", FormatDuration(sv.readiness.timeout)}, {"startup", FormatDuration(sv.readiness.startup)},
          {"failure_threshold", sv.readiness.failure_threshold}}},
        {"autoscale",
         {{"target_inflight", a.target_inflight}, {"target_gpu_memory", a.target_gpu_memory},
          {"stable_window", FormatDuration(a.stable_window)}, {"panic_window", FormatDuration(a.panic_window)},
          {"panic_threshold", a.panic_threshold}, {"tolerance", a.tolerance},
          {"scale_down_delay", FormatDuration(a.scale_down_delay)}}}};
    if (sv.metrics_path != "/metrics") j["service"]["metrics_path"] = sv.metrics_path;
    if (a.spare != 0) j["service"]["autoscale"]["spare"] = a.spare;  // (absent in journals from before it)
    if (!a.metrics.empty()) {
      ordered_json m = ordered_json::array();
      for (const MetricTarget& t : a.metrics) m.push_back({{"name", t.name}, {"target", t.target}});
      j["service"]["autoscale"]["metrics"] = std::move(m);
    }
  } else if (s.elastic_min_replicas > 0) {
    j["elastic"] = {{"min_replicas", s.elastic_min_replicas}};
  }
  if (s.preemptible) j["preemptible"] = true;
  j["checkpoint"] = {{"signal", s.checkpoint.signal}, {"grace", FormatDuration(s.checkpoint.grace)}};
  j["restart"] = {{"policy", std::string(RestartPolicyName(s.restart.policy))}, {"max_restarts", s.restart.max_restarts}};
  if (s.time_limit > 0) j["time_limit"] = FormatDuration(s.time_limit);
  if (!s.mounts.empty()) {
    j["mounts"] = ordered_json::array();
    for (const MountSpec& m : s.mounts) {
      j["mounts"].push_back({{"source", m.source}, {"target", m.target}, {"read_only", m.read_only}});
    }
  }
  return j;
}

ordered_json NodeSpecToJson(const NodeSpec& n) {
  ordered_json j;
  j["name"] = n.name;
  j["gpu_model"] = n.gpu_model;
  j["gpus"] = n.gpus;
  j["gpu_memory"] = FormatMemoryMiB(n.gpu_memory);
  j["nvlink_islands"] = n.nvlink_islands;
  j["cpu"] = FormatMilliCpu(n.cpu);
  j["memory"] = FormatMemoryMiB(n.memory);
  j["labels"] = n.labels;
  if (!n.mig.empty()) {
    ordered_json mig = ordered_json::object();
    for (const auto& [gpu, layout] : n.mig) mig[std::to_string(gpu)] = layout;
    j["mig"] = std::move(mig);
    if (n.mig_fixed) j["mig_fixed"] = true;
  }
  return j;
}

namespace {

// Field readers that name the field on error.
template <typename T>
StatusOr<T> Get(const json& j, const char* key, std::string_view source) {
  auto it = j.find(key);
  if (it == j.end()) return InvalidArgumentError(std::string(source) + ": " + key + ": required");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    // A whole number in the field's range (nlohmann's get<int32_t> would
    // cast 4294967304 to 8, and 8.9 to 8).
    if (!it->is_number()) return InvalidArgumentError(std::string(source) + ": " + key + ": wrong type");
    if (!it->is_number_integer()) return InvalidArgumentError(std::string(source) + ": " + key + ": must be a whole number");
    const bool fits = it->is_number_unsigned()
                          ? it->template get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                          : it->template get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                it->template get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
    if (!fits) return InvalidArgumentError(std::string(source) + ": " + key + ": out of range");
    return static_cast<T>(it->is_number_unsigned() ? static_cast<int64_t>(it->template get<uint64_t>())
                                                   : it->template get<int64_t>());
  }
  try {
    return it->get<T>();
  } catch (const json::exception&) {
    return InvalidArgumentError(std::string(source) + ": " + key + ": wrong type");
  }
}

}  // namespace

StatusOr<NodeSpec> NodeSpecFromJson(const json& j, std::string_view source) {
  if (!j.is_object()) return InvalidArgumentError(std::string(source) + ": must be a JSON object");
  static const char* kFields[] = {"name",   "gpu_model", "gpus",   "gpu_memory", "nvlink_islands",
                                  "cpu",    "memory",    "labels", "mig", "mig_fixed"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* f : kFields) known = known || key == f;
    if (!known) return InvalidArgumentError(std::string(source) + ": " + key + ": unknown field");
  }
  NodeSpec n;
  ROTA_ASSIGN_OR_RETURN(n.name, Get<std::string>(j, "name", source));
  if (j.contains("gpu_model")) {
    ROTA_ASSIGN_OR_RETURN(n.gpu_model, Get<std::string>(j, "gpu_model", source));
  }
  if (j.contains("gpus")) {
    ROTA_ASSIGN_OR_RETURN(n.gpus, Get<int32_t>(j, "gpus", source));
  }
  if (j.contains("nvlink_islands")) {
    ROTA_ASSIGN_OR_RETURN(n.nvlink_islands, Get<int32_t>(j, "nvlink_islands", source));
  }
  auto quantity = [&](const char* key, auto parse, auto* out) -> Status {
    if (!j.contains(key)) return Status::Ok();
    ROTA_ASSIGN_OR_RETURN(std::string text, Get<std::string>(j, key, source));
    auto v = parse(text);
    if (!v.ok()) return InvalidArgumentError(std::string(source) + ": " + key + ": " + std::string(v.status().message()));
    *out = *v;
    return Status::Ok();
  };
  ROTA_RETURN_IF_ERROR(quantity("gpu_memory", ParseMemoryMiB, &n.gpu_memory));
  ROTA_RETURN_IF_ERROR(quantity("cpu", ParseMilliCpu, &n.cpu));
  ROTA_RETURN_IF_ERROR(quantity("memory", ParseMemoryMiB, &n.memory));
  if (j.contains("labels")) {
    ROTA_ASSIGN_OR_RETURN(n.labels, (Get<std::map<std::string, std::string>>(j, "labels", source)));
  }
  if (j.contains("mig")) {
    // {"<gpu index>": "<layout>"}: the GPUs in MIG mode.
    ROTA_ASSIGN_OR_RETURN(auto mig, (Get<std::map<std::string, std::string>>(j, "mig", source)));
    for (const auto& [key, layout] : mig) {
      int32_t gpu = -1;
      auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), gpu);
      if (ec != std::errc() || end != key.data() + key.size() || gpu < 0) {
        return InvalidArgumentError(std::string(source) + ": mig: '" + key + "' is not a GPU index");
      }
      n.mig[gpu] = layout;
    }
  }
  if (j.contains("mig_fixed")) {
    ROTA_ASSIGN_OR_RETURN(n.mig_fixed, Get<bool>(j, "mig_fixed", source));
  }
  if (Status s = ValidateNodeSpec(n); !s.ok()) return s.WithPrefix(source);
  return n;
}

namespace {

// The journal's own decoder for JobSpecToJson's output: direct, without the
// YAML parser, so replaying a large journal stays fast. Still validated.
StatusOr<JobSpec> JobSpecFromJson(const json& j) {
  auto milli = [](const json& v) -> int64_t {
    auto r = ParseMilliCpu(v.get<std::string>());
    if (!r.ok()) throw std::invalid_argument(std::string(r.status().message()));
    return *r;
  };
  auto mib = [](const json& v) -> int64_t {
    auto r = ParseMemoryMiB(v.get<std::string>());
    if (!r.ok()) throw std::invalid_argument(std::string(r.status().message()));
    return *r;
  };
  auto duration = [](const json& v) -> int64_t {
    auto r = ParseDuration(v.get<std::string>());
    if (!r.ok()) throw std::invalid_argument(std::string(r.status().message()));
    return *r;
  };
  try {
    JobSpec s;
    s.name = j.at("name").get<std::string>();
    s.queue = j.at("queue").get<std::string>();
    const json& p = j.at("priority");
    if (p.is_string()) {
      s.priority_class = p.get<std::string>();
    } else {
      s.priority_class.clear();
      s.priority = p.get<int32_t>();
    }
    for (const json& tj : j.at("tasks")) {
      TaskGroupSpec t;
      t.name = tj.at("name").get<std::string>();
      t.replicas = tj.at("replicas").get<int32_t>();
      if (tj.contains("gpus")) t.gpus = tj["gpus"].get<int32_t>();
      if (tj.contains("gpu")) {
        const json& g = tj["gpu"];
        if (g.contains("mig")) t.gpu_share.mig_profile = g["mig"].get<std::string>();
        if (g.contains("fraction")) t.gpu_share.fraction_milli = static_cast<int32_t>(milli(g["fraction"]));
        if (g.contains("memory")) t.gpu_share.memory = mib(g["memory"]);
      }
      if (tj.contains("gpu_model")) t.gpu_model = tj["gpu_model"].get<std::string>();
      if (tj.contains("gpu_memory")) t.gpu_memory = mib(tj["gpu_memory"]);
      if (tj.contains("cpu")) t.cpu = milli(tj["cpu"]);
      if (tj.contains("memory")) t.memory = mib(tj["memory"]);
      if (tj.contains("command")) t.command = tj["command"].get<std::vector<std::string>>();
      if (tj.contains("env")) t.env = tj["env"].get<std::map<std::string, std::string>>();
      if (tj.contains("rootfs")) t.rootfs = tj["rootfs"].get<std::string>();
      s.tasks.push_back(std::move(t));
    }
    if (j.contains("topology")) {
      s.topology.level = j["topology"].at("level").get<std::string>();
      s.topology.mode = j["topology"].at("mode") == "preferred" ? TopologyMode::kPreferred : TopologyMode::kRequired;
    }
    if (j.contains("node_selector")) s.node_selector = j["node_selector"].get<Labels>();
    if (j.contains("elastic")) s.elastic_min_replicas = j["elastic"].at("min_replicas").get<int32_t>();
    if (j.value("kind", std::string("batch")) == "service") {
      s.kind = JobKind::kService;
      const json& sj = j.at("service");
      ServiceSpec& sv = s.service;
      sv.min_replicas = sj.at("replicas").at("min").get<int32_t>();
      sv.max_replicas = sj.at("replicas").at("max").get<int32_t>();
      sv.port = sj.at("port").get<int32_t>();
      const json& r = sj.at("readiness");
      sv.readiness.path = r.at("path").get<std::string>();
      sv.readiness.period = duration(r.at("period"));
      sv.readiness.timeout = duration(r.at("timeout"));
      sv.readiness.startup = duration(r.at("startup"));
      sv.readiness.failure_threshold = r.at("failure_threshold").get<int32_t>();
      const json& a = sj.at("autoscale");
      sv.autoscale.target_inflight = a.at("target_inflight").get<double>();
      sv.autoscale.target_gpu_memory = a.at("target_gpu_memory").get<double>();
      sv.autoscale.stable_window = duration(a.at("stable_window"));
      sv.autoscale.panic_window = duration(a.at("panic_window"));
      sv.autoscale.panic_threshold = a.at("panic_threshold").get<double>();
      sv.autoscale.tolerance = a.at("tolerance").get<double>();
      sv.autoscale.scale_down_delay = duration(a.at("scale_down_delay"));
      if (sj.contains("metrics_path")) sv.metrics_path = sj["metrics_path"].get<std::string>();
      if (a.contains("spare")) sv.autoscale.spare = a["spare"].get<int32_t>();
      if (a.contains("metrics")) {
        for (const json& m : a["metrics"]) sv.autoscale.metrics.push_back({m.at("name"), m.at("target")});
      }
      s.elastic_min_replicas = sv.min_replicas;
    }
    if (j.contains("preemptible")) s.preemptible = j["preemptible"].get<bool>();
    if (j.contains("checkpoint")) {
      s.checkpoint.signal = j["checkpoint"].at("signal").get<std::string>();
      s.checkpoint.grace = duration(j["checkpoint"].at("grace"));
    }
    if (j.contains("restart")) {
      const std::string policy = j["restart"].at("policy").get<std::string>();
      s.restart.policy = policy == "on-failure" ? RestartPolicy::kOnFailure
                         : policy == "always"   ? RestartPolicy::kAlways
                                                : RestartPolicy::kNever;
      s.restart.max_restarts = j["restart"].at("max_restarts").get<int32_t>();
    }
    if (j.contains("time_limit")) s.time_limit = duration(j["time_limit"]);
    if (j.contains("mounts")) {
      for (const json& m : j["mounts"]) {
        s.mounts.push_back({m.at("source").get<std::string>(), m.at("target").get<std::string>(),
                            m.at("read_only").get<bool>()});
      }
    }
    ROTA_RETURN_IF_ERROR(ValidateJobSpec(s));
    return s;
  } catch (const std::exception& e) {
    return InvalidArgumentError(std::string("job spec: ") + e.what());
  }
}

}  // namespace

namespace {

// A placement as compact arrays: [task, replica, node, gpu_mask(, gpu_milli(, mig_start))].
ordered_json PlacementToJson(const std::vector<ReplicaPlacement>& placement) {
  ordered_json out = ordered_json::array();
  for (const ReplicaPlacement& r : placement) {
    ordered_json rj = {r.task, r.replica, r.node.value(), r.gpu_mask};
    if (r.gpu_milli > 0 || r.mig_start >= 0) rj.push_back(r.gpu_milli);  // a GPU fraction
    if (r.mig_start >= 0) rj.push_back(r.mig_start);                    // a MIG instance
    out.push_back(std::move(rj));
  }
  return out;
}

std::vector<ReplicaPlacement> PlacementFromJson(const json& j) {
  std::vector<ReplicaPlacement> out;
  for (const auto& r : j) {
    out.push_back({r.at(0).get<uint16_t>(), r.at(1).get<uint32_t>(), NodeId(r.at(2).get<uint32_t>()),
                   r.at(3).get<uint64_t>(), r.size() > 4 ? r.at(4).get<int32_t>() : 0,
                   r.size() > 5 ? r.at(5).get<int32_t>() : -1});
  }
  return out;
}

// The learned order's history: its bins as arrays, each sweep as [id, live,
// finished, log_sum, log_sq], each open sweep as [queue, gpus, sweep, last
// job, last submit].
ordered_json RunHistoryToJson(const RunHistory& h) {
  ordered_json out = ordered_json::object();
  out["count"] = std::vector<int64_t>(std::begin(h.count), std::end(h.count));
  out["gpu_seconds"] = std::vector<int64_t>(std::begin(h.gpu_seconds), std::end(h.gpu_seconds));
  out["finished"] = h.finished;
  out["log_sum"] = h.log_sum;
  out["log_sq"] = h.log_sq;
  ordered_json sweeps = ordered_json::array();
  for (const auto& [id, sw] : h.sweeps) sweeps.push_back({id, sw.live, sw.finished, sw.log_sum, sw.log_sq});
  out["sweeps"] = std::move(sweeps);
  ordered_json open = ordered_json::array();
  for (const auto& [key, o] : h.open) {
    open.push_back({key.first, key.second, o.sweep.value(), o.last.value(), o.last_submit});
  }
  out["open"] = std::move(open);
  return out;
}

StatusOr<RunHistory> RunHistoryFromJson(const json& j) {
  RunHistory h;
  const json& count = j.at("count");
  const json& gpu_seconds = j.at("gpu_seconds");
  if (!count.is_array() || count.size() != RunHistory::kBins || !gpu_seconds.is_array() ||
      gpu_seconds.size() != RunHistory::kBins) {
    return InvalidArgumentError("event RunHistoryState: count and gpu_seconds must hold " +
                                std::to_string(RunHistory::kBins) + " bins each");
  }
  for (int i = 0; i < RunHistory::kBins; ++i) {
    h.count[i] = count[i].get<int64_t>();
    h.gpu_seconds[i] = gpu_seconds[i].get<int64_t>();
  }
  h.finished = j.at("finished").get<int64_t>();
  h.log_sum = j.at("log_sum").get<int64_t>();
  h.log_sq = j.at("log_sq").get<int64_t>();
  for (const auto& sw : j.at("sweeps")) {
    h.sweeps[sw.at(0).get<uint64_t>()] = {sw.at(1).get<int64_t>(), sw.at(2).get<int64_t>(), sw.at(3).get<int64_t>(),
                                          sw.at(4).get<int64_t>()};
  }
  for (const auto& o : j.at("open")) {
    h.open[{o.at(0).get<std::string>(), o.at(1).get<int64_t>()}] = {JobId(o.at(2).get<uint64_t>()),
                                                                    JobId(o.at(3).get<uint64_t>()),
                                                                    o.at(4).get<TimePoint>()};
  }
  return h;
}

}  // namespace

std::string EncodeEvent(const Event& event) {
  ordered_json j;
  std::visit(
      [&](const auto& e) {
        using E = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<E, NodeAdded>) {
          j["type"] = "NodeAdded";
          j["spec"] = NodeSpecToJson(e.spec);
        } else if constexpr (std::is_same_v<E, NodeDrainChanged>) {
          j["type"] = "NodeDrainChanged";
          j["node"] = e.node;
          j["drained"] = e.drained;
          if (!e.reason.empty()) j["reason"] = e.reason;
          if (e.by_agent) j["by_agent"] = true;
        } else if constexpr (std::is_same_v<E, GpuHealthChanged>) {
          j["type"] = "GpuHealthChanged";
          j["node"] = e.node;
          j["gpu"] = e.gpu;
          j["healthy"] = e.healthy;
        } else if constexpr (std::is_same_v<E, JobSubmitted>) {
          j["type"] = "JobSubmitted";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["user"] = e.user;
          j["priority_value"] = e.spec.priority;  // resolved from the class at submission
          if (e.restarts != 0) j["restarts"] = e.restarts;
          if (e.restarts != 0) j["failed_restarts"] = e.failed_restarts;
          if (e.attained != 0) j["attained"] = e.attained;
          if (e.resizes != 0) j["resizes"] = e.resizes;
          if (e.rank_restarts != 0) j["rank_restarts"] = e.rank_restarts;
          if (e.gang_attempt != 0) j["gang_attempt"] = e.gang_attempt;
          if (!e.rank_attempt.empty()) {
            ordered_json ranks = ordered_json::object();
            for (const auto& [replica, attempt] : e.rank_attempt) ranks[std::to_string(replica)] = attempt;
            j["rank_attempt"] = std::move(ranks);
          }
          if (!e.request_id.empty()) j["request_id"] = e.request_id;
          if (e.array_count > 0) {
            j["array"] = e.array.value();
            j["array_count"] = e.array_count;
            if (e.array_first_index != 0) j["array_first_index"] = e.array_first_index;
            if (e.array_max_running != 0) j["array_max_running"] = e.array_max_running;
          }
          if (e.sweep.value() != 0) j["sweep"] = e.sweep.value();
          j["spec"] = JobSpecToJson(e.spec);
        } else if constexpr (std::is_same_v<E, JobsSubmitted>) {
          j["type"] = "JobsSubmitted";
          j["first"] = e.first.value();
          j["count"] = e.count;
          j["at"] = e.at;
          j["user"] = e.user;
          j["priority_value"] = e.spec.priority;
          if (!e.request_id.empty()) j["request_id"] = e.request_id;
          if (e.array_count > 0) {
            j["array"] = e.array.value();
            j["array_count"] = e.array_count;
            if (e.array_first_index != 0) j["array_first_index"] = e.array_first_index;
            if (e.array_max_running != 0) j["array_max_running"] = e.array_max_running;
          }
          if (e.sweep.value() != 0) j["sweep"] = e.sweep.value();
          j["spec"] = JobSpecToJson(e.spec);
        } else if constexpr (std::is_same_v<E, JobBound>) {
          j["type"] = "JobBound";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["placement"] = PlacementToJson(e.placement);
          if (e.ended) j["ended"] = true;
        } else if constexpr (std::is_same_v<E, JobFinished>) {
          j["type"] = "JobFinished";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["outcome"] = e.outcome == JobOutcome::kSucceeded ? "succeeded" : "failed";
          if (!e.reason.empty()) j["reason"] = e.reason;
        } else if constexpr (std::is_same_v<E, JobRequeued>) {
          j["type"] = "JobRequeued";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["reason"] = e.reason;
          if (e.failed) j["failed"] = true;
        } else if constexpr (std::is_same_v<E, JobPreempting>) {
          j["type"] = "JobPreempting";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["preemptor"] = e.preemptor.value();
          j["reason"] = e.reason;
          if (e.restart) j["restart"] = true;
          if (e.failed) j["failed"] = true;
        } else if constexpr (std::is_same_v<E, NodeLostChanged>) {
          j["type"] = "NodeLostChanged";
          j["node"] = e.node;
          j["lost"] = e.lost;
        } else if constexpr (std::is_same_v<E, JobResized>) {
          j["type"] = "JobResized";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["reason"] = e.reason;
          j["placement"] = PlacementToJson(e.placement);
        } else if constexpr (std::is_same_v<E, ServiceScaled>) {
          j["type"] = "ServiceScaled";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["desired"] = e.desired;
          j["reason"] = e.reason;
        } else if constexpr (std::is_same_v<E, ServiceUpdated>) {
          j["type"] = "ServiceUpdated";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["spec"] = JobSpecToJson(e.spec);
          j["priority_value"] = e.spec.priority;
          j["by"] = e.by;
          j["spec_attempt"] = e.spec_attempt;
        } else if constexpr (std::is_same_v<E, RankRestarted>) {
          j["type"] = "RankRestarted";
          j["id"] = e.id.value();
          j["task"] = e.task;
          j["replica"] = e.replica;
          j["at"] = e.at;
          j["reason"] = e.reason;
        } else if constexpr (std::is_same_v<E, JobHistory>) {
          j["type"] = "JobHistory";
          j["id"] = e.id.value();
          j["preempted_at"] = e.preempted_at;
          j["preempted_by"] = ordered_json::array();
          for (JobId by : e.preempted_by) j["preempted_by"].push_back(by.value());
          j["last_requeue_reason"] = e.last_requeue_reason;
          j["last_placement"] = PlacementToJson(e.last_placement);
          j["nominated"] = PlacementToJson(e.nominated);
          j["nominated_at"] = e.nominated_at;
          j["resized_at"] = e.resized_at;
          j["last_resize_reason"] = e.last_resize_reason;
          if (e.attained != 0) j["attained"] = e.attained;
          if (e.scaled_down_at != 0) j["scaled_down_at"] = e.scaled_down_at;
          if (!e.attempts.empty()) {
            ordered_json attempts = ordered_json::array();
            for (const JobAttempt& a : e.attempts) {
              attempts.push_back({{"started_at", a.started_at}, {"ended_at", a.ended_at}, {"end", a.end}});
            }
            j["attempts"] = std::move(attempts);
          }
        } else if constexpr (std::is_same_v<E, JobsForgotten>) {
          j["type"] = "JobsForgotten";
          j["ids"] = ordered_json::array();
          for (JobId id : e.ids) j["ids"].push_back(id.value());
          j["at"] = e.at;
          j["next_id"] = e.next_id;
          if (!e.usage.empty()) {
            ordered_json usage = ordered_json::object();
            for (const auto& [queue, days] : e.usage) {
              ordered_json by_day = ordered_json::object();
              for (const auto& [day, gpu_us] : days) by_day[std::to_string(day)] = gpu_us;
              usage[queue] = std::move(by_day);
            }
            j["usage"] = std::move(usage);
          }
        } else if constexpr (std::is_same_v<E, RunHistoryState>) {
          j["type"] = "RunHistoryState";
          j["history"] = RunHistoryToJson(e.history);
        } else if constexpr (std::is_same_v<E, NodeAgentChanged>) {
          j["type"] = "NodeAgentChanged";
          j["node"] = e.node;
          j["instance"] = e.instance;
          if (!e.address.empty()) j["address"] = e.address;
        } else if constexpr (std::is_same_v<E, NodeLabelsChanged>) {
          j["type"] = "NodeLabelsChanged";
          j["node"] = e.node;
          j["labels"] = e.labels;
        } else if constexpr (std::is_same_v<E, NodeMigChanged>) {
          j["type"] = "NodeMigChanged";
          j["node"] = e.node;
          ordered_json mig = ordered_json::object();
          for (const auto& [gpu, layout] : e.mig) mig[std::to_string(gpu)] = layout;
          j["mig"] = std::move(mig);
          j["mig_fixed"] = e.mig_fixed;
        } else if constexpr (std::is_same_v<E, GpuReconfigured>) {
          j["type"] = "GpuReconfigured";
          j["node"] = e.node;
          j["gpu"] = e.gpu;
          j["layout"] = e.layout;
        } else if constexpr (std::is_same_v<E, JobCheckpointed>) {
          j["type"] = "JobCheckpointed";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["path"] = e.path;
        } else if constexpr (std::is_same_v<E, JobHoldChanged>) {
          j["type"] = "JobHoldChanged";
          j["id"] = e.id.value();
          j["held"] = e.held;
          j["at"] = e.at;
          j["by"] = e.by;
          if (e.admin) j["admin"] = true;
        } else if constexpr (std::is_same_v<E, JobCancelled>) {
          j["type"] = "JobCancelled";
          j["id"] = e.id.value();
          j["at"] = e.at;
          j["reason"] = e.reason;
        }
      },
      event);
  // Inputs are validated as UTF-8 before they become events; replacing
  // stray bytes here only keeps a bug from becoming a crash.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

StatusOr<Event> DecodeEvent(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgumentError("event: not a JSON object");
  try {
    const std::string type = j.at("type").get<std::string>();
    if (type == "NodeAdded") {
      ROTA_ASSIGN_OR_RETURN(NodeSpec spec, NodeSpecFromJson(j.at("spec"), "event NodeAdded"));
      return Event(NodeAdded{std::move(spec)});
    }
    if (type == "NodeDrainChanged") {
      return Event(
          NodeDrainChanged{j.at("node"), j.at("drained"), j.value("reason", std::string()), j.value("by_agent", false)});
    }
    if (type == "GpuHealthChanged") return Event(GpuHealthChanged{j.at("node"), j.at("gpu"), j.at("healthy")});
    if (type == "JobSubmitted") {
      ROTA_ASSIGN_OR_RETURN(JobSpec spec, JobSpecFromJson(j.at("spec")));
      spec.priority = j.at("priority_value").get<int32_t>();
      JobSubmitted e{JobId(j.at("id").get<uint64_t>()), std::move(spec), j.at("at"), j.at("user"),
                     j.value("restarts", 0), j.value("resizes", 0), j.value("rank_restarts", 0), j.value("gang_attempt", 0)};
      e.request_id = j.value("request_id", std::string());
      e.attained = j.value("attained", Duration{0});
      // A snapshot from before failed restarts were counted apart: all of
      // its restarts counted then, so they still do.
      e.failed_restarts = j.value("failed_restarts", e.restarts);
      e.array = JobId(j.value("array", uint64_t{0}));
      e.array_count = j.value("array_count", int64_t{0});
      e.array_first_index = j.value("array_first_index", int64_t{0});
      e.array_max_running = j.value("array_max_running", int32_t{0});
      e.sweep = JobId(j.value("sweep", uint64_t{0}));
      if (j.contains("rank_attempt")) {
        for (const auto& [replica, attempt] : j["rank_attempt"].items()) {
          uint32_t r = 0;
          auto [end, ec] = std::from_chars(replica.data(), replica.data() + replica.size(), r);
          if (ec != std::errc() || end != replica.data() + replica.size()) {
            return InvalidArgumentError("event JobSubmitted: rank_attempt: '" + replica + "' is not a replica index");
          }
          e.rank_attempt[r] = attempt.get<int32_t>();
        }
      }
      return Event(std::move(e));
    }
    if (type == "JobsSubmitted") {
      ROTA_ASSIGN_OR_RETURN(JobSpec spec, JobSpecFromJson(j.at("spec")));
      spec.priority = j.at("priority_value").get<int32_t>();
      return Event(JobsSubmitted{JobId(j.at("first").get<uint64_t>()), j.at("count").get<int64_t>(), std::move(spec),
                                 j.at("at"), j.at("user"), j.value("request_id", std::string()),
                                 JobId(j.value("array", uint64_t{0})), j.value("array_count", int64_t{0}),
                                 j.value("array_first_index", int64_t{0}), j.value("array_max_running", int32_t{0}),
                                 JobId(j.value("sweep", uint64_t{0}))});
    }
    if (type == "ServiceUpdated") {
      ROTA_ASSIGN_OR_RETURN(JobSpec spec, JobSpecFromJson(j.at("spec")));
      spec.priority = j.at("priority_value").get<int32_t>();
      return Event(ServiceUpdated{JobId(j.at("id").get<uint64_t>()), j.at("at"), std::move(spec), j.at("by"),
                                  j.at("spec_attempt")});
    }
    if (type == "ServiceScaled") {
      return Event(ServiceScaled{JobId(j.at("id").get<uint64_t>()), j.at("at"), j.at("desired"), j.at("reason")});
    }
    if (type == "JobBound") {
      return Event(JobBound{JobId(j.at("id").get<uint64_t>()), PlacementFromJson(j.at("placement")), j.at("at"),
                            j.value("ended", false)});
    }
    if (type == "JobFinished") {
      return Event(JobFinished{JobId(j.at("id").get<uint64_t>()),
                               j.at("outcome") == "succeeded" ? JobOutcome::kSucceeded : JobOutcome::kFailed, j.at("at"),
                               j.value("reason", std::string())});
    }
    if (type == "JobRequeued") {
      return Event(JobRequeued{JobId(j.at("id").get<uint64_t>()), j.at("at"), j.at("reason"), j.value("failed", false)});
    }
    if (type == "NodeLostChanged") return Event(NodeLostChanged{j.at("node"), j.at("lost")});
    if (type == "JobPreempting") {
      return Event(JobPreempting{JobId(j.at("id").get<uint64_t>()), j.at("at"), JobId(j.at("preemptor").get<uint64_t>()),
                                 j.at("reason"), j.value("restart", false), j.value("failed", false)});
    }
    if (type == "JobHoldChanged") {
      return Event(JobHoldChanged{JobId(j.at("id").get<uint64_t>()), j.at("held"), j.at("at"), j.at("by"),
                                  j.value("admin", false)});
    }
    if (type == "JobCancelled") {
      return Event(JobCancelled{JobId(j.at("id").get<uint64_t>()), j.at("at"), j.at("reason")});
    }
    if (type == "JobCheckpointed") {
      return Event(JobCheckpointed{JobId(j.at("id").get<uint64_t>()), j.at("at"), j.at("path")});
    }
    if (type == "JobResized") {
      return Event(JobResized{JobId(j.at("id").get<uint64_t>()), PlacementFromJson(j.at("placement")), j.at("at"),
                              j.at("reason")});
    }
    if (type == "RankRestarted") {
      return Event(RankRestarted{JobId(j.at("id").get<uint64_t>()), j.at("task"), j.at("replica"), j.at("at"),
                                 j.at("reason")});
    }
    if (type == "GpuReconfigured") return Event(GpuReconfigured{j.at("node"), j.at("gpu"), j.at("layout")});
    if (type == "JobHistory") {
      JobHistory h{JobId(j.at("id").get<uint64_t>())};
      h.preempted_at = j.at("preempted_at").get<std::vector<TimePoint>>();
      for (const auto& by : j.at("preempted_by")) h.preempted_by.push_back(JobId(by.get<uint64_t>()));
      h.last_requeue_reason = j.at("last_requeue_reason");
      h.last_placement = PlacementFromJson(j.at("last_placement"));
      h.nominated = PlacementFromJson(j.at("nominated"));
      h.nominated_at = j.at("nominated_at");
      h.resized_at = j.at("resized_at");
      h.last_resize_reason = j.at("last_resize_reason");
      h.attained = j.value("attained", Duration{0});
      h.scaled_down_at = j.value("scaled_down_at", TimePoint{0});
      if (j.contains("attempts")) {
        for (const auto& a : j.at("attempts")) {
          h.attempts.push_back({a.at("started_at").get<TimePoint>(), a.at("ended_at").get<TimePoint>(), a.at("end")});
        }
      }
      return Event(std::move(h));
    }
    if (type == "JobsForgotten") {
      JobsForgotten e;
      for (const auto& id : j.at("ids")) e.ids.push_back(JobId(id.get<uint64_t>()));
      e.at = j.at("at");
      e.next_id = j.at("next_id");
      if (j.contains("usage")) {
        for (const auto& [queue, days] : j.at("usage").items()) {
          for (const auto& [key, gpu_us] : days.items()) {
            int64_t day = 0;
            auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), day);
            if (ec != std::errc() || end != key.data() + key.size()) {
              return InvalidArgumentError("event JobsForgotten: usage: '" + key + "' is not a day");
            }
            e.usage[queue][day] = gpu_us.get<int64_t>();
          }
        }
      }
      return Event(std::move(e));
    }
    if (type == "RunHistoryState") {
      ROTA_ASSIGN_OR_RETURN(RunHistory h, RunHistoryFromJson(j.at("history")));
      return Event(RunHistoryState{std::move(h)});
    }
    if (type == "NodeAgentChanged") {
      return Event(NodeAgentChanged{j.at("node"), j.at("instance"), j.value("address", std::string())});
    }
    if (type == "NodeLabelsChanged") {
      return Event(NodeLabelsChanged{j.at("node"), j.at("labels").get<std::map<std::string, std::string>>()});
    }
    if (type == "NodeMigChanged") {
      NodeMigChanged e{j.at("node"), {}, j.at("mig_fixed")};
      for (const auto& [key, layout] : j.at("mig").items()) {
        int32_t gpu = -1;
        auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), gpu);
        if (ec != std::errc() || end != key.data() + key.size() || gpu < 0) {
          return InvalidArgumentError("event NodeMigChanged: mig: '" + key + "' is not a GPU index");
        }
        e.mig[gpu] = layout.get<std::string>();
      }
      return Event(std::move(e));
    }
    return InvalidArgumentError("event: unknown type '" + type + "'");
  } catch (const json::exception& e) {
    return InvalidArgumentError(std::string("event: ") + e.what());
  }
}

}  // namespace rota::api
