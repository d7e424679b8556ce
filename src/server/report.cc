#include "server/report.h"

#include "core/mig.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

namespace rota::server {

// Products of prices, GPU-thousandths and seconds overflow 64 bits.
__extension__ typedef __int128 Wide;

using nlohmann::ordered_json;

namespace {

double Hours(int64_t milli_seconds) { return static_cast<double>(milli_seconds) / 1000.0 / 3600.0; }
// To `unit` (0.001, 0.01 or 0.1), as the double nearest that decimal, so
// that JSON prints 0.009, not round(v / unit) * unit's 0.009000000000000001.
double Round(double v, double unit = 0.001) {
  const double per = std::round(1 / unit);
  return std::round(v * per) / per;
}

// GPU-milli-seconds of the attempt its GPUs were busy (mean activity) and
// idle (samples below `idle_pct`), by its measured samples.
struct Split {
  int64_t used = 0, idle = 0;
};
Split SplitOf(const UsageRecord& r, int32_t idle_pct) {
  Split s;
  const int64_t total = r.activity.total();
  if (total == 0) return s;
  const int64_t held = r.gpu_milli_seconds();
  s.used = held * std::max(0, r.activity.Mean()) / 100;
  int64_t idle_samples = 0;
  for (int b = 0; b < ActivityHistogram::kBuckets && (b + 1) * 5 <= idle_pct; ++b) idle_samples += r.activity.counts[b];
  s.idle = held * idle_samples / total;
  return s;
}

// The share of the GPUs held that the recommended shape keeps (0..1).
double Kept(const RightSize& s) {
  if (!s.recommended || s.gpus_per_replica <= 0) return 1.0;
  if (s.fit_gpus > 0) return static_cast<double>(s.fit_gpus) / s.gpus_per_replica;
  if (s.fit_milli > 0) return s.fit_milli / 1000.0 / s.gpus_per_replica;
  if (!s.fit_mig.empty()) return MigProfileCompute(s.fit_mig) / 7.0 / s.gpus_per_replica;
  return 1.0;
}

struct Row {
  int64_t attempts = 0, allocated = 0, measured = 0, used = 0, idle = 0, oversized = 0, energy_mj = 0;
  // What the priced attempts cost, and the part of it their idle GPU-time was.
  int64_t cost_micros = -1, idle_cost_micros = 0;
  std::set<uint64_t> jobs;
  void Add(const UsageRecord& r, const Split& s) {
    if (r.cost_micros >= 0) {
      cost_micros = std::max<int64_t>(cost_micros, 0) + r.cost_micros;
      const int64_t held = r.gpu_milli_seconds();
      if (held > 0) idle_cost_micros += static_cast<int64_t>(static_cast<Wide>(r.cost_micros) * s.idle / held);
    }
    ++attempts;
    jobs.insert(r.job.value());
    allocated += r.gpu_milli_seconds();
    if (r.measured()) measured += r.gpu_milli_seconds();
    used += s.used;
    idle += s.idle;
    energy_mj += r.energy_mj;
  }
  ordered_json Json(const std::string& key) const {
    return {{"key", key},
            {"jobs", jobs.size()},
            {"attempts", attempts},
            {"gpu_seconds", allocated / 1000},
            {"gpu_hours", Round(Hours(allocated))},
            {"gpu_hours_measured", Round(Hours(measured))},
            {"gpu_hours_used", Round(Hours(used))},
            {"gpu_hours_idle", Round(Hours(idle))},
            {"gpu_hours_oversized", Round(Hours(oversized))},
            {"efficiency_pct", measured > 0 ? Round(100.0 * used / measured, 0.1) : -1.0},
            {"energy_j", energy_mj / 1000},
            {"energy_kwh", Round(static_cast<double>(energy_mj) / 3.6e9)},
            {"cost", cost_micros < 0 ? ordered_json() : ordered_json(Round(cost_micros / 1e6, 0.01))},
            {"cost_idle", cost_micros < 0 ? ordered_json() : ordered_json(Round(idle_cost_micros / 1e6, 0.01))}};
  }
};

std::string KeyOf(const UsageRecord& r, ReportBy by) {
  switch (by) {
    case ReportBy::kQueue: return r.queue;
    case ReportBy::kModel: return r.gpu_model.empty() ? "(no GPU)" : r.gpu_model;
    case ReportBy::kUser: break;
  }
  return r.user;
}

ordered_json RecordJson(const UsageRecord& r) {
  return {{"job", r.job.value()},
          {"attempt", r.attempt},
          {"name", r.name},
          {"user", r.user},
          {"queue", r.queue},
          {"end", r.end},
          {"reason", r.reason},
          {"started_at", FormatTime(r.started_at)},
          {"ended_at", FormatTime(r.ended_at)},
          {"seconds", r.seconds()},
          {"gpu_model", r.gpu_model},
          {"gpus", r.gpus},
          {"gpu_milli", r.gpu_milli},
          {"mig", r.mig_profile},
          {"gpu_hours", Round(Hours(r.gpu_milli_seconds()))},
          {"activity_p50", r.activity.Percentile(50)},
          {"activity_p90", r.activity.Percentile(90)},
          {"activity_p95", r.activity.Percentile(95)},
          {"gpu_memory_peak_mib", r.gpu_memory_peak},
          {"gpu_memory_mib", r.gpu_memory},
          {"energy_j", r.energy_mj / 1000},
          {"cost", r.cost_micros < 0 ? ordered_json() : ordered_json(Round(r.cost_micros / 1e6, 0.01))},
          {"cpu_used_s", r.cpu_used_us / 1'000'000},
          {"cpu_throttled_s", r.cpu_throttled_us / 1'000'000},
          {"cpu_requested_milli", r.cpu},
          {"memory_peak_mib", r.memory_peak},
          {"memory_requested_mib", r.memory},
          {"restarts", r.restarts},
          {"preemptions", r.preemptions},
          {"lost_work_s", r.lost_work_s}};
}

ordered_json RecommendationJson(const RightSize& s) {
  ordered_json j{{"recommended", s.recommended}, {"summary", s.summary}};
  if (s.recommended) j["shape"] = s.shape;
  if (s.activity_p90 >= 0) j["activity_p90"] = s.activity_p90;
  if (s.cpu > 0) j["cpu"] = FormatMilliCpu(s.cpu);
  if (s.memory > 0) j["memory"] = FormatMemoryMiB(s.memory);
  return j;
}

}  // namespace

std::string FamilyKey(const UsageRecord& r) {
  if (r.array.value() != 0) return r.user + "/array " + std::to_string(r.array.value());
  return r.user + "/" + r.name;
}

RightSize FamilyRecommendation(const std::vector<UsageRecord>& records, const UsageRecord& job, TimePoint now,
                               const RightSizeOptions& options) {
  const std::string key = FamilyKey(job);
  std::vector<const UsageRecord*> family;
  for (const UsageRecord& r : records) {
    if (FamilyKey(r) == key) family.push_back(&r);
  }
  return RecommendShape(family, now, options);
}

ordered_json BuildReport(const std::vector<UsageRecord>& records, TimePoint since, TimePoint until, TimePoint now,
                         const ReportOptions& options) {
  std::map<std::string, Row> rows;
  Row total;
  // The period in steps (an hour, or longer so that there are at most 200):
  // each row's GPU-hours held and used in each, for charts.
  const int64_t hour = 3600 * kMicrosPerSecond;
  const int64_t span = std::max<int64_t>(until - since, 1);
  const int64_t step = std::max<int64_t>(1, (span + 200 * hour - 1) / (200 * hour)) * hour;
  const size_t steps = static_cast<size_t>((span + step - 1) / step);
  std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> timeline;  // key -> held, used
  std::map<std::string, std::vector<const UsageRecord*>> families;
  std::vector<Split> splits(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const UsageRecord& r = records[i];
    // A running attempt counts from the period's start.
    UsageRecord clipped = r;
    clipped.started_at = std::max(r.started_at, since);
    clipped.ended_at = std::min(r.ended_at, until);
    if (r.cost_micros > 0 && r.seconds() > 0) {
      clipped.cost_micros = static_cast<int64_t>(static_cast<Wide>(r.cost_micros) * clipped.seconds() / r.seconds());
    }
    splits[i] = SplitOf(clipped, options.idle_pct);
    rows[KeyOf(r, options.by)].Add(clipped, splits[i]);
    if (clipped.ended_at > clipped.started_at) {
      auto& [held, used] = timeline[KeyOf(r, options.by)];
      held.resize(steps);
      used.resize(steps);
      const double gpus = (int64_t{clipped.gpus} * 1000 + clipped.gpu_milli) / 1000.0;
      const double busy = r.measured() ? std::max(0, r.activity.Mean()) / 100.0 : 0.0;
      for (TimePoint t = clipped.started_at; t < clipped.ended_at;) {
        const auto k = static_cast<size_t>((t - since) / step);
        const TimePoint next = std::min<TimePoint>(clipped.ended_at, since + static_cast<int64_t>(k + 1) * step);
        if (k >= steps) break;
        const double h = gpus * static_cast<double>(next - t) / static_cast<double>(hour);
        held[k] += h;
        used[k] += h * busy;
        t = next;
      }
    }
    total.Add(clipped, splits[i]);
    families[FamilyKey(r)].push_back(&r);
  }
  // Families with a smaller shape: what it would have freed of their GPU-hours.
  struct Under {
    std::string family;
    int64_t oversized = 0, allocated = 0;
    RightSize shape;
    std::set<uint64_t> jobs;
  };
  std::vector<Under> under;
  for (const auto& [key, members] : families) {
    RightSize shape = RecommendShape(members, now, options.right_size);
    if (!shape.recommended) continue;
    Under u{key, 0, 0, shape, {}};
    const double freed = 1.0 - Kept(shape);
    for (const UsageRecord* r : members) {
      const int64_t held = r->gpu_milli_seconds();
      const int64_t over = static_cast<int64_t>(static_cast<double>(held) * freed);
      u.allocated += held;
      u.oversized += over;
      u.jobs.insert(r->job.value());
      rows[KeyOf(*r, options.by)].oversized += over;
      total.oversized += over;
    }
    under.push_back(std::move(u));
  }
  std::sort(under.begin(), under.end(), [](const Under& a, const Under& b) {
    return a.oversized != b.oversized ? a.oversized > b.oversized : a.family < b.family;
  });
  ordered_json out{{"since", FormatTime(since)},
                   {"until", FormatTime(until)},
                   {"by", options.by == ReportBy::kQueue ? "queue" : options.by == ReportBy::kModel ? "model" : "user"},
                   {"currency", options.currency},
                   {"rows", ordered_json::array()},
                   {"total", total.Json("total")},
                   {"under_users", ordered_json::array()},
                   {"families_with_recommendation", under.size()}};
  for (const auto& [key, row] : rows) out["rows"].push_back(row.Json(key));
  ordered_json series = ordered_json::object();
  for (auto& [key, hu] : timeline) {
    ordered_json held = ordered_json::array(), used = ordered_json::array();
    for (size_t k = 0; k < steps; ++k) {
      held.push_back(Round(hu.first[k]));
      used.push_back(Round(hu.second[k]));
    }
    series[key] = {{"held", std::move(held)}, {"used", std::move(used)}};
  }
  out["timeline"] = {{"step_s", step / kMicrosPerSecond}, {"steps", steps}, {"series", std::move(series)}};
  for (size_t i = 0; i < under.size() && i < options.top; ++i) {
    const Under& u = under[i];
    ordered_json j{{"family", u.family},
                   {"jobs", u.jobs.size()},
                   {"gpu_hours", Round(Hours(u.allocated))},
                   {"gpu_hours_oversized", Round(Hours(u.oversized))}};
    j.update(RecommendationJson(u.shape));
    out["under_users"].push_back(std::move(j));
  }
  return out;
}

ordered_json BuildJobReport(const std::vector<UsageRecord>& records, JobId job, TimePoint now,
                            const ReportOptions& options) {
  ordered_json attempts = ordered_json::array();
  const UsageRecord* last = nullptr;
  int64_t held = 0, energy = 0, cost = -1;
  ActivityHistogram activity;
  for (const UsageRecord& r : records) {
    if (r.job != job) continue;
    attempts.push_back(RecordJson(r));
    if (last == nullptr || r.ended_at >= last->ended_at) last = &r;
    held += r.gpu_milli_seconds();
    energy += r.energy_mj;
    if (r.cost_micros >= 0) cost = std::max<int64_t>(cost, 0) + r.cost_micros;
    activity.Merge(r.activity);
  }
  ordered_json out{{"job", job.value()}, {"attempts", std::move(attempts)}};
  if (last == nullptr) return out;
  out["gpu_hours"] = Round(Hours(held));
  out["activity_p50"] = activity.Percentile(50);
  out["activity_p90"] = activity.Percentile(90);
  out["activity_p95"] = activity.Percentile(95);
  out["energy_kwh"] = Round(static_cast<double>(energy) / 3.6e9);
  if (cost >= 0) {
    out["cost"] = Round(cost / 1e6, 0.01);
    out["currency"] = options.currency;
  }
  out["family"] = FamilyKey(*last);
  out["recommendation"] = RecommendationJson(FamilyRecommendation(records, *last, now, options.right_size));
  return out;
}

}  // namespace rota::server
