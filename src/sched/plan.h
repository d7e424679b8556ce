// RunPlan: the offline what-if behind `rota plan`, and the engine's test
// surface. Loads a cluster (from its config) and a list of jobs, some of them
// already running at given placements, and schedules until nothing more can
// be placed at that instant. Pure: no I/O; same input, same output.
#pragma once

#include <string>
#include <vector>

#include "core/cluster_config.h"
#include "core/job_list.h"
#include "sched/engine.h"

namespace rota::sched {

struct PlanOutput {
  struct Placement {
    std::string job;
    std::string task;
    uint32_t replica = 0;
    std::string node;
    std::vector<int32_t> gpus;
    int32_t gpu_milli = 0;  // a share of gpus[0]; 0 = whole GPUs
    std::string mig;        // a MIG instance of gpus[0]: "2g.20gb@4"; empty = none
  };
  struct Pending {
    std::string job;
    std::string code;
    std::string message;
    TimePoint expected_start = 0;
    Duration expected_in = 0;  // from the plan's instant
  };
  struct Rejected {
    std::string job;
    std::string code;
    std::string error;
  };
  struct Reserved {
    std::string job;
    TimePoint start = 0;
    Duration in = 0;  // from now
    std::vector<Placement> replicas;
  };
  struct Repartitioned {
    std::string node;
    int32_t gpu = 0;
    std::string before;
    std::string layout;
  };
  struct Resized {
    std::string job;
    int32_t from = 0;  // replicas before
    int32_t to = 0;
    std::string reason;
  };
  struct Evicted {
    std::string victim;
    std::string preemptor;
    std::string reason;
    std::string signal;
    Duration grace = 0;
  };
  std::vector<Placement> placements;  // made by this plan, in decision order
  std::vector<Reserved> reservations;
  std::vector<Evicted> preemptions;
  std::vector<Repartitioned> reconfigurations;
  std::vector<Resized> resizes;  // elastic jobs grown or shrunk, in decision order  // MIG GPUs re-partitioned, in decision order
  std::vector<Pending> pending;
  std::vector<Rejected> rejected;
  int32_t cycles = 0;
  // Whether times are real instants (the file set `now:`); without, the
  // plan runs at a virtual instant and only durations from it mean anything.
  bool absolute_times = false;
};

struct PlanOptions {
  // Reasons name other jobs by their names (EngineOptions::name_jobs); off,
  // by their ids (the file's order, from 1).
  bool name_jobs = true;
};

// Errors (InvalidArgument) are for input that cannot be loaded: a bad cluster,
// duplicate job names, a running job's placement that does not fit. A job the
// cluster cannot serve is not an error: it is rejected in the output.
// The plan runs with a clock: at list.now, or without `now:` at a virtual
// instant at or after every time the file gives, with running jobs that
// give no started_at counted as having run exactly the minimum runtime (so
// they may be preempted). Running jobs' time limits give the first blocked
// jobs reservations and later jobs backfill around them.
StatusOr<PlanOutput> RunPlan(const ClusterConfig& cluster, const JobList& list, const PlanOptions& options = {});

}  // namespace rota::sched
