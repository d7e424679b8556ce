// JobListEntry: one job of a jobs file (`rota plan --jobs`, scenario tests):
// a spec, and for a job that is already running, where each replica runs.
#pragma once

#include <string>
#include <vector>

#include "core/job.h"

namespace rota {

struct ReplicaLocation {
  std::string node;
  std::vector<int32_t> gpus;
  int32_t mig_start = -1;  // a MIG replica: its instance's start slot on gpus[0]
};

struct JobListEntry {
  JobSpec spec;
  bool running = false;
  // For a running job: one entry per replica, task groups in order.
  std::vector<ReplicaLocation> placement;
  TimePoint started_at = 0;  // a running job's start (for time limits and reservations)
  TimePoint last_checkpoint = 0;  // a running job's last checkpoint (what preempting it loses)
};

// A jobs file: `now` (optional) is the instant the plan is made at; without
// it, the plan has no clock and makes no reservations.
struct JobList {
  bool has_now = false;
  TimePoint now = 0;
  std::vector<JobListEntry> jobs;
};

}  // namespace rota
