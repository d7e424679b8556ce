#include "cli/sim_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/yaml_codec.h"
#include "base/strings.h"
#include "cli/table.h"
#include "sim/openb.h"
#include "sim/report.h"
#include "sim/time_sim.h"

namespace rota::cli {
namespace {

constexpr const char* kUsage =
    "usage: rota sim (--cluster CLUSTER.yaml|SPEC.csv | --nodes NODE_LIST.csv)\n"
    "                (--trace FILE --format openb|philly|tiresias|rota | --synthetic JOBS [--load 0.9])\n"
    "                [--services FILE]\n"
    "                [--policy NAME] [--placement NAME] [--compare a,b,c] [--seed N]\n"
    "                [--inflate 1.3] [--failures RATE] [--repair-time 1h] [--checkpoint-interval 30m]\n"
    "                [--vc NAME] [--gittins-dist FILE] [--out DIR] [-o table|json] [--quiet]\n"
    "                [--tick 60s] [--every-tick] [--grace 0s] [--min-runtime 10m]\n"
    "\n"
    "Replays a trace through the scheduler in virtual time and prints summary metrics.\n"
    "\n"
    "Time traces (philly, tiresias, rota, --synthetic):\n"
    "  --policy     fifo, sjf, srtf, srtf-gpu, las, tiresias, gittins, rota (default rota):\n"
    "               research orders; profile: the cluster config's profile as the server runs\n"
    "               it (priorities, queues, quotas, fair share, backfill, preemption with\n"
    "               checkpoints), with the server's job lifecycle and modelled agents\n"
    "  --tick       profile: a cycle at least this often while jobs wait (default 60s), but\n"
    "               not before the engine says its decisions may change (when every job order\n"
    "               says when: priority, fifo,\n"
    "               smallest-first, learned; no decayed fair share)\n"
    "  --every-tick profile: a cycle at every tick while jobs wait all the same (slower; the\n"
    "               same decisions)\n"
    "  --grace      profile: the jobs' checkpoint grace; a job that checkpoints saves on the\n"
    "               preemption signal within it (default 0s: it keeps its last checkpoint)\n"
    "  --min-runtime profile: a gang runs this long before it may be evicted (default 10m)\n"
    "  --services   profile: services and the requests they get (YAML; docs/services.md): the\n"
    "               server's autoscaler every simulated second, the router's balancing, the\n"
    "               engine's placement; with or without a trace\n"
    "  --placement  count (GPU counting only, as the Tiresias simulator), topology (default:\n"
    "               the engine through ClusterState), bestfit, spread\n"
    "  --compare    policies to run side by side on the same input\n"
    "  --failures   GPU failures per GPU-hour (e.g. 2e-5); gangs restart from their last\n"
    "               checkpoint (--checkpoint-interval for jobs whose trace has none)\n"
    "  --vc         only the jobs of this queue (a Philly virtual cluster)\n"
    "openb pods (--format openb): the FGD experiment: shuffle with --seed, inflate to\n"
    "  --inflate x the GPU capacity, place one by one with no departures.\n"
    "  --placement  rota (default), fgd, bestfit, packing, clustering, dotprod, random\n"
    "  --compare    placements to run side by side\n"
    "Clusters: a cluster config (YAML), a Tiresias cluster spec (CSV with num_switch,\n"
    "num_node_p_switch,num_gpu_p_node,...), or a node list (--nodes; sn,cpu_milli,memory_mib,gpu,model).\n"
    "--out DIR writes summary.json, per-run CSVs and report.html (self-contained).\n";

struct Flags {
  std::string cluster, nodes, trace, format, policy, placement, out, vc, gittins, services, output = "table";
  std::vector<std::string> compare;
  uint64_t seed = 42;
  double inflate = 1.3, failures = 0, load = 0.9;
  int32_t synthetic = 0;
  Duration repair = 3600 * kMicrosPerSecond, checkpoint = 1800 * kMicrosPerSecond;
  Duration tick = 60 * kMicrosPerSecond, grace = 0, min_runtime = 10 * 60 * kMicrosPerSecond;
  bool quiet = false;
  bool every_tick = false;
};

int Fail(const std::string& message) {
  std::cerr << "rota sim: " << message << "\n";
  return 2;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "[#####.....] 45% name" on stderr, redrawn in place.
class Progress {
 public:
  Progress(bool on, std::string name) : on_(on), name_(std::move(name)) {}
  ~Progress() {
    if (on_ && drawn_) std::fprintf(stderr, "\r%*s\r", 60, "");
  }
  void operator()(double fraction) {
    if (!on_) return;
    const int filled = static_cast<int>(fraction * 30);
    std::fprintf(stderr, "\r[%.*s%.*s] %3d%% %s", filled, "##############################", 30 - filled,
                 "..............................", static_cast<int>(fraction * 100), name_.c_str());
    drawn_ = true;
  }

 private:
  bool on_;
  bool drawn_ = false;
  std::string name_;
};

std::string F(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return InvalidArgumentError("--out: cannot write " + path.string());
  f << text;
  f.close();
  if (!f) return InvalidArgumentError("--out: cannot write " + path.string());
  return Status::Ok();
}

// --out DIR: creates DIR and writes each (name, contents) into it.
Status WriteOut(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& files) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgumentError("--out: cannot create " + dir + ": " + ec.message());
  for (const auto& [name, text] : files) ROTA_RETURN_IF_ERROR(WriteFile(std::filesystem::path(dir) / name, text));
  return Status::Ok();
}

int RunOpenbMode(const Flags& flags, const std::vector<sim::TraceNode>& nodes, const std::vector<sim::TraceJob>& pods,
                 const std::vector<std::string>& notes) {
  std::vector<std::string> names = flags.compare;
  if (names.empty()) names.push_back(flags.placement.empty() ? "rota" : flags.placement);
  std::vector<sim::OpenbResult> results;
  for (const std::string& name : names) {
    sim::OpenbOptions options;
    options.placement = name;
    options.seed = flags.seed;
    options.inflate = flags.inflate;
    Progress progress(!flags.quiet && isatty(2), name);
    progress(0);
    StatusOr<sim::OpenbResult> r = sim::RunOpenb(nodes, pods, options);
    if (!r.ok()) return Fail(std::string(r.status().message()));
    results.push_back(std::move(*r));
  }
  nlohmann::ordered_json summary;
  std::vector<sim::OpenbRun> runs;
  for (size_t i = 0; i < names.size(); ++i) {
    runs.push_back({names[i], &results[i]});
    summary[names[i]] = sim::OpenbJson(results[i]);
  }
  nlohmann::ordered_json single = names.size() == 1 && flags.compare.empty() ? summary[names[0]] : summary;
  if (!flags.out.empty()) {
    std::vector<std::pair<std::string, std::string>> files = {{"summary.json", single.dump(2) + "\n"}};
    for (size_t i = 0; i < names.size(); ++i) files.push_back({"steps-" + names[i] + ".csv", sim::OpenbStepsCsv(results[i])});
    files.push_back({"report.html", sim::OpenbHtml("rota sim: openb placement", notes, runs)});
    if (Status s = WriteOut(flags.out, files); !s.ok()) return Fail(std::string(s.message()));
  }
  if (flags.output == "json") {
    std::cout << single.dump(2) << "\n";
    return 0;
  }
  for (const std::string& n : notes) std::cout << n << "\n";
  Table t({"PLACEMENT", "PODS", "FAILED", "ALLOC%@100", "ALLOC%@130", "FRAG%@130", "WALL_S"});
  for (size_t i = 0; i < names.size(); ++i) {
    const sim::OpenbResult& r = results[i];
    t.Add({names[i], std::to_string(r.steps.size()), std::to_string(r.failed), F(r.alloc_pct_by_arrived[100], 2),
           F(r.alloc_pct_by_arrived[130], 2), F(r.frag_pct_by_arrived[130], 2), F(r.wall_s, 3)});
  }
  std::cout << t.Render();
  return 0;
}

int RunTimeMode(const Flags& flags, const ClusterConfig& config, const std::vector<NodeSpec>& nodes,
                const std::vector<sim::TraceJob>& jobs, const std::vector<int64_t>& gittins,
                const std::vector<sim::ServiceLoad>& services, const std::vector<std::string>& notes) {
  std::vector<std::string> names = flags.compare;
  if (names.empty()) names.push_back(flags.policy.empty() ? "rota" : flags.policy);
  std::vector<sim::TimeSimResult> results;
  for (const std::string& name : names) {
    sim::TimeSimOptions options;
    options.policy = name;
    options.placement = flags.placement.empty() ? "topology" : flags.placement;
    options.seed = flags.seed;
    options.failure_rate = flags.failures;
    options.repair_time = flags.repair;
    options.checkpoint_interval = flags.checkpoint;
    options.gittins_samples = gittins;
    options.tick = flags.tick;
    options.every_tick = flags.every_tick;
    options.grace = flags.grace;
    options.min_runtime = flags.min_runtime;
    options.services = services;
    Progress progress(!flags.quiet && isatty(2), name);
    options.progress = [&progress](double f) { progress(f); };
    StatusOr<sim::TimeSimResult> r = sim::RunTimeSim(config, nodes, jobs, options);
    if (!r.ok()) return Fail(std::string(r.status().message()));
    for (const std::string& never : r->never) std::cerr << "rota sim: " << name << ": never ran: " << never << "\n";
    results.push_back(std::move(*r));
  }
  nlohmann::ordered_json summary;
  std::vector<sim::TimeRun> runs;
  for (size_t i = 0; i < names.size(); ++i) {
    runs.push_back({names[i], results[i].summary, &results[i].jobs, &results[i].samples, results[i].total_gpus});
    summary[names[i]] = sim::SummaryJson(results[i].summary);
    if (!results[i].services.empty()) summary[names[i]]["services"] = sim::ServicesJson(results[i].services);
  }
  nlohmann::ordered_json single = names.size() == 1 && flags.compare.empty() ? summary[names[0]] : summary;
  if (!flags.out.empty()) {
    std::vector<std::pair<std::string, std::string>> files = {{"summary.json", single.dump(2) + "\n"}};
    for (size_t i = 0; i < names.size(); ++i) {
      files.push_back({"jobs-" + names[i] + ".csv", sim::JobsCsv(results[i].jobs)});
      files.push_back({"timeline-" + names[i] + ".csv", sim::SamplesCsv(results[i].samples)});
      if (!results[i].services.empty()) {
        files.push_back({"scaling-" + names[i] + ".csv", sim::ScalingCsv(results[i].services)});
      }
    }
    files.push_back({"report.html", sim::TimeHtml("rota sim", notes, runs)});
    if (Status s = WriteOut(flags.out, files); !s.ok()) return Fail(std::string(s.message()));
  }
  if (flags.output == "json") {
    std::cout << single.dump(2) << "\n";
    return 0;
  }
  for (const std::string& n : notes) std::cout << n << "\n";
  Table t({"POLICY", "JOBS", "AVG_JCT_S", "P50_JCT_S", "P99_JCT_S", "AVG_QUEUE_S", "MAKESPAN_S", "ALLOC%", "JAIN",
           "PREEMPT", "LOST_GPU_H", "CYCLE_P99_MS", "WALL_S", "SIM_DAYS/S"});
  for (size_t i = 0; i < names.size(); ++i) {
    const sim::Summary& s = results[i].summary;
    t.Add({names[i], std::to_string(s.jobs - s.unfinished) + (s.unfinished ? "+" + std::to_string(s.unfinished) + "!" : ""),
           F(s.avg_jct_s, 0), F(s.p50_jct_s, 0), F(s.p99_jct_s, 0), F(s.avg_queue_s, 0), F(s.makespan_s, 0),
           F(s.gpu_alloc_pct_mean, 1), F(s.jain, 3), std::to_string(s.preemptions), F(s.lost_gpu_hours, 1),
           F(s.cycle_p99_ms, 2), F(s.wall_s, 3), F(s.sim_days_per_wall_s, 1)});
  }
  std::cout << t.Render();
  for (size_t i = 0; i < names.size(); ++i) {
    if (results[i].services.empty()) continue;
    Table st({"POLICY", "SERVICE", "REQUESTS", "FAILED", "RETRIED", "QUEUE_P50_MS", "QUEUE_P99_MS", "LAT_P50_MS",
              "LAT_P99_MS", "DECISIONS", "FLIPS", "REPLICA_H", "EXITS"});
    for (const sim::ServiceResult& s : results[i].services) {
      st.Add({names[i], s.name, std::to_string(s.requests), std::to_string(s.failed), std::to_string(s.retried),
              F(s.queue_p50_ms, 1), F(s.queue_p99_ms, 1), F(s.latency_p50_ms, 1), F(s.latency_p99_ms, 1),
              std::to_string(s.decisions.size()), std::to_string(s.direction_flips), F(s.replica_seconds / 3600, 2),
              std::to_string(s.replica_failures)});
    }
    std::cout << st.Render();
  }
  return 0;
}

}  // namespace

int SimMain(const std::vector<std::string>& args) {
  Flags flags;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    auto number = [&](double* out, const std::string& v) -> bool {
      try {
        size_t used = 0;
        *out = std::stod(v, &used);
        return used == v.size() && std::isfinite(*out);
      } catch (...) {
        return false;
      }
    };
    if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (arg == "--quiet") {
      flags.quiet = true;
      continue;
    }
    if (arg == "--every-tick") {
      flags.every_tick = true;
      continue;
    }
    static const char* kValued[] = {"--cluster", "--nodes", "--trace", "--format", "--policy", "--placement",
                                    "--compare", "--seed",  "--inflate", "--failures", "--repair-time",
                                    "--checkpoint-interval", "--out", "-o", "--output", "--vc", "--gittins-dist",
                                    "--synthetic", "--load", "--tick", "--grace", "--min-runtime", "--services"};
    if (std::find(std::begin(kValued), std::end(kValued), arg) == std::end(kValued)) {
      return Fail("unknown argument '" + arg + "'\n" + kUsage);
    }
    const std::string* v = value();
    if (v == nullptr) return Fail(arg + " needs a value");
    double d = 0;
    if (arg == "--cluster") flags.cluster = *v;
    else if (arg == "--nodes") flags.nodes = *v;
    else if (arg == "--trace") flags.trace = *v;
    else if (arg == "--services") flags.services = *v;
    else if (arg == "--format") flags.format = *v;
    else if (arg == "--policy") flags.policy = *v;
    else if (arg == "--placement") flags.placement = *v;
    else if (arg == "--compare") {
      flags.compare = SplitList(*v);
      if (flags.compare.empty()) return Fail("--compare: give names separated by commas");
      for (size_t a = 0; a < flags.compare.size(); ++a) {
        for (size_t b = 0; b < a; ++b) {
          if (flags.compare[a] == flags.compare[b]) return Fail("--compare: '" + flags.compare[a] + "' given twice");
        }
      }
    }
    else if (arg == "--out") flags.out = *v;
    else if (arg == "-o" || arg == "--output") flags.output = *v;
    else if (arg == "--vc") flags.vc = *v;
    else if (arg == "--gittins-dist") flags.gittins = *v;
    else if (arg == "--seed") {
      auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), flags.seed);
      if (ec != std::errc() || end != v->data() + v->size()) return Fail("--seed: not a non-negative integer: '" + *v + "'");
    } else if (arg == "--inflate") {
      if (!number(&d, *v) || d <= 0 || d > 10) return Fail("--inflate: must be a number in (0, 10], got '" + *v + "'");
      flags.inflate = d;
    } else if (arg == "--failures") {
      if (!number(&d, *v) || d < 0 || d > 1) return Fail("--failures: must be a rate per GPU-hour in [0, 1], got '" + *v + "'");
      flags.failures = d;
    } else if (arg == "--load") {
      if (!number(&d, *v) || d < 0.001 || d > 10) return Fail("--load: must be in [0.001, 10], got '" + *v + "'");
      flags.load = d;
    } else if (arg == "--synthetic") {
      if (!number(&d, *v) || d < 1 || d > 10'000'000 || d != static_cast<double>(static_cast<int64_t>(d))) {
        return Fail("--synthetic: must be a job count from 1 to 10,000,000, got '" + *v + "'");
      }
      flags.synthetic = static_cast<int32_t>(d);
    } else if (arg == "--repair-time" || arg == "--checkpoint-interval") {
      StatusOr<Duration> dur = ParseDuration(*v);
      if (!dur.ok() || *dur < 0) return Fail(arg + ": not a duration: '" + *v + "'");
      (arg == "--repair-time" ? flags.repair : flags.checkpoint) = *dur;
    } else if (arg == "--tick" || arg == "--grace" || arg == "--min-runtime") {
      StatusOr<Duration> dur = ParseDuration(*v);
      if (!dur.ok() || *dur < 0 || (arg == "--tick" && *dur == 0)) {
        return Fail(arg + ": not a " + (arg == "--tick" ? "positive " : "") + "duration: '" + *v + "'");
      }
      (arg == "--tick" ? flags.tick : arg == "--grace" ? flags.grace : flags.min_runtime) = *dur;
    }
  }
  if (flags.output != "table" && flags.output != "json") return Fail("-o must be table or json, got '" + flags.output + "'");
  if (flags.cluster.empty() == flags.nodes.empty()) return Fail("give one of --cluster or --nodes\n" + std::string(kUsage));
  if (!flags.trace.empty() && flags.synthetic != 0) return Fail("give one of --trace or --synthetic\n" + std::string(kUsage));
  if (flags.trace.empty() && flags.synthetic == 0 && flags.services.empty()) {
    return Fail("give one of --trace or --synthetic (or --services alone)\n" + std::string(kUsage));
  }
  if (!flags.trace.empty() && flags.format.empty()) return Fail("--format: required with --trace (openb, philly, tiresias, rota)");

  // The cluster.
  std::vector<NodeSpec> nodes;
  std::vector<sim::TraceNode> node_list;
  ClusterConfig config;
  std::vector<std::string> notes;
  if (!flags.nodes.empty()) {
    StatusOr<std::string> text = api::ReadFile(flags.nodes);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    StatusOr<std::vector<sim::TraceNode>> list = sim::ParseNodeList(*text, flags.nodes);
    if (!list.ok()) return Fail(std::string(list.status().message()));
    node_list = *list;
    nodes = sim::NodesFromList(node_list);
  } else {
    StatusOr<std::string> text = api::ReadFile(flags.cluster);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    if (EndsWith(flags.cluster, ".csv")) {
      StatusOr<std::vector<NodeSpec>> spec = sim::ParseClusterSpec(*text, flags.cluster);
      if (!spec.ok()) return Fail(std::string(spec.status().message()));
      nodes = *spec;
    } else {
      StatusOr<ClusterConfig> parsed = api::ParseClusterConfig(*text, flags.cluster);
      if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
      config = *parsed;
      StatusOr<std::vector<NodeSpec>> expanded = ExpandNodes(config);
      if (!expanded.ok()) return Fail(flags.cluster + ": " + std::string(expanded.status().message()));
      nodes = *expanded;
    }
    for (const NodeSpec& n : nodes) node_list.push_back({n.name, n.cpu, n.memory, n.gpus, n.gpu_model});
  }
  int64_t gpus = 0;
  for (const NodeSpec& n : nodes) gpus += n.gpus;
  notes.push_back("cluster: " + (flags.nodes.empty() ? flags.cluster : flags.nodes) + " (" + std::to_string(nodes.size()) +
                  " nodes, " + std::to_string(gpus) + " GPUs)");

  // The jobs.
  std::vector<sim::TraceJob> jobs;
  sim::TraceFormat format = sim::TraceFormat::kRota;
  if (gpus == 0) return Fail((flags.nodes.empty() ? flags.cluster : flags.nodes) + ": the cluster has no GPUs");
  if (flags.trace.empty() && flags.synthetic == 0) {
    notes.push_back("trace: none (services only)");
  } else if (flags.synthetic > 0) {
    jobs = sim::SyntheticPhilly(flags.synthetic, gpus, flags.load, 64, flags.seed);
    notes.push_back("trace: synthetic, " + std::to_string(flags.synthetic) + " Philly-shaped jobs at load " + F(flags.load, 2) +
                    ", seed " + std::to_string(flags.seed));
  } else {
    StatusOr<sim::TraceFormat> f = sim::ParseTraceFormat(flags.format);
    if (!f.ok()) return Fail(std::string(f.status().message()));
    format = *f;
    StatusOr<std::string> text = api::ReadFile(flags.trace);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    StatusOr<std::vector<sim::TraceJob>> parsed = sim::ParseTrace(format, *text, flags.trace);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    jobs = std::move(*parsed);
    if (!flags.vc.empty()) {
      std::erase_if(jobs, [&](const sim::TraceJob& j) { return j.queue != flags.vc; });
      if (jobs.empty()) return Fail("--vc: no jobs in queue '" + flags.vc + "'");
      const TimePoint origin = jobs.front().submit;
      for (sim::TraceJob& j : jobs) j.submit -= origin;
    }
    notes.push_back("trace: " + flags.trace + " (" + flags.format + ", " + std::to_string(jobs.size()) + " jobs" +
                    (flags.vc.empty() ? "" : ", queue " + flags.vc) + ")");
  }
  std::vector<sim::ServiceLoad> services;
  if (!flags.services.empty()) {
    if (format == sim::TraceFormat::kOpenb) return Fail("--services: not with openb pods (a time trace or none)");
    StatusOr<std::string> text = api::ReadFile(flags.services);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    StatusOr<std::vector<sim::ServiceLoad>> parsed = sim::ParseServiceLoads(*text, flags.services);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    services = std::move(*parsed);
    notes.push_back("services: " + flags.services + " (" + std::to_string(services.size()) + ")");
  }
  if (format == sim::TraceFormat::kOpenb) {
    notes.push_back("seed " + std::to_string(flags.seed) + ", inflated to " + F(flags.inflate * 100, 0) + "% of GPU capacity");
    return RunOpenbMode(flags, node_list, jobs, notes);
  }
  std::vector<int64_t> gittins;
  if (!flags.gittins.empty()) {
    StatusOr<std::string> text = api::ReadFile(flags.gittins);
    if (!text.ok()) return Fail(std::string(text.status().message()));
    StatusOr<std::vector<int64_t>> samples = sim::ParseGpuSeconds(*text, flags.gittins);
    if (!samples.ok()) return Fail(std::string(samples.status().message()));
    gittins = std::move(*samples);
  }
  notes.push_back("placement: " + (flags.placement.empty() ? std::string("topology") : flags.placement) + ", seed " +
                  std::to_string(flags.seed) + (flags.failures > 0 ? ", failures " + F(flags.failures * 1e6, 1) + "e-6/GPU-h" : ""));
  return RunTimeMode(flags, config, nodes, jobs, gittins, services, notes);
}

const char* SimUsage() { return kUsage; }

}  // namespace rota::cli
