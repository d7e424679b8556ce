#include "core/run_history.h"

namespace rota {

JobId RunHistory::Join(const std::pair<std::string, int64_t>& key, JobId id, TimePoint at, JobId given, int64_t jobs) {
  auto it = open.find(key);
  JobId sweep = given;
  if (sweep.value() == 0) {
    // (Not a job submitted before the sweep's last: a snapshot from before
    // sweeps were kept replays live jobs after newer ended ones.)
    const bool joins = it != open.end() && at >= it->second.last_submit && at - it->second.last_submit <= kSweepWindow;
    sweep = joins ? it->second.sweep : id;
  }
  sweeps[sweep.value()].live += jobs;
  const JobId last(id.value() + static_cast<uint64_t>(jobs - 1));
  if (it == open.end()) {
    open.emplace(key, Open{sweep, last, at});
  } else if (it->second.last.value() < last.value()) {
    const JobId before = it->second.sweep;
    it->second = Open{sweep, last, at};
    if (before != sweep) MaybeDrop(before);
  }
  return sweep;
}

void RunHistory::End(JobId sweep, bool ended_on_its_own, double gpu_time) {
  auto it = sweeps.find(sweep.value());
  if (ended_on_its_own) {
    const int b = Bin(gpu_time);
    ++count[b];
    gpu_seconds[b] += std::llround(gpu_time);
    ++finished;
    const double l = std::log(std::max(1.0, gpu_time));
    const int64_t ls = std::llround(l * kLogScale), lq = std::llround(l * l * kLogScale);
    log_sum += ls;
    log_sq += lq;
    if (it != sweeps.end()) {
      ++it->second.finished;
      it->second.log_sum += ls;
      it->second.log_sq += lq;
    }
  }
  if (it != sweeps.end()) {
    --it->second.live;
    MaybeDrop(sweep);
  }
}

void RunHistory::MaybeDrop(JobId sweep) {
  auto it = sweeps.find(sweep.value());
  if (it == sweeps.end() || it->second.live > 0) return;
  for (const auto& [key, o] : open) {
    if (o.sweep == sweep) return;
  }
  sweeps.erase(it);
}

bool RunHistory::operator==(const RunHistory& o) const {
  return std::equal(std::begin(count), std::end(count), std::begin(o.count)) &&
         std::equal(std::begin(gpu_seconds), std::end(gpu_seconds), std::begin(o.gpu_seconds)) &&
         finished == o.finished && log_sum == o.log_sum && log_sq == o.log_sq && sweeps == o.sweeps && open == o.open;
}

}  // namespace rota
