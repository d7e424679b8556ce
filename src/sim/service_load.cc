// ParseServiceLoads (service_model.h): yaml-cpp stays in this file.
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>

#include "api/yaml_codec.h"
#include "base/quantity.h"
#include "sim/service_model.h"

namespace rota::sim {
namespace {

struct Failure {
  Status status;
};

[[noreturn]] void Fail(const std::string& where, const std::string& reason) {
  throw Failure{InvalidArgumentError(where + ": " + reason)};
}

Duration DurationAt(const YAML::Node& n, const std::string& where) {
  if (!n.IsScalar()) Fail(where, "must be a duration (\"30s\", \"500ms\", \"1h\")");
  StatusOr<Duration> d = ParseDuration(n.Scalar());
  if (!d.ok() || *d < 0) Fail(where, "not a duration: '" + n.Scalar() + "'");
  return *d;
}

double NumberAt(const YAML::Node& n, const std::string& where, double lo, double hi) {
  double v = 0;
  try {
    if (!n.IsScalar()) throw YAML::Exception(YAML::Mark::null_mark(), "");
    v = n.as<double>();
  } catch (const YAML::Exception&) {
    Fail(where, "must be a number");
  }
  if (!(v >= lo && v <= hi)) Fail(where, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

void OnlyKeys(const YAML::Node& n, const std::string& where, const std::set<std::string>& keys) {
  if (!n.IsMap()) Fail(where, "must be a mapping");
  for (const auto& kv : n) {
    const std::string key = kv.first.Scalar();
    if (!keys.count(key)) {
      std::string known;
      for (const std::string& k : keys) known += (known.empty() ? "" : ", ") + k;
      Fail(where + "." + key, "unknown field (known: " + known + ")");
    }
  }
}

}  // namespace

StatusOr<std::vector<ServiceLoad>> ParseServiceLoads(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  const std::filesystem::path dir = std::filesystem::path(source).parent_path();
  try {
    YAML::Node root;
    try {
      root = YAML::Load(std::string(text));
    } catch (const YAML::Exception& e) {
      Fail(source, "not YAML: " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
    }
    OnlyKeys(root, source, {"services"});
    const YAML::Node list = root["services"];
    if (!list.IsSequence() || list.size() == 0) Fail(source + ": services", "must be a non-empty list");
    std::vector<ServiceLoad> out;
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = source + ": services[" + std::to_string(i) + "]";
      const YAML::Node s = list[i];
      OnlyKeys(s, at, {"job", "submit", "requests"});
      ServiceLoad load;
      if (!s["job"].IsScalar()) Fail(at + ".job", "must be the path of a job spec (kind: service)");
      const std::filesystem::path path = dir / s["job"].Scalar();
      StatusOr<std::string> spec_text = api::ReadFile(path.string());
      if (!spec_text.ok()) Fail(at + ".job", std::string(spec_text.status().message()));
      StatusOr<JobSpec> spec = api::ParseJobSpec(*spec_text, path.string());
      if (!spec.ok()) throw Failure{spec.status()};
      if (!spec->is_service()) Fail(at + ".job", path.string() + " is not a service (kind: service)");
      if (!names.insert(spec->name).second) Fail(at + ".job", "a second service named '" + spec->name + "'");
      load.spec = std::move(*spec);
      if (s["submit"]) load.submit = DurationAt(s["submit"], at + ".submit");
      const YAML::Node r = s["requests"];
      OnlyKeys(r, at + ".requests", {"rate", "work", "concurrency", "startup", "memory"});
      const YAML::Node rate = r["rate"];
      if (!rate.IsSequence() || rate.size() < 2) {
        Fail(at + ".requests.rate", "must list at least two [time, requests/s] points (the last ends the load)");
      }
      for (size_t k = 0; k < rate.size(); ++k) {
        const std::string where = at + ".requests.rate[" + std::to_string(k) + "]";
        if (!rate[k].IsSequence() || rate[k].size() != 2) Fail(where, "must be [time, requests/s]");
        const TimePoint from = DurationAt(rate[k][0], where + "[0]");
        const double per_second = NumberAt(rate[k][1], where + "[1]", 0, 1e6);
        if (!load.rate.empty() && from <= load.rate.back().first) Fail(where, "times must increase");
        load.rate.push_back({from, per_second});
      }
      if (r["work"]) load.work = DurationAt(r["work"], at + ".requests.work");
      if (load.work <= 0) Fail(at + ".requests.work", "must be positive");
      if (r["concurrency"]) load.concurrency = static_cast<int32_t>(NumberAt(r["concurrency"], at + ".requests.concurrency", 1, 10'000));
      if (r["startup"]) load.startup = DurationAt(r["startup"], at + ".requests.startup");
      if (const YAML::Node m = r["memory"]) {
        OnlyKeys(m, at + ".requests.memory", {"base", "per_request"});
        load.memory_base = m["base"] ? NumberAt(m["base"], at + ".requests.memory.base", 0, 1) : 0;
        if (m["per_request"]) load.memory_per_request = NumberAt(m["per_request"], at + ".requests.memory.per_request", 0, 1);
      }
      out.push_back(std::move(load));
    }
    return out;
  } catch (const Failure& f) {
    return f.status;
  }
}

}  // namespace rota::sim
