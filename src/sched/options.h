// EngineOptions: every setting of the engine, with its default, in one
// place. Built from the cluster config (FromConfig); drivers change a field
// with designated initialisers or by assignment, never through setters.
//
// Example:
//   EngineOptions o = EngineOptions::FromConfig(config);
//   o.min_runtime = 5 * 60 * kMicrosPerSecond;
//   ROTA_ASSIGN_OR_RETURN(auto scheduler, Scheduler::Create(config, o));
#pragma once

#include <cstdint>

#include "base/quantity.h"
#include "core/cluster_config.h"

namespace rota::sched {

struct EngineOptions {
  // A gang is never evicted, grown again, or shrunk for a job of its own
  // priority before it has run this long since it started (or was last
  // resized); a higher-priority job may shrink it at once (shrink-elastic).
  Duration min_runtime = 10 * 60 * kMicrosPerSecond;
  // Pending jobs examined per cycle, in order (0 = all). A Slurm-style limit
  // (its backfill tests at most bf_max_job_test = 500 jobs a pass).
  int32_t max_jobs_per_cycle = 0;
  // Blocked jobs per cycle that may search for victims (each search places
  // the job a few times).
  int32_t max_preemption_searches = 32;
  // At most this many evictions of one job in any hour.
  int32_t max_preemptions_per_hour = 3;
  // GPUs freed by evicting gangs for a job are held for it (nothing else
  // takes them) while more of its victims are stopping, and for this long
  // after the last of them was freed.
  Duration nomination_ttl = 60 * kMicrosPerSecond;
  // Blocked jobs that get a reservation each cycle (0 = none), and how far
  // ahead one may start (0 = any time): config `backfill:`.
  int32_t reservation_depth = 1;
  Duration reservation_window = 0;
  // Fair share counts past usage decayed with this half-life (0 = only what
  // queues hold now): config `fair_share.half_life`.
  Duration fair_share_half_life = 7 * 24 * 3600 * kMicrosPerSecond;
  // Reasons refer to other jobs by name rather than id ("preempting job
  // train-b"): for `rota plan`, whose job ids are only the file's order.
  bool name_jobs = false;

  // The config's backfill and fair-share settings; the rest at their defaults.
  static EngineOptions FromConfig(const ClusterConfig& config) {
    EngineOptions o;
    o.reservation_depth = config.reservation_depth;
    o.reservation_window = config.reservation_window;
    o.fair_share_half_life = config.fair_share_half_life;
    return o;
  }
};

}  // namespace rota::sched
