// The controller's scheduling loop (controller.h): a thread that runs the
// engine on the latest published snapshot whenever something changed (many
// triggers coalesce into one pending cycle) and at least every
// schedule_interval, quieter while nothing changes; its decisions go to the
// actor as ToEvents' events, validated against the current state there.
#include <chrono>

#include "sched/to_events.h"
#include "server/controller.h"
#include "server/decisions.h"
#include "server/histogram.h"

namespace rota::server {

void Controller::SchedulerLoop() {
  const auto interval = std::chrono::microseconds(options_.schedule_interval);
  while (true) {
    bool asked;
    bool scheduled_now;  // a ScheduleNow waits for this pass
    uint64_t requested;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, interval, [this] { return stopping_ || trigger_; });
      if (stopping_) return;
      scheduled_now = cycles_requested_ > cycles_done_;
      asked = trigger_ || scheduled_now;
      trigger_ = false;
      // The requests this pass answers: those made before its time checks
      // (a ScheduleNow after a clock change must see them run again).
      requested = cycles_requested_;
    }
    // Silent nodes and overdue jobs are a matter of seconds: checked when a
    // cycle is asked for and at most every kCheckEvery of the clock, not on
    // every commit's trigger. (Under a 20,000-job array on 12,500 nodes that
    // walked every running job, and every node under the controller's
    // mutex, hundreds of times a second.)
    const TimePoint now = options_.clock->Now();
    if (scheduled_now || !last_checked_at_ || now - *last_checked_at_ >= kCheckEvery || now < *last_checked_at_) {
      last_checked_at_ = now;
      CheckNodes();
      // (After the nodes: a long pass never delays a node's loss.) The
      // logs of what it forgot go too, and once after a start those of
      // jobs forgotten before (a crash between a pass and its removal).
      DropLogsOf(ForgetEnded(now));
      TakeBackCutArrays();
      if (!logs_swept_) {
        DropForgottenLogs();
        logs_swept_ = true;
      }
    }
    const auto quiet = std::min<std::chrono::steady_clock::duration>(
        std::chrono::microseconds(options_.quiet_interval),
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(40 * last_cycle_seconds_)));
    if (!asked && last_cycle_idle_ && snapshot().revision() == last_cycle_revision_ &&
        std::chrono::steady_clock::now() - last_cycle_at_ < quiet) {
      continue;  // nothing changed and nothing was decided: not again so soon
    }
    RunOneCycle(requested);
  }
}

void Controller::RunOneCycle(uint64_t requested) {
  Snapshot snap = snapshot();
  const TimePoint now = options_.clock->Now();
  sched::CycleResult& result = cycle_;
  const auto t0 = std::chrono::steady_clock::now();
  scheduler_->RunCycle(snap, now, &result);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::map<std::string, double> usage = scheduler_->UsageHistory();  // (a few queues)
  {
    std::lock_guard<std::mutex> lock(reasons_mu_);
    reasons_.swap(result.pending);  // the old list is the next cycle's buffer
    reasons_by_id_ = false;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    usage_history_.swap(usage);
    metrics_.cycles++;
    metrics_.cycle_sum_seconds += seconds;
    metrics_.cycle_buckets.resize(std::size(kCycleBuckets) + 1);
    metrics_.cycle_buckets[BucketOf(kCycleBuckets, seconds)]++;
  }
  last_cycle_revision_ = snap.revision();
  last_cycle_seconds_ = seconds;
  last_cycle_at_ = std::chrono::steady_clock::now();
  last_cycle_idle_ = !result.decided();
  if (result.decided()) {
    std::vector<Event> events = sched::ToEvents(result, snap, now);
    Call<bool>([&](Batch& batch) -> StatusOr<bool> {
      const AppliedDecisions applied = ApplyDecisions(batch, events, lifecycle_);
      if (applied.retry) Trigger();
      std::lock_guard<std::mutex> lock(mu_);
      metrics_.preemptions += static_cast<uint64_t>(applied.preemptions);
      return true;
    }).status().IgnoreError();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cycles_done_ = std::max(cycles_done_, requested);
  }
  cycle_cv_.notify_all();
}

}  // namespace rota::server
