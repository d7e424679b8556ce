#include "sched/engine.h"

#include <algorithm>
#include <cmath>

#include "sched/actions/action.h"

namespace rota::sched {

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const ClusterConfig& config, const EngineOptions& options,
                                                       const Registry& registry) {
  ROTA_ASSIGN_OR_RETURN(Profile profile, Profile::Create(config.profile, registry));
  return std::unique_ptr<Scheduler>(new Scheduler(std::move(profile), config, options));
}

Scheduler::Scheduler(Profile profile, const ClusterConfig& config, const EngineOptions& options)
    : profile_(std::move(profile)), options_(options), session_(&profile_, &options_, &book_) {
  book_.Configure(config);
}

void Scheduler::RunCycle(const Snapshot& snap, CycleResult* out) { Run(snap, nullptr, out); }

void Scheduler::RunCycle(const Snapshot& snap, TimePoint now, CycleResult* out) {
  DecayUsage(snap, now);
  Run(snap, &now, out);
}

void Scheduler::Run(const Snapshot& snap, const TimePoint* now, CycleResult* out) {
  session_.Begin(snap, now, out);
  for (const CycleAction* action : profile_.actions()) action->Execute(session_);
  out->Seal();
  // (Only a cycle that decided nothing promises: one that did saw gangs it
  // was changing, which register no wake.)
  out->unchanged_until = out->decided() ? 0 : session_.UnchangedUntil();
  std::sort(out->waits_on_checkpoint.begin(), out->waits_on_checkpoint.end());  // (each once: Session::OrderEvicts)
}

void Scheduler::SetUsageHistory(const std::map<std::string, double>& average_gpus) {
  book_.SetHistory(average_gpus);
  const double window = static_cast<double>(options_.fair_share_half_life) / std::log(2.0);
  decayed_usage_.clear();
  for (const auto& [queue, gpus] : average_gpus) decayed_usage_[queue] = gpus * window;
}

std::map<std::string, double> Scheduler::UsageHistory() const {
  std::map<std::string, double> average;
  const Duration half_life = options_.fair_share_half_life;
  if (half_life <= 0) return average;
  for (const auto& [queue, h] : decayed_usage_) average[queue] = h * std::log(2.0) / static_cast<double>(half_life);
  return average;
}

void Scheduler::DecayUsage(const Snapshot& snap, TimePoint now) {
  // Decayed usage per queue for fair share: H <- H * 2^(-dt/half_life) + held * dt.
  const Duration half_life = options_.fair_share_half_life;
  if (half_life <= 0 || !book_.configured()) return;
  const double dt = decayed_at_ == 0 ? 0 : static_cast<double>(now - decayed_at_);
  const double keep = std::exp2(-dt / static_cast<double>(half_life));
  std::map<std::string, double> held;
  for (const auto& [id, job] : snap.live_jobs()) {
    if (job->state == JobState::kRunning || job->state == JobState::kPreempting) {
      held[job->spec().queue] += static_cast<double>(job->HeldGpus());
    }
  }
  for (auto& [queue, h] : decayed_usage_) h *= keep;
  for (const auto& [queue, gpus] : held) decayed_usage_[queue] += gpus * dt;
  decayed_at_ = now;
  // As average GPUs over the window the decay integrates to: half_life / ln 2.
  book_.SetHistory(UsageHistory());
}

void Scheduler::RestoreUsage(const Snapshot& snap, TimePoint now) {
  decayed_usage_.clear();
  decayed_at_ = now;
  const Duration half_life = options_.fair_share_half_life;
  if (half_life <= 0 || !book_.configured()) return;
  const double hl = static_cast<double>(half_life);
  // GPU-microseconds held over [from, to], each instant weighed by
  // 2^(-(now - t) / half_life): the integral the cycles sum in steps.
  auto decayed = [&](TimePoint from, TimePoint to) {
    from = std::min(from, now);
    to = std::min(to, now);
    if (to <= from) return 0.0;
    return hl / std::log(2.0) *
           (std::exp2(-static_cast<double>(now - to) / hl) - std::exp2(-static_cast<double>(now - from) / hl));
  };
  for (const auto& [id, job] : snap.jobs()) {
    const int64_t gpus = job->AttemptGpus();  // (every attempt at that size)
    if (gpus == 0) continue;
    double held = 0;
    for (const JobAttempt& a : job->attempts) held += decayed(a.started_at, a.ended_at);
    if (job->state == JobState::kRunning || job->state == JobState::kPreempting) held += decayed(job->started_at, now);
    if (held > 0) decayed_usage_[job->spec().queue] += static_cast<double>(gpus) * held;
  }
  // Jobs the state forgot (past the job retention): what they held, by day,
  // each day's GPU-time weighed at its middle (at a half-life of days, a
  // day's own decay is a few percent from end to end).
  for (const auto& [queue, days] : snap.forgotten_usage()) {
    for (const auto& [day, gpu_us] : days) {
      const TimePoint middle = day * kForgottenUsageDay + kForgottenUsageDay / 2;
      const double age = static_cast<double>(std::max<TimePoint>(0, now - middle));
      decayed_usage_[queue] += static_cast<double>(gpu_us) * std::exp2(-age / hl);
    }
  }
  book_.SetHistory(UsageHistory());
}

PendingReason Scheduler::CheckResolvable(const Snapshot& snap, const JobRecord& job) {
  // No node at all (a fresh server, its agents not yet registered): nothing
  // can be judged; the job waits, saying so.
  if (snap.nodes().empty()) return {};
  session_.BeginProbe(snap);
  PendingReason why;
  if (!session_.BuildRequest(job, &why)) return why;
  if (PendingReason quota = NeverAdmitted(snap, job); !quota.ok()) return quota;
  const JobRequest& request = session_.request();
  if (request.fractional) {
    // Some node must have a GPU of the model and memory the share asks for.
    for (const TaskRequest& t : request.tasks) {
      bool any = false;
      for (uint32_t pos = 0; pos < session_.ws().size() && !any; ++pos) any = session_.ShareCouldFit(t, pos);
      if (!any && request.quota_barred_models != 0) {
        // (Nodes there are, on models its queue's limits never admit it on.)
        return {ReasonCode::kExceedsQuota, request.QuotaBarredReason()};
      }
      if (!any) {
        return {ReasonCode::kNoMatchingNodes,
                "tasks[" + std::to_string(t.task) + "]: needs " +
                    (t.mig != nullptr ? "a MIG " + *t.mig + " instance"
                     : t.milli > 0    ? FormatMilliCpu(t.milli) + " of a GPU" +
                                         (t.share_memory > 0 ? " with " + FormatMemoryMiB(t.share_memory) : "")
                                      : std::string("its CPU and memory")) +
                    (t.mig != nullptr ? "; no node has a MIG-mode GPU offering that profile (and the selector, CPU and memory)"
                                      : "; no node matches (GPU model and memory, selector, CPU and memory)")};
      }
    }
    return {};
  }
  return ExplainUnresolvable(session_.ctx(), session_.request());
}

PendingReason Scheduler::NeverAdmitted(const Snapshot& snap, const JobRecord& job) {
  const int32_t leaf = book_.configured() ? book_.LeafIndex(job.spec().queue) : -1;
  if (leaf < 0) return {};
  const JobRequest& request = session_.request();
  // The model its GPUs count against: the one it names, or the cluster's only one.
  int16_t model = snap.gpu_models().size() == 1 ? 0 : -1;
  for (const TaskRequest& t : request.tasks) {
    if ((t.gpus > 0 || t.milli > 0 || t.mig != nullptr) && t.model >= 0) model = t.model;
  }
  // An elastic job (a service) by its minimum: it starts smaller and grows
  // replica by replica, each admitted. Shares summed and rounded up.
  const int64_t gpus = session_.LeastGpus(job);
  if (model < 0 || gpus <= 0) return {};
  book_.SetModels(snap);
  const QueueBook::ModelGpus add = {{model, gpus}};
  const bool may_borrow = book_.MayBorrow(job.spec());
  for (const AdmitPlugin* a : profile_.admit()) {
    std::string why;
    if (a->Admits(book_, leaf, add, may_borrow, /*empty=*/true, &why)) continue;
    std::string ignored;
    const bool by_borrowing = !may_borrow && a->Admits(book_, leaf, add, /*may_borrow=*/true, /*empty=*/true, &ignored);
    return {ReasonCode::kExceedsQuota,
            "needs " + std::to_string(gpus) + (request.fractional ? " GPU(s), its shares rounded up; " : " GPUs; ") + why +
                (by_borrowing ? "; set `preemptible: true` (or a preemptible priority class) to borrow beyond the guarantee"
                              : "")};
  }
  return {};
}

}  // namespace rota::sched
