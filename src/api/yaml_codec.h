// YAML (and JSON, which yaml-cpp reads too) codecs for the user-facing
// formats of DESIGN.md: the cluster and policy configuration, one job spec,
// and a jobs file (`now: <time>` optional, `jobs: [<job spec>, ...]`).
//
// Parsing is strict: an unknown field, a wrong type, a negative or absurd
// quantity is an InvalidArgument error that names the source, line, column
// and field path, e.g.
//   "jobs.yaml:7:13: jobs[1].tasks[0].gpus: must be a whole number, got '2.5'"
// Cluster-independent rules (ValidateJobSpec) are checked too, and their
// errors carry the line of the field they name.
//
// yaml-cpp stays inside this module's .cc; callers see only core types.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/cluster_config.h"
#include "core/job_list.h"

namespace rota::api {

// `source` names the text in errors (a file name, or "request body").
StatusOr<ClusterConfig> ParseClusterConfig(std::string_view text, std::string_view source);
StatusOr<JobSpec> ParseJobSpec(std::string_view text, std::string_view source);
StatusOr<JobList> ParseJobList(std::string_view text, std::string_view source);

// Reads a whole file; NotFound or Unavailable with the path on failure.
StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace rota::api
