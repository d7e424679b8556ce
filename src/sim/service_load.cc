// ParseServiceLoads (service_model.h): yaml-cpp stays in this file.
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "api/yaml_codec.h"
#include "base/quantity.h"
#include "sim/service_model.h"
#include "sim/trace.h"

namespace rota::sim {
namespace {

struct Failure {
  Status status;
};

[[noreturn]] void Fail(const std::string& where, const std::string& reason) {
  throw Failure{InvalidArgumentError(where + ": " + reason)};
}

constexpr Duration kDay = 86'400'000'000;

Duration DurationAt(const YAML::Node& n, const std::string& where, Duration most = 3650 * kDay) {
  if (!n.IsScalar()) Fail(where, "must be a duration (\"30s\", \"500ms\", \"1h\")");
  StatusOr<Duration> d = ParseDuration(n.Scalar());
  if (!d.ok() || *d < 0) Fail(where, "not a duration: '" + n.Scalar() + "'");
  if (*d > most) Fail(where, "at most " + FormatDuration(most));
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
    if (!list) Fail(source + ": services", "required");
    if (!list.IsSequence() || list.size() == 0) Fail(source + ": services", "must be a non-empty list");
    std::vector<ServiceLoad> out;
    std::set<std::string> names;
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string at = source + ": services[" + std::to_string(i) + "]";
      const YAML::Node s = list[i];
      OnlyKeys(s, at, {"job", "submit", "requests", "failures"});
      ServiceLoad load;
      // (A missing key is checked first: yaml-cpp throws on asking an
      // absent node of a const map what it is.)
      if (!s["job"] || !s["job"].IsScalar()) Fail(at + ".job", "required: the path of a job spec (kind: service)");
      const std::filesystem::path path = dir / s["job"].Scalar();
      StatusOr<std::string> spec_text = api::ReadFile(path.string());
      if (!spec_text.ok()) Fail(at + ".job", std::string(spec_text.status().message()));
      StatusOr<JobSpec> spec = api::ParseJobSpec(*spec_text, path.string());
      if (!spec.ok()) throw Failure{spec.status()};
      if (!spec->is_service()) Fail(at + ".job", path.string() + " is not a service (kind: service)");
      if (!names.insert(spec->name).second) Fail(at + ".job", "a second service named '" + spec->name + "'");
      load.spec = std::move(*spec);
      if (s["submit"]) load.submit = DurationAt(s["submit"], at + ".submit");
      if (const YAML::Node f = s["failures"]) {
        OnlyKeys(f, at + ".failures", {"every"});
        if (!f["every"]) Fail(at + ".failures.every", "required: a replica's mean time between exits");
        load.failure_every = DurationAt(f["every"], at + ".failures.every");
        if (load.failure_every < kMicrosPerSecond) Fail(at + ".failures.every", "must be at least 1s");
      }
      const YAML::Node r = s["requests"];
      if (!r) Fail(at + ".requests", "required (rate, work, concurrency, startup)");
      OnlyKeys(r, at + ".requests", {"rate", "rate_file", "work", "concurrency", "startup", "memory", "metrics"});
      auto point = [&](const std::string& where, TimePoint from, double per_second) {
        if (!(per_second >= 0 && per_second <= 1e5)) Fail(where, "requests/s must be in [0, 100000]");
        if (per_second > 0 && per_second < 1e-6) Fail(where, "must be 0 or at least 1e-6 requests/s");
        if (!load.rate.empty() && from <= load.rate.back().first) Fail(where, "times must increase");
        load.rate.push_back({from, per_second});
      };
      const YAML::Node rate = r["rate"];
      if (rate && r["rate_file"]) Fail(at + ".requests", "give rate or rate_file, not both");
      if (const YAML::Node file = r["rate_file"]) {
        // (t_s,requests_per_s rows after a header: e.g. a metrics system's
        // export of a request rate; sim/trace.h.)
        if (!file.IsScalar()) Fail(at + ".requests.rate_file", "must be a path");
        const std::filesystem::path csv_path = dir / file.Scalar();
        StatusOr<std::string> csv = api::ReadFile(csv_path.string());
        if (!csv.ok()) Fail(at + ".requests.rate_file", std::string(csv.status().message()));
        StatusOr<std::vector<std::pair<TimePoint, double>>> rows = ParseRequestRate(*csv, csv_path.string());
        if (!rows.ok()) throw Failure{rows.status()};
        for (size_t k = 0; k < rows->size(); ++k) {
          point(csv_path.string() + ": row " + std::to_string(k + 1), (*rows)[k].first, (*rows)[k].second);
        }
        if (load.rate.size() < 2) Fail(csv_path.string(), "must have at least two rows (the last ends the load)");
      } else {
        if (!rate || !rate.IsSequence() || rate.size() < 2) {
          Fail(at + ".requests.rate", "must list at least two [time, requests/s] points (the last ends the load)");
        }
        for (size_t k = 0; k < rate.size(); ++k) {
          const std::string where = at + ".requests.rate[" + std::to_string(k) + "]";
          if (!rate[k].IsSequence() || rate[k].size() != 2) Fail(where, "must be [time, requests/s]");
          const TimePoint from = DurationAt(rate[k][0], where + "[0]");
          const double per_second = NumberAt(rate[k][1], where + "[1]", 0, 1e5);
          point(where, from, per_second);
        }
      }
      if (load.submit >= load.end()) Fail(at + ".submit", "must come before the load's last point (times are from the start)");
      if (r["work"]) load.work = DurationAt(r["work"], at + ".requests.work", kDay);
      if (load.work <= 0) Fail(at + ".requests.work", "must be positive");
      if (r["concurrency"]) {
        const double c = NumberAt(r["concurrency"], at + ".requests.concurrency", 1, 10'000);
        if (c != std::floor(c)) Fail(at + ".requests.concurrency", "must be a whole number");
        load.concurrency = static_cast<int32_t>(c);
      }
      if (r["startup"]) load.startup = DurationAt(r["startup"], at + ".requests.startup", kDay);
      if (const YAML::Node m = r["memory"]) {
        OnlyKeys(m, at + ".requests.memory", {"base", "per_request"});
        load.memory_base = m["base"] ? NumberAt(m["base"], at + ".requests.memory.base", 0, 1) : 0;
        if (m["per_request"]) load.memory_per_request = NumberAt(m["per_request"], at + ".requests.memory.per_request", 0, 1);
      }
      if (load.spec.service.autoscale.target_gpu_memory > 0 && load.memory_base < 0) {
        Fail(at + ".requests.memory", "the job scales on GPU memory: say how much a replica uses (base, per_request)");
      }
      if (const YAML::Node m = r["metrics"]) {
        if (!m.IsMap()) Fail(at + ".requests.metrics", "must map a metric name to waiting, running or memory");
        for (const auto& kv : m) {
          const std::string name = kv.first.Scalar();
          const std::string what = kv.second.IsScalar() ? kv.second.Scalar() : "";
          const std::string where = at + ".requests.metrics." + name;
          if (what == "waiting") load.metrics[name] = ServiceLoad::Quantity::kWaiting;
          else if (what == "running") load.metrics[name] = ServiceLoad::Quantity::kRunning;
          else if (what == "memory" && load.memory_base >= 0) load.metrics[name] = ServiceLoad::Quantity::kMemory;
          else if (what == "memory") Fail(where, "memory: say how much a replica uses (requests.memory)");
          else Fail(where, "must be waiting, running or memory, not '" + what + "'");
        }
        for (const MetricTarget& t : load.spec.service.autoscale.metrics) {
          if (!load.metrics.count(t.name)) {
            Fail(at + ".requests.metrics", "the job scales on '" + t.name + "': say what it is (waiting, running or memory)");
          }
        }
      } else if (!load.spec.service.autoscale.metrics.empty()) {
        Fail(at + ".requests.metrics", "the job scales on '" + load.spec.service.autoscale.metrics[0].name +
                                           "': say what it is (waiting, running or memory)");
      }
      out.push_back(std::move(load));
    }
    return out;
  } catch (const Failure& f) {
    return f.status;
  } catch (const YAML::Exception& e) {  // (anything the checks above missed: an error, not a crash)
    return InvalidArgumentError(source + ": " + e.msg + " (line " + std::to_string(e.mark.line + 1) + ")");
  }
}

}  // namespace rota::sim
