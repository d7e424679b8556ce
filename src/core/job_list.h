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
};

struct JobListEntry {
  JobSpec spec;
  bool running = false;
  // For a running job: one entry per replica, task groups in order.
  std::vector<ReplicaLocation> placement;
};

}  // namespace rota
