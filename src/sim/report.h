// Reports of simulated runs: the summary as JSON, per-job and over-time CSV,
// and one self-contained HTML page with SVG charts (no scripts, no external
// files), so a report can be mailed or attached to a ticket as is.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sim/metrics.h"
#include "sim/openb.h"
#include "sim/service_model.h"

namespace rota::sim {

// A named run of either kind.
struct TimeRun {
  std::string name;
  Summary summary;
  const std::vector<JobResult>* jobs = nullptr;
  const std::vector<Sample>* samples = nullptr;
  int64_t total_gpus = 0;
};
struct OpenbRun {
  std::string name;
  const OpenbResult* result = nullptr;
};

nlohmann::json SummaryJson(const Summary& s);
nlohmann::json OpenbJson(const OpenbResult& r);
// Per service: requests, queueing and latency percentiles, decisions.
nlohmann::json ServicesJson(const std::vector<ServiceResult>& services);

std::string JobsCsv(const std::vector<JobResult>& jobs);
std::string SamplesCsv(const std::vector<Sample>& samples);
// Each service's scaling decisions and placed counts over time:
// service,t_s,event (decided|placed),replicas,from,panic,reason.
std::string ScalingCsv(const std::vector<ServiceResult>& services);
std::string OpenbStepsCsv(const OpenbResult& r);

// `title` heads the page; `notes` are lines of context (trace, cluster, seed).
std::string TimeHtml(const std::string& title, const std::vector<std::string>& notes, const std::vector<TimeRun>& runs);
std::string OpenbHtml(const std::string& title, const std::vector<std::string>& notes, const std::vector<OpenbRun>& runs);

// One line chart as an SVG element.
struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;
};
std::string SvgLineChart(const std::string& title, const std::string& x_label, const std::string& y_label,
                         const std::vector<Series>& series, bool log_x = false);

}  // namespace rota::sim
