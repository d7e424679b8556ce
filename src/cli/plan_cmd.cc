#include "cli/plan_cmd.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "api/yaml_codec.h"
#include "cli/table.h"
#include "sched/plan.h"

namespace rota::cli {
namespace {

constexpr const char* kUsage =
    "usage: rota plan --cluster CLUSTER.yaml --jobs JOBS.yaml [-o table|json]\n"
    "\n"
    "Schedules the jobs (in file order; jobs marked state: running stay where\n"
    "they are) on the cluster until nothing more can be placed, and prints the\n"
    "placements, the pending jobs with their reasons, the preemptions, the\n"
    "reservations and the rejected jobs, naming jobs by their names. The plan is\n"
    "made at the file's `now:`; without one, at the latest time the file gives,\n"
    "with running jobs that give no started_at counted as having run the minimum\n"
    "runtime (and only durations are shown).\n";

std::string GpuList(const std::vector<int32_t>& gpus) {
  // "0-3,6" style ranges.
  std::string out;
  for (size_t i = 0; i < gpus.size();) {
    size_t j = i;
    while (j + 1 < gpus.size() && gpus[j + 1] == gpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(gpus[i]);
    if (j > i) out += "-" + std::to_string(gpus[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

void PrintJson(const sched::PlanOutput& out) {
  nlohmann::ordered_json j;
  j["placements"] = nlohmann::ordered_json::array();
  for (const auto& p : out.placements) {
    nlohmann::ordered_json pj{{"job", p.job}, {"task", p.task}, {"replica", p.replica}, {"node", p.node}, {"gpus", p.gpus}};
    if (p.gpu_milli > 0) pj["gpu_fraction"] = FormatMilliCpu(p.gpu_milli);
    if (!p.mig.empty()) pj["mig"] = p.mig;
    j["placements"].push_back(std::move(pj));
  }
  j["resizes"] = nlohmann::ordered_json::array();
  for (const auto& r : out.resizes) {
    j["resizes"].push_back({{"job", r.job}, {"from", r.from}, {"to", r.to}, {"reason", r.reason}});
  }
  j["reconfigurations"] = nlohmann::ordered_json::array();
  for (const auto& r : out.reconfigurations) {
    j["reconfigurations"].push_back({{"node", r.node}, {"gpu", r.gpu}, {"before", r.before}, {"layout", r.layout}});
  }
  j["pending"] = nlohmann::ordered_json::array();
  for (const auto& p : out.pending) {
    nlohmann::ordered_json pj{{"job", p.job}, {"code", p.code}, {"message", p.message}};
    if (p.expected_start != 0 && out.absolute_times) pj["expected_start"] = FormatTime(p.expected_start);
    if (p.expected_start != 0) pj["expected_in"] = FormatSpan(p.expected_in);
    j["pending"].push_back(std::move(pj));
  }
  j["preemptions"] = nlohmann::ordered_json::array();
  for (const auto& p : out.preemptions) {
    j["preemptions"].push_back({{"victim", p.victim}, {"for", p.preemptor}, {"reason", p.reason}, {"signal", p.signal},
                                {"grace", FormatDuration(p.grace)}});
  }
  j["reservations"] = nlohmann::ordered_json::array();
  for (const auto& r : out.reservations) {
    nlohmann::ordered_json rj{{"job", r.job}};
    if (out.absolute_times) rj["start"] = FormatTime(r.start);  // (without `now:` only durations mean anything)
    rj["in"] = FormatSpan(r.in);
    rj["gpus"] = nlohmann::ordered_json::array();
    for (const auto& p : r.replicas) rj["gpus"].push_back({{"task", p.task}, {"replica", p.replica}, {"node", p.node}, {"gpus", p.gpus}});
    j["reservations"].push_back(std::move(rj));
  }
  j["rejected"] = nlohmann::ordered_json::array();
  for (const auto& r : out.rejected) j["rejected"].push_back({{"job", r.job}, {"code", r.code}, {"error", r.error}});
  std::cout << j.dump(2) << "\n";
}

void PrintTable(const sched::PlanOutput& out) {
  Table placements({"JOB", "TASK", "REPLICA", "NODE", "GPUS"});
  for (const auto& p : out.placements) {
    placements.Add({p.job, p.task, std::to_string(p.replica), p.node,
                    GpuList(p.gpus) + (p.gpu_milli > 0 ? " (" + FormatMilliCpu(p.gpu_milli) + ")" : "") +
                        (p.mig.empty() ? "" : " (MIG " + p.mig + ")")});
  }
  std::cout << "Placements (" << out.placements.size() << ")\n" << placements.Render();
  Table resized({"JOB", "FROM", "TO", "REASON"});
  for (const auto& r : out.resizes) resized.Add({r.job, std::to_string(r.from), std::to_string(r.to), r.reason});
  if (!out.resizes.empty()) std::cout << "\nElastic resizes (" << out.resizes.size() << ")\n" << resized.Render();
  Table repartitioned({"NODE", "GPU", "BEFORE", "AFTER"});
  for (const auto& r : out.reconfigurations) {
    repartitioned.Add({r.node, std::to_string(r.gpu), r.before.empty() ? "(none)" : r.before, r.layout});
  }
  if (!out.reconfigurations.empty()) {
    std::cout << "\nMIG reconfigurations (" << out.reconfigurations.size() << ")\n" << repartitioned.Render();
  }
  Table pending({"JOB", "REASON", "MESSAGE"});
  for (const auto& p : out.pending) pending.Add({p.job, p.code, p.message});
  std::cout << "\nPending (" << out.pending.size() << ")\n" << pending.Render();
  Table evicted({"VICTIM", "FOR", "SIGNAL", "GRACE", "REASON"});
  for (const auto& p : out.preemptions) evicted.Add({p.victim, p.preemptor, p.signal, FormatDuration(p.grace), p.reason});
  if (!out.preemptions.empty()) std::cout << "\nPreemptions (" << out.preemptions.size() << ")\n" << evicted.Render();
  Table reserved({"JOB", "START", "IN", "NODE", "GPUS"});
  for (const auto& r : out.reservations) {
    for (const auto& p : r.replicas) {
      reserved.Add({r.job, out.absolute_times ? FormatTime(r.start) : "-", FormatSpan(r.in), p.node, GpuList(p.gpus)});
    }
  }
  if (!out.reservations.empty()) std::cout << "\nReservations (" << out.reservations.size() << ")\n" << reserved.Render();
  Table rejected({"JOB", "REASON", "ERROR"});
  for (const auto& r : out.rejected) rejected.Add({r.job, r.code, r.error});
  std::cout << "\nRejected (" << out.rejected.size() << ")\n" << rejected.Render();
}

}  // namespace

int PlanMain(int argc, char** argv) {
  std::string cluster_path, jobs_path, output = "table";
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "rota plan: " << flag << " needs a value\n" << kUsage;
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--cluster") cluster_path = value("--cluster");
    else if (arg == "--jobs") jobs_path = value("--jobs");
    else if (arg == "-o" || arg == "--output") output = value("-o");
    else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      std::cerr << "rota plan: unknown argument '" << arg << "'\n" << kUsage;
      return 2;
    }
  }
  if (cluster_path.empty() || jobs_path.empty()) {
    std::cerr << "rota plan: --cluster and --jobs are required\n" << kUsage;
    return 2;
  }
  if (output != "table" && output != "json") {
    std::cerr << "rota plan: -o must be table or json, got '" << output << "'\n";
    return 2;
  }
  auto fail = [](const Status& s) {
    std::cerr << "rota plan: " << s.message() << "\n";
    return 2;
  };
  StatusOr<std::string> cluster_text = api::ReadFile(cluster_path);
  if (!cluster_text.ok()) return fail(cluster_text.status());
  StatusOr<ClusterConfig> cluster = api::ParseClusterConfig(*cluster_text, cluster_path);
  if (!cluster.ok()) return fail(cluster.status());
  StatusOr<std::string> jobs_text = api::ReadFile(jobs_path);
  if (!jobs_text.ok()) return fail(jobs_text.status());
  StatusOr<JobList> jobs = api::ParseJobList(*jobs_text, jobs_path);
  if (!jobs.ok()) return fail(jobs.status());
  StatusOr<sched::PlanOutput> out = sched::RunPlan(*cluster, *jobs);
  if (!out.ok()) return fail(out.status().WithPrefix(jobs_path));
  if (output == "json") PrintJson(*out);
  else PrintTable(*out);
  return 0;
}

const char* PlanUsage() { return kUsage; }

}  // namespace rota::cli
