#include "sim/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/rng.h"

namespace rota::sim {
namespace {

// One parsing position, for errors: "file:line: column: reason".
struct Where {
  std::string_view file;
  size_t line = 0;
  Status Error(std::string_view column, const std::string& why) const {
    return InvalidArgumentError(std::string(file) + ":" + std::to_string(line) + ": " + std::string(column) + ": " + why);
  }
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

StatusOr<int64_t> Int(const Where& w, std::string_view column, std::string_view text, int64_t min, int64_t max) {
  text = Trim(text);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    return w.Error(column, "not an integer: '" + std::string(text) + "'");
  }
  if (v < min || v > max) {
    return w.Error(column, std::to_string(v) + " is out of range [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  }
  return v;
}

// Seconds (decimals allowed) to microseconds, rounded to the nearest.
StatusOr<Duration> Seconds(const Where& w, std::string_view column, std::string_view text) {
  text = Trim(text);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || !std::isfinite(v)) {
    return w.Error(column, "not a number of seconds: '" + std::string(text) + "'");
  }
  if (v < 0) return w.Error(column, "must not be negative");
  if (v > 1e9) return w.Error(column, "more than 10^9 seconds (31 years)");
  return static_cast<Duration>(std::llround(v * kMicrosPerSecond));
}

// The next non-blank line from `pos` (trimmed), counting lines in w->line;
// false at the end of the text.
bool NextLine(std::string_view text, size_t* pos, Where* w, std::string_view* line) {
  while (*pos <= text.size()) {
    size_t nl = text.find('\n', *pos);
    if (nl == std::string_view::npos) nl = text.size();
    *line = Trim(text.substr(*pos, nl - *pos));
    ++w->line;
    *pos = nl + 1;
    if (!line->empty()) return true;
  }
  return false;
}

// Header name -> column index; every `required` name must be there.
StatusOr<std::map<std::string, size_t>> Header(std::string_view line, std::string_view file,
                                               std::initializer_list<std::string_view> required) {
  std::map<std::string, size_t> cols;
  const std::vector<std::string> names = SplitCsv(line);
  for (size_t i = 0; i < names.size(); ++i) cols.emplace(std::string(Trim(names[i])), i);
  for (std::string_view r : required) {
    if (!cols.count(std::string(r))) {
      return InvalidArgumentError(std::string(file) + ":1: header: missing column '" + std::string(r) + "'");
    }
  }
  return cols;
}

// Calls `row(where, fields)` for every non-blank line after the header.
template <typename Row>
Status ForEachRow(std::string_view text, std::string_view file, std::initializer_list<std::string_view> required,
                  Row row) {
  size_t pos = 0;
  Where w{file, 0};
  std::map<std::string, size_t> cols;
  bool have_header = false;
  std::string_view line;
  while (NextLine(text, &pos, &w, &line)) {
    if (!have_header) {
      ROTA_ASSIGN_OR_RETURN(cols, Header(line, file, required));
      have_header = true;
      continue;
    }
    std::vector<std::string> fields = SplitCsv(line);
    auto get = [&](std::string_view name) -> std::string_view {
      auto it = cols.find(std::string(name));
      if (it == cols.end() || it->second >= fields.size()) return {};
      return fields[it->second];
    };
    auto has = [&](std::string_view name) { return cols.count(std::string(name)) > 0; };
    if (fields.size() < cols.size()) {
      return w.Error("row", "has " + std::to_string(fields.size()) + " fields, the header has " + std::to_string(cols.size()));
    }
    ROTA_RETURN_IF_ERROR(row(w, get, has));
  }
  if (!have_header) return InvalidArgumentError(std::string(file) + ": empty: no header line");
  return Status::Ok();
}

std::vector<std::string> SplitModels(std::string_view s) {
  std::vector<std::string> out;
  s = Trim(s);
  while (!s.empty()) {
    size_t bar = s.find('|');
    std::string_view m = Trim(s.substr(0, bar));
    if (!m.empty()) out.emplace_back(m);
    if (bar == std::string_view::npos) break;
    s.remove_prefix(bar + 1);
  }
  return out;
}

Status ParseRotaRow(const Where& w, const auto& get, const auto& has, TraceJob* j) {
  j->name = std::string(Trim(get("name")));
  if (j->name.empty()) return w.Error("name", "must not be empty");
  ROTA_ASSIGN_OR_RETURN(j->submit, Seconds(w, "submit_s", get("submit_s")));
  ROTA_ASSIGN_OR_RETURN(j->duration, Seconds(w, "duration_s", get("duration_s")));
  ROTA_ASSIGN_OR_RETURN(int64_t gpus, Int(w, "gpus", get("gpus"), 0, 64));
  j->gpus = static_cast<int32_t>(gpus);
  auto present = [&](std::string_view c) { return has(c) && !Trim(get(c)).empty(); };
  if (present("replicas")) {
    ROTA_ASSIGN_OR_RETURN(int64_t r, Int(w, "replicas", get("replicas"), 1, 100'000));
    j->replicas = static_cast<int32_t>(r);
  }
  if (present("queue")) j->queue = std::string(Trim(get("queue")));
  if (present("priority")) {
    ROTA_ASSIGN_OR_RETURN(int64_t p, Int(w, "priority", get("priority"), 0, 1'000'000));
    j->priority = static_cast<int32_t>(p);
  }
  if (present("checkpoint_s")) {
    ROTA_ASSIGN_OR_RETURN(j->checkpoint_interval, Seconds(w, "checkpoint_s", get("checkpoint_s")));
  }
  if (present("time_limit_s")) {
    ROTA_ASSIGN_OR_RETURN(j->time_limit, Seconds(w, "time_limit_s", get("time_limit_s")));
  }
  if (present("gpu_model")) j->gpu_models = SplitModels(get("gpu_model"));
  return Status::Ok();
}

StatusOr<std::vector<TraceJob>> ParseRotaJsonLines(std::string_view text, std::string_view file) {
  std::vector<TraceJob> jobs;
  Where w{file, 0};
  size_t pos = 0;
  std::string_view line;
  while (NextLine(text, &pos, &w, &line)) {
    nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded() || !obj.is_object()) return w.Error("line", "not a JSON object");
    std::map<std::string, std::string> fields;
    for (const auto& [key, value] : obj.items()) {
      if (value.is_string()) {
        fields[key] = value.get<std::string>();
      } else if (value.is_number()) {
        fields[key] = value.dump();
      } else {
        return w.Error(key, "must be a string or a number");
      }
    }
    for (std::string_view required : {"name", "submit_s", "duration_s", "gpus"}) {
      if (!fields.count(std::string(required))) return w.Error(required, "missing");
    }
    auto get = [&](std::string_view k) -> std::string_view {
      auto it = fields.find(std::string(k));
      return it == fields.end() ? std::string_view() : std::string_view(it->second);
    };
    auto has = [&](std::string_view k) { return fields.count(std::string(k)) > 0; };
    TraceJob j;
    if (Status row = ParseRotaRow(w, get, has, &j); !row.ok()) return row;
    jobs.push_back(std::move(j));
  }
  return jobs;
}

}  // namespace

std::vector<std::string> SplitCsv(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(std::move(cur));
  return out;
}

StatusOr<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "rota") return TraceFormat::kRota;
  if (name == "philly") return TraceFormat::kPhilly;
  if (name == "tiresias") return TraceFormat::kTiresias;
  if (name == "openb") return TraceFormat::kOpenb;
  return InvalidArgumentError("--format: unknown trace format '" + std::string(name) +
                              "' (known: openb, philly, tiresias, rota)");
}

StatusOr<std::vector<TraceJob>> ParseTrace(TraceFormat format, std::string_view text, std::string_view file) {
  std::vector<TraceJob> jobs;
  switch (format) {
    case TraceFormat::kRota: {
      size_t first = text.find_first_not_of(" \t\r\n");
      if (first != std::string_view::npos && text[first] == '{') {
        ROTA_ASSIGN_OR_RETURN(jobs, ParseRotaJsonLines(text, file));
        break;
      }
      ROTA_RETURN_IF_ERROR(ForEachRow(text, file, {"name", "submit_s", "duration_s", "gpus"},
                                      [&](const Where& w, const auto& get, const auto& has) -> Status {
                                        TraceJob j;
                                        if (Status row = ParseRotaRow(w, get, has, &j); !row.ok()) return row;
                                        jobs.push_back(std::move(j));
                                        return Status::Ok();
                                      }));
      break;
    }
    case TraceFormat::kPhilly:
      ROTA_RETURN_IF_ERROR(ForEachRow(
          text, file, {"timestamp", "duration", "num_gpus", "cluster"},
          [&](const Where& w, const auto& get, const auto&) -> Status {
            TraceJob j;
            std::string stamp(Trim(get("timestamp")));
            if (stamp.size() == 19 && stamp[10] == ' ') stamp[10] = 'T';
            StatusOr<TimePoint> at = ParseTime(stamp + "Z");
            if (!at.ok()) return w.Error("timestamp", "not 'YYYY-MM-DD HH:MM:SS': '" + std::string(get("timestamp")) + "'");
            j.submit = *at;
            ROTA_ASSIGN_OR_RETURN(j.duration, Seconds(w, "duration", get("duration")));
            ROTA_ASSIGN_OR_RETURN(int64_t gpus, Int(w, "num_gpus", get("num_gpus"), 0, 100'000));
            // Philly's servers have 8 GPUs (some 4): a larger job is replicas
            // of 8 GPUs each, or of 4 when its count is not a multiple of 8.
            j.gpus = static_cast<int32_t>(gpus);
            for (int32_t per : {8, 4, 2}) {
              if (gpus > 8 && gpus % per == 0) {
                j.gpus = per;
                j.replicas = static_cast<int32_t>(gpus / per);
                break;
              }
            }
            if (j.gpus > 8) return w.Error("num_gpus", std::to_string(gpus) + " GPUs do not split into servers of 8, 4 or 2");
            j.queue = std::string(Trim(get("cluster")));
            j.name = "philly-" + std::to_string(w.line - 1);
            jobs.push_back(std::move(j));
            return Status::Ok();
          }));
      break;
    case TraceFormat::kTiresias:
      ROTA_RETURN_IF_ERROR(ForEachRow(text, file, {"job_id", "num_gpu", "submit_time", "duration"},
                                      [&](const Where& w, const auto& get, const auto&) -> Status {
                                        TraceJob j;
                                        j.name = std::string(Trim(get("job_id")));
                                        ROTA_ASSIGN_OR_RETURN(int64_t gpus, Int(w, "num_gpu", get("num_gpu"), 0, 100'000));
                                        j.gpus = static_cast<int32_t>(gpus);
                                        ROTA_ASSIGN_OR_RETURN(j.submit, Seconds(w, "submit_time", get("submit_time")));
                                        ROTA_ASSIGN_OR_RETURN(j.duration, Seconds(w, "duration", get("duration")));
                                        jobs.push_back(std::move(j));
                                        return Status::Ok();
                                      }));
      break;
    case TraceFormat::kOpenb:
      ROTA_RETURN_IF_ERROR(ForEachRow(
          text, file, {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"},
          [&](const Where& w, const auto& get, const auto& has) -> Status {
            TraceJob j;
            j.name = std::string(Trim(get("name")));
            ROTA_ASSIGN_OR_RETURN(j.cpu, Int(w, "cpu_milli", get("cpu_milli"), 0, int64_t{1} << 40));
            ROTA_ASSIGN_OR_RETURN(j.memory, Int(w, "memory_mib", get("memory_mib"), 0, int64_t{1} << 40));
            ROTA_ASSIGN_OR_RETURN(int64_t gpus, Int(w, "num_gpu", get("num_gpu"), 0, 64));
            ROTA_ASSIGN_OR_RETURN(int64_t milli, Int(w, "gpu_milli", get("gpu_milli"), 0, 1000));
            j.gpus = static_cast<int32_t>(gpus);
            j.gpu_milli = gpus == 0 ? 0 : static_cast<int32_t>(milli);
            if (gpus > 0 && milli == 0) return w.Error("gpu_milli", "0 with num_gpu " + std::to_string(gpus));
            if (gpus > 1 && milli != 1000) return w.Error("gpu_milli", "a share below 1000 needs num_gpu 1");
            if (has("gpu_spec")) j.gpu_models = SplitModels(get("gpu_spec"));
            if (has("creation_time") && !Trim(get("creation_time")).empty()) {
              ROTA_ASSIGN_OR_RETURN(j.submit, Seconds(w, "creation_time", get("creation_time")));
            }
            if (has("deletion_time") && !Trim(get("deletion_time")).empty()) {
              ROTA_ASSIGN_OR_RETURN(Duration end, Seconds(w, "deletion_time", get("deletion_time")));
              j.duration = std::max<Duration>(0, end - j.submit);
            }
            jobs.push_back(std::move(j));
            return Status::Ok();
          }));
      break;
  }
  if (jobs.empty()) return InvalidArgumentError(std::string(file) + ": no jobs");
  std::stable_sort(jobs.begin(), jobs.end(), [](const TraceJob& a, const TraceJob& b) { return a.submit < b.submit; });
  const TimePoint origin = jobs.front().submit;
  for (TraceJob& j : jobs) j.submit -= origin;
  return jobs;
}

StatusOr<std::vector<TraceNode>> ParseNodeList(std::string_view text, std::string_view file) {
  std::vector<TraceNode> nodes;
  ROTA_RETURN_IF_ERROR(ForEachRow(text, file, {"sn", "cpu_milli", "memory_mib", "gpu", "model"},
                                  [&](const Where& w, const auto& get, const auto&) -> Status {
                                    TraceNode n;
                                    n.name = std::string(Trim(get("sn")));
                                    if (n.name.empty()) return w.Error("sn", "must not be empty");
                                    ROTA_ASSIGN_OR_RETURN(n.cpu, Int(w, "cpu_milli", get("cpu_milli"), 0, int64_t{1} << 40));
                                    ROTA_ASSIGN_OR_RETURN(n.memory, Int(w, "memory_mib", get("memory_mib"), 0, int64_t{1} << 40));
                                    ROTA_ASSIGN_OR_RETURN(int64_t gpus, Int(w, "gpu", get("gpu"), 0, 64));
                                    n.gpus = static_cast<int32_t>(gpus);
                                    n.model = std::string(Trim(get("model")));
                                    nodes.push_back(std::move(n));
                                    return Status::Ok();
                                  }));
  if (nodes.empty()) return InvalidArgumentError(std::string(file) + ": no nodes");
  return nodes;
}

std::vector<NodeSpec> NodesFromList(const std::vector<TraceNode>& list) {
  std::vector<NodeSpec> nodes;
  for (const TraceNode& t : list) {
    NodeSpec spec;
    spec.name = t.name;
    spec.gpus = t.gpus;
    spec.gpu_model = t.gpus > 0 ? t.model : "";
    spec.cpu = t.cpu;
    spec.memory = t.memory;
    spec.labels = {{"hostname", t.name}, {"rack", "rack0"}, {"spine", "spine0"}};
    if (t.gpus > 0) spec.labels["gpu_model"] = t.model;
    nodes.push_back(std::move(spec));
  }
  return nodes;
}

StatusOr<std::vector<NodeSpec>> ParseClusterSpec(std::string_view text, std::string_view file) {
  std::vector<NodeSpec> nodes;
  ROTA_RETURN_IF_ERROR(ForEachRow(
      text, file, {"num_switch", "num_node_p_switch", "num_gpu_p_node"},
      [&](const Where& w, const auto& get, const auto&) -> Status {
        if (!nodes.empty()) return w.Error("row", "one row: the cluster");
        ROTA_ASSIGN_OR_RETURN(int64_t switches, Int(w, "num_switch", get("num_switch"), 1, 10'000));
        ROTA_ASSIGN_OR_RETURN(int64_t per_switch, Int(w, "num_node_p_switch", get("num_node_p_switch"), 1, 100'000));
        ROTA_ASSIGN_OR_RETURN(int64_t gpus, Int(w, "num_gpu_p_node", get("num_gpu_p_node"), 1, 64));
        if (switches * per_switch > 1'000'000) return w.Error("num_node_p_switch", "more than 1,000,000 nodes");
        for (int64_t sw = 0; sw < switches; ++sw) {
          for (int64_t n = 0; n < per_switch; ++n) {
            NodeSpec spec;
            spec.name = "sw" + std::to_string(sw) + "-n" + std::to_string(n);
            spec.gpus = static_cast<int32_t>(gpus);
            spec.gpu_model = "gpu";
            spec.cpu = 64000;
            spec.memory = 262144;
            spec.labels = {{"hostname", spec.name}, {"gpu_model", "gpu"}, {"rack", "sw" + std::to_string(sw)},
                           {"spine", "spine0"}};
            nodes.push_back(std::move(spec));
          }
        }
        return Status::Ok();
      }));
  if (nodes.empty()) return InvalidArgumentError(std::string(file) + ": no cluster row");
  return nodes;
}

StatusOr<std::vector<int64_t>> ParseGpuSeconds(std::string_view text, std::string_view file) {
  std::vector<int64_t> out;
  size_t pos = 0;
  Where w{file, 0};
  std::string_view line;
  bool header = true;
  while (NextLine(text, &pos, &w, &line)) {
    if (std::exchange(header, false)) continue;
    ROTA_ASSIGN_OR_RETURN(int64_t v, Int(w, "gpu_seconds", line, 1, 1'000'000'000'000'000));
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgumentError(std::string(file) + ": no samples");
  return out;
}

StatusOr<std::vector<std::pair<TimePoint, double>>> ParseRequestRate(std::string_view text, std::string_view file) {
  std::vector<std::pair<TimePoint, double>> out;
  ROTA_RETURN_IF_ERROR(ForEachRow(text, file, {"t_s", "requests_per_s"},
                                  [&](const Where& w, const auto& get, const auto&) -> Status {
                                    ROTA_ASSIGN_OR_RETURN(const Duration t, Seconds(w, "t_s", get("t_s")));
                                    const std::string_view v = Trim(get("requests_per_s"));
                                    double rate = 0;
                                    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), rate);
                                    if (ec != std::errc() || end != v.data() + v.size() || v.empty() || !std::isfinite(rate)) {
                                      return w.Error("requests_per_s", "not a number: '" + std::string(v) + "'");
                                    }
                                    out.push_back({t, rate});
                                    return Status::Ok();
                                  }));
  return out;
}

std::vector<TraceJob> SyntheticPhilly(int32_t count, int64_t cluster_gpus, double load, int32_t max_gpus, uint64_t seed) {
  // Philly's GPU-count distribution (philly_jobs_pollux.csv, 82,247 jobs).
  static constexpr std::pair<int32_t, int32_t> kSizes[] = {{1, 76627}, {2, 1818}, {4, 1870}, {8, 1643}, {16, 199},
                                                           {32, 67},   {64, 6},    {128, 3}};
  std::vector<std::pair<int32_t, int32_t>> sizes;
  int64_t total_weight = 0;
  for (auto [g, w] : kSizes) {
    if (g > max_gpus) continue;
    sizes.emplace_back(g, w);
    total_weight += w;
  }
  // Log-normal with median m and mean e: mu = ln m, sigma^2 = 2 ln(e / m).
  const double mu = std::log(1144.0);
  const double sigma = std::sqrt(2.0 * std::log(13136.0 / 1144.0));
  double mean_gpus = 0;
  for (auto [g, w] : sizes) mean_gpus += static_cast<double>(g) * w / static_cast<double>(total_weight);
  // Offered load = arrival rate x mean GPUs x mean duration / cluster GPUs.
  const double rate = load * static_cast<double>(cluster_gpus) / (mean_gpus * 13136.0);
  Rng rng(seed);
  std::vector<TraceJob> jobs;
  if (!(rate > 0) || cluster_gpus <= 0) return jobs;
  jobs.reserve(count);
  double t = 0;
  for (int32_t i = 0; i < count; ++i) {
    TraceJob j;
    j.name = "syn-" + std::to_string(i);
    j.submit = static_cast<TimePoint>(t * kMicrosPerSecond);
    int64_t pick = static_cast<int64_t>(rng.Uniform(total_weight));
    int32_t gpus = sizes.back().first;
    for (auto [g, w] : sizes) {
      if (pick < w) {
        gpus = g;
        break;
      }
      pick -= w;
    }
    if (gpus > 8) {
      j.gpus = 8;
      j.replicas = gpus / 8;
    } else {
      j.gpus = gpus;
    }
    const double seconds = std::clamp(std::exp(mu + sigma * rng.Normal()), 1.0, 60.0 * 86400.0);
    j.duration = static_cast<Duration>(std::llround(seconds)) * kMicrosPerSecond;
    jobs.push_back(std::move(j));
    t += -std::log(std::max(1.0 - rng.UniformDouble(), 1e-300)) / rate;
    if (t > 1e9) break;  // beyond 31 years of arrivals
  }
  return jobs;
}

}  // namespace rota::sim
