// Accounting reports over usage records (sreport, sacct and seff in one):
// GPU-hours allocated and used by queue, user or GPU model over a period,
// the GPU-hours its GPUs sat idle and those a smaller shape would have
// freed, energy; the job families that under-use most, each with the shape
// that would have held it (core/right_size.h); and one job's attempts with
// its family's recommendation.
//
// Pure functions of the records (no server state), so a benchmark builds
// the same report from a synthetic week.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/right_size.h"
#include "core/usage_record.h"

namespace rota::server {

enum class ReportBy { kQueue, kUser, kModel };

struct ReportOptions {
  ReportBy by = ReportBy::kUser;
  int32_t idle_pct = 5;           // a sample below this is an idle GPU-second
  size_t top = 10;                // families listed with a recommendation
  RightSizeOptions right_size;
  std::string currency;           // accounting.currency, shown beside costs
};

// A job family: a job array, else the jobs of one user under one name.
std::string FamilyKey(const UsageRecord& r);

// `records`: the attempts that ended in [since, until) and the running
// attempts' measure so far.
nlohmann::ordered_json BuildReport(const std::vector<UsageRecord>& records, TimePoint since, TimePoint until,
                                   TimePoint now, const ReportOptions& options);

// One job's attempts (from `records`, which also hold its family's) and the
// family's recommendation.
nlohmann::ordered_json BuildJobReport(const std::vector<UsageRecord>& records, JobId job, TimePoint now,
                                      const ReportOptions& options);

// The recommendation for the family of `job` from `records`.
RightSize FamilyRecommendation(const std::vector<UsageRecord>& records, const UsageRecord& job, TimePoint now,
                               const RightSizeOptions& options);

}  // namespace rota::server
