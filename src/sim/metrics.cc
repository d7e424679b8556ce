#include "sim/metrics.h"

#include <algorithm>
#include <cmath>

namespace rota::sim {

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
  return values[i];
}

double Jain(const std::vector<double>& x) {
  if (x.empty()) return 1;
  double sum = 0, sq = 0;
  for (double v : x) {
    sum += v;
    sq += v * v;
  }
  return sq == 0 ? 1 : sum * sum / (static_cast<double>(x.size()) * sq);
}

Summary Summarize(const std::vector<JobResult>& jobs, const std::vector<Sample>& samples, int64_t total_gpus) {
  Summary s;
  s.jobs = static_cast<int64_t>(jobs.size());
  std::vector<double> jct;
  double queue_sum = 0, lost = 0;
  TimePoint first_submit = INT64_MAX, last_end = 0;
  double useful = 0;
  std::map<std::string, std::pair<double, int64_t>> speed;  // queue -> (sum of run time / JCT, jobs)
  for (const JobResult& j : jobs) {
    first_submit = std::min(first_submit, j.submit);
    s.preemptions += j.preemptions;
    s.restarts += j.restarts;
    lost += j.lost_gpu_seconds;
    if (j.end < 0) {
      ++s.unfinished;
      continue;
    }
    last_end = std::max(last_end, j.end);
    const double t = static_cast<double>(j.jct()) / kMicrosPerSecond;
    jct.push_back(t);
    queue_sum += t - static_cast<double>(j.duration) / kMicrosPerSecond;
    useful += static_cast<double>(j.duration) / kMicrosPerSecond * static_cast<double>(j.gpus);
    auto& q = speed[j.queue];
    q.first += j.jct() > 0 ? static_cast<double>(j.duration) / static_cast<double>(j.jct()) : 1.0;
    ++q.second;
  }
  const double done = static_cast<double>(jct.size());
  if (!jct.empty()) {
    double sum = 0;
    for (double v : jct) sum += v;
    s.avg_jct_s = sum / done;
    s.avg_queue_s = queue_sum / done;
    s.p50_jct_s = Percentile(jct, 50);
    s.p95_jct_s = Percentile(jct, 95);
    s.p99_jct_s = Percentile(jct, 99);
    s.makespan_s = static_cast<double>(last_end - first_submit) / kMicrosPerSecond;
  }
  s.lost_gpu_hours = lost / 3600.0;
  std::vector<double> shares;
  for (const auto& [queue, q] : speed) shares.push_back(q.first / static_cast<double>(q.second));
  s.jain = Jain(shares);
  // Time-weighted allocation over [first submit, last end].
  double area = 0;
  for (size_t i = 0; i + 1 < samples.size(); ++i) {
    const TimePoint a = std::max(samples[i].t, first_submit);
    const TimePoint b = std::min(samples[i + 1].t, last_end);
    if (b > a) area += static_cast<double>(samples[i].allocated_gpus) * static_cast<double>(b - a);
  }
  // Unallocated GPUs while something waits.
  double waiting_area = 0, waiting_time = 0;
  for (size_t i = 0; i + 1 < samples.size(); ++i) {
    if (samples[i].pending == 0) continue;
    const double d = static_cast<double>(samples[i + 1].t - samples[i].t);
    waiting_time += d;
    waiting_area += static_cast<double>(total_gpus - samples[i].allocated_gpus) * d;
  }
  if (waiting_time > 0 && total_gpus > 0) {
    s.idle_while_waiting_pct = 100.0 * waiting_area / (waiting_time * static_cast<double>(total_gpus));
  }
  const double span = static_cast<double>(last_end - first_submit);
  if (span > 0 && total_gpus > 0) {
    s.gpu_alloc_pct_mean = 100.0 * area / (span * static_cast<double>(total_gpus));
    const double allocated_s = area / kMicrosPerSecond;
    if (allocated_s > 0) s.goodput_pct = std::min(100.0, 100.0 * useful / allocated_s);
  }
  return s;
}

}  // namespace rota::sim
