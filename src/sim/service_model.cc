#include "sim/service_model.h"

#include <algorithm>
#include <cmath>
#include <limits>


namespace rota::sim {
namespace {

constexpr TimePoint kNever = std::numeric_limits<TimePoint>::max();

// An exponential draw of mean `mean` µs, at least 1 µs (a double: a tiny
// rate's gap may not fit a Duration).
double Exponential(Rng& rng, double mean) { return std::max(1.0, -std::log1p(-rng.UniformDouble()) * mean); }

constexpr double kBucket = 1.01;       // 1% buckets
constexpr double kSmallestMs = 0.001;  // 1 µs: below it, bucket 0

}  // namespace

ServiceModel::ServiceModel(ServiceLoad load, uint64_t seed) : load_(std::move(load)), rng_(seed) {
  result_.name = load_.spec.name;
  cursor_ = last_change_ = window_start_ = placed_since_ = load_.submit;
}

TimePoint ServiceModel::NextArrival(TimePoint after) {
  const auto& rate = load_.rate;
  size_t i = 0;
  while (i + 1 < rate.size() && rate[i + 1].first <= after) ++i;
  if (rate.empty() || i + 1 >= rate.size()) return kNever;
  TimePoint t = std::max(after, rate[i].first);
  for (; i + 1 < rate.size(); ++i) {
    t = std::max(t, rate[i].first);
    const double per_second = rate[i].second;
    if (per_second > 0) {
      // (Memoryless: a draw past this segment restarts at the next one.)
      const double gap = Exponential(rng_, kMicrosPerSecond / per_second);
      if (gap < static_cast<double>(rate[i + 1].first - t)) return t + static_cast<Duration>(gap);
    }
  }
  return kNever;
}

void ServiceModel::Count(TimePoint t, int64_t delta) {
  integral_ += static_cast<double>(inflight_) * static_cast<double>(t - last_change_);
  last_change_ = t;
  inflight_ += delta;
}

void ServiceModel::StartWork(TimePoint t, uint32_t replica, Request r) {
  Replica& rep = replicas_.at(replica);
  const uint64_t id = next_id_++;
  r.started = t;
  rep.working.push_back({id, r});
  completions_.push({t + r.work, id, replica});
}

void ServiceModel::Dispatch(TimePoint t, Request r) {
  // The ready replica with the fewest outstanding, ties in turn.
  std::vector<uint32_t> ready;
  for (const auto& [index, rep] : replicas_) {
    if (rep.ready) ready.push_back(index);
  }
  if (ready.empty()) {
    if (r.retried) {  // (the router retries on another ready replica or fails)
      Count(t, -1);
      ++result_.failed;
    } else {
      router_queue_.push_back(r);
    }
    return;
  }
  const size_t start = turn_++ % ready.size();
  uint32_t best = ready[start];
  for (size_t k = 1; k < ready.size(); ++k) {
    const uint32_t c = ready[(start + k) % ready.size()];
    if (replicas_.at(c).outstanding() < replicas_.at(best).outstanding()) best = c;
  }
  Replica& rep = replicas_.at(best);
  if (static_cast<int32_t>(rep.working.size()) < load_.concurrency) {
    StartWork(t, best, r);
  } else {
    rep.waiting.push_back(r);
  }
}

void ServiceModel::Run(TimePoint to) {
  while (true) {
    if (next_arrival_ < 0) next_arrival_ = NextArrival(cursor_);
    TimePoint ready_at = kNever;
    for (const auto& [index, rep] : replicas_) {
      if (!rep.ready) ready_at = std::min(ready_at, rep.ready_at);
    }
    const TimePoint done = completions_.empty() ? kNever : completions_.top().at;
    const TimePoint expiry = router_queue_.empty() ? kNever : router_queue_.front().arrival + kQueueTimeout;
    const TimePoint t = std::min({next_arrival_, ready_at, done, expiry});
    if (t > to || t == kNever) break;
    cursor_ = t;
    if (done == t) {
      const Completion c = completions_.top();
      completions_.pop();
      auto rep = replicas_.find(c.replica);
      if (rep == replicas_.end()) continue;  // (it went away: its requests were retried)
      auto& working = rep->second.working;
      auto w = std::find_if(working.begin(), working.end(), [&](const auto& p) { return p.first == c.id; });
      if (w == working.end()) continue;
      const Request r = w->second;
      working.erase(w);
      Count(t, -1);
      ++result_.requests;
      queueing_ms_.Add(static_cast<double>(r.started - r.arrival) / 1000.0);
      latency_ms_.Add(static_cast<double>(t - r.arrival) / 1000.0);
      if (!rep->second.waiting.empty()) {
        const Request next = rep->second.waiting.front();
        rep->second.waiting.pop_front();
        StartWork(t, c.replica, next);
      }
    } else if (ready_at == t) {
      for (auto& [index, rep] : replicas_) {
        if (!rep.ready && rep.ready_at == t) rep.ready = true;
      }
      std::deque<Request> waiting;
      waiting.swap(router_queue_);
      for (const Request& r : waiting) Dispatch(t, r);
    } else if (next_arrival_ == t) {
      const Duration work = static_cast<Duration>(Exponential(rng_, static_cast<double>(load_.work)));
      if (inflight_ >= kMaxInFlight) {
        ++result_.failed;  // (refused: the router holds no more connections)
      } else {
        Count(t, +1);
        Dispatch(t, Request{t, work, 0, false});
      }
      next_arrival_ = NextArrival(t);
    } else {
      router_queue_.pop_front();
      Count(t, -1);
      ++result_.failed;
    }
  }
  cursor_ = std::max(cursor_, to);
}

std::vector<uint32_t> ServiceModel::Failures(Duration dt) {
  std::vector<uint32_t> failed;
  if (load_.failure_every <= 0) return failed;
  const double p = -std::expm1(-static_cast<double>(dt) / static_cast<double>(load_.failure_every));
  for (const auto& [index, rep] : replicas_) {
    if (rng_.UniformDouble() < p) failed.push_back(index);
  }
  result_.replica_failures += static_cast<int32_t>(failed.size());
  return failed;
}

void ServiceModel::Placed(TimePoint t) {
  result_.replica_seconds += static_cast<double>(placed_count_) * static_cast<double>(t - placed_since_) / kMicrosPerSecond;
  placed_since_ = t;
  if (placed_count_ != static_cast<int32_t>(replicas_.size())) {
    placed_count_ = static_cast<int32_t>(replicas_.size());
    result_.placed.push_back({t, placed_count_});
  }
}

void ServiceModel::Take(uint32_t replica, std::vector<Request>* broken) {
  auto it = replicas_.find(replica);
  if (it == replicas_.end()) return;
  for (const auto& [id, r] : it->second.working) broken->push_back(r);
  broken->insert(broken->end(), it->second.waiting.begin(), it->second.waiting.end());
  replicas_.erase(it);
}

void ServiceModel::Retry(TimePoint t, std::vector<Request> broken) {
  for (Request r : broken) {
    if (r.retried) {
      Count(t, -1);
      ++result_.failed;
      continue;
    }
    r.retried = true;
    ++result_.retried;
    Dispatch(t, r);
  }
}

void ServiceModel::Place(TimePoint t, const std::vector<ReplicaPlacement>& placement) {
  // Every replica going away (or moved: a new process) goes before their
  // requests are retried on the others.
  std::vector<Request> broken;
  std::vector<uint32_t> gone;
  for (const auto& [index, rep] : replicas_) {
    auto p = std::find_if(placement.begin(), placement.end(), [&](const ReplicaPlacement& x) { return x.replica == index; });
    if (p == placement.end() || p->node != rep.node || p->gpu_mask != rep.gpu_mask) gone.push_back(index);
  }
  for (uint32_t r : gone) Take(r, &broken);
  for (const ReplicaPlacement& p : placement) {
    if (replicas_.count(p.replica)) continue;
    Replica& rep = replicas_[p.replica];
    rep.node = p.node;
    rep.gpu_mask = p.gpu_mask;
    rep.ready_at = t + load_.startup;
  }
  Retry(t, std::move(broken));
}

void ServiceModel::Apply(const Event& e) {
  const TimePoint t = std::visit(
      [&](const auto& ev) -> TimePoint {
        if constexpr (requires { ev.at; }) return std::max(ev.at, cursor_);
        return cursor_;
      },
      e);
  Run(t);
  if (const auto* b = std::get_if<JobBound>(&e)) {
    Place(t, b->placement);
  } else if (const auto* r = std::get_if<JobResized>(&e)) {
    Place(t, r->placement);
  } else if (const auto* k = std::get_if<RankRestarted>(&e)) {
    auto it = replicas_.find(k->replica);
    if (it == replicas_.end()) return;
    Replica fresh;
    fresh.node = it->second.node;
    fresh.gpu_mask = it->second.gpu_mask;
    fresh.ready_at = t + load_.startup;
    std::vector<Request> broken;
    Take(k->replica, &broken);
    replicas_[k->replica] = fresh;
    Retry(t, std::move(broken));
  } else if (std::holds_alternative<JobRequeued>(e) || std::holds_alternative<JobFinished>(e) ||
             std::holds_alternative<JobCancelled>(e)) {
    Place(t, {});
  } else {
    return;
  }
  Placed(t);
}

sched::AutoscaleSample ServiceModel::Advance(TimePoint now) {
  Run(now);
  Count(now, 0);
  sched::AutoscaleSample s;
  s.at = now;
  const double span = static_cast<double>(now - window_start_);
  s.inflight = span > 0 ? integral_ / span : static_cast<double>(inflight_);
  integral_ = 0;
  window_start_ = now;
  ready_ = 0;
  double memory = 0, ready_memory = 0, waiting = 0, running = 0;
  for (const auto& [index, rep] : replicas_) {
    // (A replica loading its weights holds its base: the agents' telemetry
    // reads every placed replica's GPUs, ready or not.)
    const double used =
        std::min(1.0, std::max(0.0, load_.memory_base) + load_.memory_per_request * static_cast<double>(rep.outstanding()));
    memory += used;
    if (!rep.ready) continue;
    ++ready_;
    ready_memory += used;
    waiting += static_cast<double>(rep.waiting.size());
    running += static_cast<double>(rep.working.size());
  }
  if (load_.memory_base >= 0 && !replicas_.empty()) {
    s.gpu_memory = memory / static_cast<double>(replicas_.size());
    s.memory_replicas = static_cast<int32_t>(replicas_.size());
  }
  if (ready_ > 0) {  // (no ready replica: nothing to read them from)
    for (const auto& [name, q] : load_.metrics) {
      s.metrics[name] = q == ServiceLoad::Quantity::kWaiting   ? waiting
                        : q == ServiceLoad::Quantity::kRunning ? running
                                                               : ready_memory;
    }
  }
  return s;
}

void ServiceModel::Decided(TimePoint at, int32_t from, int32_t to, bool panic, const std::string& reason) {
  if (!result_.decisions.empty()) {
    const ServiceScaling& last = result_.decisions.back();
    if ((to > from) != (last.to > last.from)) ++result_.direction_flips;
  }
  result_.decisions.push_back({at, from, to, panic, reason});
}

ServiceResult ServiceModel::Finish(TimePoint end) {
  Run(end);
  Placed(end);
  ServiceResult out = result_;
  out.queue_p50_ms = queueing_ms_.Percentile(50);
  out.queue_p99_ms = queueing_ms_.Percentile(99);
  out.latency_p50_ms = latency_ms_.Percentile(50);
  out.latency_p99_ms = latency_ms_.Percentile(99);
  return out;
}

void ServiceModel::Histogram::Add(double ms) {
  const size_t i = ms < kSmallestMs ? 0 : 1 + static_cast<size_t>(std::log(ms / kSmallestMs) / std::log(kBucket));
  if (i >= counts.size()) counts.resize(i + 1, 0);
  ++counts[i];
  ++total;
}

double ServiceModel::Histogram::Percentile(double p) const {
  if (total == 0) return 0;
  const uint64_t rank = std::max<uint64_t>(1, static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(total))));
  uint64_t seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    seen += counts[i];
    if (seen >= rank) return i == 0 ? 0.0 : kSmallestMs * std::pow(kBucket, static_cast<double>(i));  // (its upper end)
  }
  return 0;
}

}  // namespace rota::sim
