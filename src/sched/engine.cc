#include "sched/engine.h"

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
}

void Scheduler::SetUsageHistory(const std::map<std::string, double>& average_gpus) {
  book_.SetHistory(average_gpus);
  const double window = static_cast<double>(options_.fair_share_half_life) / std::log(2.0);
  decayed_usage_.clear();
  for (const auto& [queue, gpus] : average_gpus) decayed_usage_[queue] = gpus * window;
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
      held[job->spec.queue] += static_cast<double>(job->spec.GpuEquivalent());
    }
  }
  for (auto& [queue, h] : decayed_usage_) h *= keep;
  for (const auto& [queue, gpus] : held) decayed_usage_[queue] += gpus * dt;
  decayed_at_ = now;
  // As average GPUs over the window the decay integrates to: half_life / ln 2.
  std::map<std::string, double> average;
  for (const auto& [queue, h] : decayed_usage_) average[queue] = h * std::log(2.0) / static_cast<double>(half_life);
  book_.SetHistory(average);
}

PendingReason Scheduler::CheckResolvable(const Snapshot& snap, const JobRecord& job) {
  session_.BeginProbe(snap);
  PendingReason why;
  if (!session_.BuildRequest(job, &why)) return why;
  const JobRequest& request = session_.request();
  if (request.fractional) {
    // Some node must have a GPU of the model and memory the share asks for.
    for (const TaskRequest& t : request.tasks) {
      bool any = false;
      for (uint32_t pos = 0; pos < session_.ws().size() && !any; ++pos) any = session_.ShareCouldFit(t, pos);
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

}  // namespace rota::sched
