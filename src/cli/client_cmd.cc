#include "cli/client_cmd.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "api/yaml_codec.h"
#include "base/quantity.h"
#include "base/version.h"
#include "cli/client.h"
#include "cli/suggest.h"
#include "cli/table.h"

namespace rota::cli {
namespace {

using nlohmann::json;

std::string S(const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return "";
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

// Prints the body as JSON (-o json) or through `table`; maps errors to exit codes.
int Run(const Client& c, const Response& r, const std::string& what, const std::function<void(const json&)>& table) {
  if (r.status < 200 || r.status >= 300) return Client::Fail(r, what);
  if (c.json_output()) {
    std::cout << r.body;
    return kExitOk;
  }
  json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded()) {
    std::cerr << "rota " << what << ": the server's answer is not JSON\n";
    return kExitError;
  }
  table(j);
  return kExitOk;
}

// A span in seconds as people read it ("19m57s"), "-" when absent.
std::string Span(const json& j, const char* key) {
  if (!j.contains(key) || !j[key].is_number()) return "-";
  return FormatSpan(j[key].get<int64_t>() * kMicrosPerSecond);
}

std::string GpuList(const json& gpus) {
  std::string out;
  for (const auto& g : gpus) out += (out.empty() ? "" : ",") + g.dump();
  return out;
}

// A query parameter's value, percent-encoded.
std::string UrlEncode(const std::string& v) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : v) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

// The server names a parse error's place in "request body:LINE:COLUMN";
// the user knows it as their file.
void NameTheFile(Response* r, const std::string& file) {
  if (r->status < 400) return;
  const std::string from = "request body:";
  std::string to = json(file).dump();  // escaped as the JSON body needs, without its quotes
  to = to.substr(1, to.size() - 2) + ":";
  for (size_t at = r->body.find(from); at != std::string::npos; at = r->body.find(from, at + to.size())) {
    r->body.replace(at, from.size(), to);
  }
}

int Usage(const std::string& text) {
  std::cerr << "usage: " << text << "\n";
  return kExitBadInput;
}

// Every client command: its synopsis, what it does, and the flags it takes
// besides the client flags (--server, --token, -o). --help prints it without
// calling the server; an unknown flag is refused with the closest known one.
struct CommandHelp {
  std::string name;
  std::string usage;
  std::string summary;
  std::vector<std::string> flags;
};

const std::vector<CommandHelp>& Commands() {
  static const std::vector<CommandHelp> kCommands = {
      {"submit",
       "rota submit JOB.yaml|- [--count N] [--name N] [--queue Q] [--priority P] [--gpus G] [--dry-run] [-o json]\n"
       "       rota submit JOB.yaml|- --count A-B[%K] [...]\n"
       "       rota submit --wrap 'CMD' [--gpus G] [...]",
       "Submits a job file (YAML or JSON). --count N submits a job array: N copies (1..100000), all\n"
       "accepted or none, one array id (its first job's); each task sees ROTA_ARRAY_ID, ROTA_ARRAY_INDEX\n"
       "(0..N-1) and ROTA_ARRAY_COUNT. Like sbatch --array, --count A-B gives indices A..B, and %K after\n"
       "either runs at most K elements at once (--count 0-99%8). A retry after a lost answer returns the\n"
       "job it made. Every error in the file is reported at once, a line each. `-` reads the\n"
       "job from stdin; --wrap CMD submits `sh -c CMD` (one replica: --gpus G, or one CPU), like sbatch\n"
       "--wrap; --name, --queue, --priority (a class or a number) and --gpus (a job of one task group)\n"
       "replace what the file says. --dry-run (like sbatch --test-only) says whether it would be accepted,\n"
       "and where and when it would start on the live queue (see rota whatif); nothing is submitted.",
       {"--count", "--name", "--queue", "--priority", "--gpus", "--wrap", "--dry-run"}},
      {"jobs",
       "rota jobs [--all] [--state S] [--queue Q] [--user U] [--array ID] [--limit N|0 for every page] [--after ID] "
       "[--watch] [--start] [-o json|wide]",
       "Lists jobs a page at a time (--all includes ended ones; --after ID for the next page; --array ID\n"
       "one job array's elements); --watch lists them again every 2 s; -o wide adds priority, submission\n"
       "time and each replica's node and GPUs; --start adds each pending job's expected start from the\n"
       "server's projection of its queue (see rota whatif; ~ marks an estimate).",
       {"--all", "-a", "--state", "--queue", "--user", "--array", "--limit", "--after", "--watch", "-w", "--start"}},
      {"describe", "rota describe JOB_ID [-o json]",
       "A job's state, placement, pending reason with the numbers behind it, and its events.", {}},
      {"cancel", "rota cancel JOB_ID [JOB_ID...] | --array ID | [--name NAME] [--user USER] [--state pending|running]",
       "Cancels jobs, or every live element of a job array, or (like scancel) every live job you may see\n"
       "that matches --name, --user and --state together (their tasks get SIGTERM, then SIGKILL). Many\n"
       "jobs go 10,000 to a request, each answered alone; the exit code is the first failure's.",
       {"--array", "--name", "--user", "--state"}},
      {"hold", "rota hold JOB_ID [JOB_ID...]",
       "Holds pending jobs: they are not scheduled until released (like scontrol hold).", {}},
      {"release", "rota release JOB_ID [JOB_ID...]", "Releases held jobs back into the queue (like scontrol release).", {}},
      {"requeue", "rota requeue JOB_ID [JOB_ID...]",
       "Puts running jobs back in the queue: their tasks stop, and each restarts from its last checkpoint\n"
       "when placed again (like scontrol requeue).",
       {}},
      {"logs", "rota logs JOB_ID [--task NAME|NAME-REPLICA] [--tail N] [-f]",
       "A job's output, every replica's (or one task group's or replica's); --tail N: the last N lines of\n"
       "each; -f follows it, every second, until the job ends.",
       {"--task", "--tail", "-f", "--follow"}},
      {"nodes", "rota nodes [-o json]", "Nodes, their GPUs and state (ready, lost, drained, declared).", {}},
      {"node",
       "rota node drain NAME [--reason TEXT] | undrain NAME | describe NAME [-o json]\n"
       "       rota node history NAME [--since 24h] [--step minute|hour] [-o json]",
       "Drains a node (it takes no new work; what runs there runs on) with the reason shown to everyone,\n"
       "undrains it (admin), or describes it: state, reason, labels, every GPU. history: each GPU's\n"
       "activity, memory peak, energy and power over the period, from the agents' 1 Hz samples kept a\n"
       "minute apart for 8 days and an hour apart for 400 (--gpu-history-minutes, --gpu-history-hours).",
       {"--reason", "--since", "--step"}},
      {"services", "rota services [-o json]",
       "Services (kind: service): replicas desired by the autoscaler, placed and ready, the router's\n"
       "signals (in flight, queued, latency) and the last scaling decision with its reason.",
       {}},
      {"apply", "rota apply SERVICE.yaml [-o json]",
       "Starts the service the file describes, or gives the live service of that name the new spec\n"
       "(command, env, readiness, autoscaling, replica range): its replicas roll onto it one at a time,\n"
       "each new one ready before an old one is drained and replaced (docs/services.md).",
       {}},
      {"endpoints", "rota endpoints NAME [-o json]",
       "A service's stable URL (the router's) and its replicas behind it: address, ready, outstanding.", {}},
      {"queues", "rota queues [-o json]", "Queues with their guarantees, holdings, pending and running jobs.", {}},
      {"whatif",
       "rota whatif [--add-nodes GROUP=N]... [--drain NODE]... [--config FILE | --profile FILE] [--horizon 30d] "
       "[-o json]",
       "When every pending job you can see is expected to start: the server projects its live state\n"
       "forward with its own profile (the engine it runs, in virtual time; running and pending jobs run\n"
       "to their time limits, or for the median run of finished jobs: marked ~, an estimate). With\n"
       "--add-nodes (more nodes of a config node group) or --drain, the same beside it, from one snapshot.\n"
       "--config FILE puts that cluster config's policy (queues, quotas, classes, profile, fair share,\n"
       "backfill; its node groups for --add-nodes) in place of the server's beside it; --profile FILE\n"
       "only the profile of the config in FILE: a policy change tried on today's queue before it is made.",
       {"--add-nodes", "--drain", "--horizon", "--config", "--profile"}},
      {"report", "rota report [--since 7d] [--by user|queue|model] [-o json|csv]\n       rota report job JOB_ID [-o json|csv]",
       "Where the GPU-hours went (like sreport and sacct): per user, queue or GPU model over the period,\n"
       "GPU-hours held, measured, used (by the GPUs' measured activity) and idle, those a smaller shape\n"
       "would have freed, energy in kWh; then the job families (an array, or a user's jobs of one name)\n"
       "that under-use most, each with the shape its use fits. `report job` (like seff, GPUs included):\n"
       "each attempt's allocation and measured use, and its family's recommendation. Users see their own\n"
       "jobs; admins everyone's.",
       {"--since", "--by"}},
      {"top", "rota top [--watch] [-o json]",
       "GPU utilisation, memory and power per node and GPU; --watch shows it again every 2 s.", {"--watch", "-w"}},
      {"token",
       "rota token create --user NAME [--role admin|user|agent] [--node NODE] [--ttl 30d] [--existing]\n"
       "       rota token list | revoke TOKEN_ID",
       "Creates, lists and revokes API tokens (admin).", {"--user", "--role", "--node", "--ttl", "--existing"}},
      {"status", "rota status [-o json]", "The control plane: the leader, its epoch, the standbys and their lag.", {}},
  };
  return kCommands;
}

const CommandHelp* FindCommand(const std::string& name) {
  for (const CommandHelp& c : Commands()) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

void PrintHelp(const CommandHelp& c) {
  std::cout << "usage: " << c.usage << "\n\n" << c.summary << "\n\n"
            << "Client flags: --server URL (or several, URL1,URL2: the leader is followed), --token T\n"
            << "(or ROTA_SERVER, ROTA_TOKEN, the config file), -o table|json. Exit codes: 0 ok, 1 server\n"
            << "unreachable or failing, 2 bad input, 3 not found, 4 not authenticated or not allowed, 5 conflict.\n";
}

// An argument that looks like a flag this command does not take: an error
// naming the closest one. (Numbers, even negative, are values.)
int CheckFlags(const CommandHelp& c, const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a.size() < 2 || a[0] != '-' || std::isdigit(static_cast<unsigned char>(a[1]))) continue;
    if (std::find(c.flags.begin(), c.flags.end(), a) != c.flags.end()) continue;
    std::vector<std::string> known = c.flags;
    known.insert(known.end(), {"--server", "--token", "--output", "--help"});
    std::cerr << "rota " << c.name << ": unknown flag '" << a << "'" << DidYouMean(a, known) << "\n"
              << "usage: " << c.usage << "\n";
    return kExitBadInput;
  }
  return kExitOk;
}

// rota logs -f: each replica's log from where it was seen, every second,
// until the job has ended (then once more). A replica's new output goes
// under a `==> name <==` header when another's was printed last.
int FollowLogs(const Client& c, const std::string& id, const std::string& task, const std::string& tail) {
  std::map<std::string, uint64_t> seen;  // replica -> bytes of its log printed
  std::string last;
  while (true) {
    Response state = c.Get("/v1/jobs/" + id);
    if (state.status != 200) return Client::Fail(state, "logs");
    const json job = json::parse(state.body, nullptr, false);
    if (!job.is_object()) return Client::Fail(state, "logs");
    const std::string st = S(job, "state");
    const bool ended = st == "succeeded" || st == "failed" || st == "cancelled";
    std::vector<std::string> replicas;
    for (const auto& p : job["placement"]) {
      const std::string name = S(p, "task") + "-" + S(p, "replica");
      if (!task.empty() && task != name && task != S(p, "task")) continue;
      if (std::find(replicas.begin(), replicas.end(), name) == replicas.end()) replicas.push_back(name);
    }
    for (const std::string& name : replicas) {
      auto it = seen.find(name);
      std::string q = "?task=" + UrlEncode(name);
      if (it != seen.end()) q += "&offset=" + std::to_string(it->second);
      else if (!tail.empty()) q += "&tail=" + UrlEncode(tail);
      Response r = c.Get("/v1/jobs/" + id + "/logs" + q);
      if (r.status != 200) return Client::Fail(r, "logs");
      const uint64_t size = std::strtoull(r.headers["Rota-Log-Size"].c_str(), nullptr, 10);
      const bool restarted = it != seen.end() && size < it->second;
      if (!r.body.empty() || restarted) {
        if (replicas.size() > 1 && (last != name || restarted)) {
          std::cout << "==> " << name << (restarted ? " (started over: a new attempt)" : "") << " <==\n";
        }
        std::cout << r.body << std::flush;
        last = name;
      }
      seen[name] = size;
    }
    if (ended) return kExitOk;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

}  // namespace

int VersionMain(std::vector<std::string> args) {
  std::cout << "rota " << kVersion << "\n";
  Client c = Client::FromArgs(&args);
  const std::string server = c.ServerVersion();
  if (server.empty()) std::cout << "server: none answers at " << c.server() << "\n";
  else std::cout << "server: rota " << server << " at " << c.server() << "\n";
  return kExitOk;
}

std::vector<std::pair<std::string, std::string>> ClientCommandHelp() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CommandHelp& c : Commands()) out.push_back({c.name, "usage: " + c.usage + "\n\n" + c.summary + "\n"});
  return out;
}

std::vector<std::pair<std::string, std::vector<std::string>>> ClientCommandFlags() {
  std::vector<std::pair<std::string, std::vector<std::string>>> out;
  for (const CommandHelp& c : Commands()) out.push_back({c.name, c.flags});
  return out;
}

std::vector<std::string> ClientCommandNames() {
  std::vector<std::string> names;
  for (const CommandHelp& c : Commands()) names.push_back(c.name);
  return names;
}

bool PrintClientHelp(const std::string& cmd) {
  const CommandHelp* c = FindCommand(cmd);
  if (c != nullptr) PrintHelp(*c);
  return c != nullptr;
}

// `rota node history`: a line per GPU (mean activity, peak memory, energy,
// mean power) with the activity drawn over the period.
int NodeHistory(Client& c, const std::string& name, const std::string& since, const std::string& step) {
  std::string query;
  if (!since.empty()) query += "?since=" + UrlEncode(since);
  if (!step.empty()) query += (query.empty() ? "?" : "&") + std::string("step=") + UrlEncode(step);
  Response r = c.Get("/v1/nodes/" + UrlEncode(name) + "/history" + query);
  return Run(c, r, "node history", [](const json& j) {
    const int64_t from = j.value("since", int64_t{0}), until = j.value("until", int64_t{0});
    const int64_t step_s = j.value("step_s", int64_t{60});
    constexpr int kColumns = 48;
    const char* kBars[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
    Table t({"GPU", "MEASURED", "ACTIVITY", "MEMORY PEAK", "ENERGY", "POWER", "ACTIVITY OVER TIME"});
    for (const auto& g : j["gpus"]) {
      int64_t samples = 0, weighted = 0, known = 0, energy = 0, peak = 0, steps = 0;
      std::array<int64_t, kColumns> col_sum{}, col_n{};
      for (const auto& p : g["points"]) {
        const int64_t at = p[0], n = p[1], act = p[2], mem = p[3], joules = p[4];
        samples += n;
        ++steps;
        energy += joules;
        peak = std::max(peak, mem);
        if (act >= 0) {
          weighted += act * n;
          known += n;
          const int64_t span = std::max<int64_t>(until - from, 1);
          const auto col = static_cast<size_t>(std::clamp<int64_t>((at - from) * kColumns / span, 0, kColumns - 1));
          col_sum[col] += act * n;
          col_n[col] += n;
        }
      }
      std::string bars;
      for (int k = 0; k < kColumns; ++k) {
        bars += col_n[k] == 0 ? " " : kBars[std::clamp<int64_t>(col_sum[k] / col_n[k] * 8 / 101, 0, 7)];
      }
      char activity[16], energy_text[32], power[16];
      std::snprintf(activity, sizeof activity, known > 0 ? "%lld%%" : "-", static_cast<long long>(weighted / std::max<int64_t>(known, 1)));
      std::snprintf(energy_text, sizeof energy_text, "%.2f kWh", static_cast<double>(energy) / 3.6e6);
      std::snprintf(power, sizeof power, "%lld W",
                    static_cast<long long>(samples > 0 ? energy / std::max<int64_t>(samples, 1) : 0));
      t.Add({S(g, "index"), FormatDuration(steps * step_s * kMicrosPerSecond), activity, FormatMemoryMiB(peak), energy_text, power, bars});
    }
    std::cout << t.Render();
  });
}

static int ClientCommand(const std::string& cmd, std::vector<std::string> args);

int ClientMain(const std::string& cmd, std::vector<std::string> args) {
  // A client command that meets an answer of another shape than rota's (a
  // --server that is not a rota server, a proxy's page) says so and exits
  // with kExitError; it does not abort.
  try {
    return ClientCommand(cmd, std::move(args));
  } catch (const json::exception& e) {
    std::cerr << "rota " << cmd << ": the server's answer is not what this client expects (is --server a rota server?): "
              << e.what() << "\n";
    return kExitError;
  }
}

static int ClientCommand(const std::string& cmd, std::vector<std::string> args) {
  const CommandHelp* help = FindCommand(cmd);
  if (help == nullptr) return -1;
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    PrintHelp(*help);
    return kExitOk;
  }
  Client c = Client::FromArgs(&args);
  if (!c.output_valid() && !(cmd == "report" && c.output() == "csv")) {
    std::cerr << "rota " << cmd << ": -o: must be table, wide or json" << (cmd == "report" ? " (or csv)" : "")
              << ", got '" << c.output() << "'\n";
    return kExitBadInput;
  }
  if (int rc = CheckFlags(*help, args); rc != kExitOk) return rc;

  if (cmd == "submit") {
    // --count N: N copies of the job (a job array, like sbatch --array),
    // accepted together by the server. `-` reads the job from stdin; --wrap
    // CMD makes one (like sbatch --wrap); --name, --queue, --priority and
    // --gpus replace what the file says.
    int64_t count = 1;
    ArrayRange array;
    std::string count_text = "1";
    std::vector<std::string> files;
    std::string overrides, wrap;
    bool wrapped = false, dry_run = false;
    int32_t wrap_gpus = 0;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if (a == "--count" && i + 1 < args.size()) {
        StatusOr<ArrayRange> parsed = ParseArrayRange(args[++i]);
        if (!parsed.ok()) {
          std::cerr << "rota submit: --" << parsed.status().message() << "\n";
          return kExitBadInput;
        }
        if (parsed->count < 1 || parsed->count > 100'000) {
          std::cerr << "rota submit: --count: " << parsed->count << " elements; an array has 1 to 100000\n";
          return kExitBadInput;
        }
        array = *parsed;
        count = array.count;
        count_text = args[i];
      } else if ((a == "--name" || a == "--queue" || a == "--priority" || a == "--gpus") && i + 1 < args.size()) {
        overrides += "&" + a.substr(2) + "=" + UrlEncode(args[i + 1]);
        if (a == "--gpus") wrap_gpus = std::atoi(args[i + 1].c_str());
        ++i;
      } else if (a == "--wrap" && i + 1 < args.size()) {
        wrap = args[++i];
        wrapped = true;
      } else if (a == "--dry-run") {
        dry_run = true;
      } else if (a.size() > 1 && a[0] == '-') {
        return Usage(help->usage);
      } else {
        files.push_back(a);
      }
    }
    if (files.size() != (wrapped ? 0u : 1u)) return Usage(help->usage);
    std::string body;
    std::string source = wrapped ? "--wrap" : files[0];
    if (wrapped) {
      // One replica of `sh -c CMD`: its GPUs from --gpus, else one CPU.
      json task{{"name", "main"}, {"command", {"sh", "-c", wrap}}};
      if (wrap_gpus > 0) task["gpus"] = wrap_gpus;
      else task["cpu"] = 1;
      body = json{{"name", "wrap"}, {"tasks", {task}}}.dump();
    } else if (files[0] == "-") {
      std::stringstream ss;
      ss << std::cin.rdbuf();
      body = ss.str();
      source = "stdin";
    } else {
      std::ifstream in(files[0]);
      if (!in) {
        std::cerr << "rota submit: " << files[0] << ": cannot open file\n";
        return kExitBadInput;
      }
      std::stringstream ss;
      ss << in.rdbuf();
      body = ss.str();
    }
    if (dry_run) {
      // Like sbatch --test-only: whether it would be accepted, and where and
      // when it would start; nothing is submitted.
      Response r = c.Post("/v1/jobs?dry_run=true&count=" + UrlEncode(count_text) + overrides, body, "application/yaml");
      NameTheFile(&r, source);
      return Run(c, r, "submit", [](const json& j) {
        std::string where;
        for (const auto& p : j["placement"]) {
          where += (where.empty() ? "" : ", ") + S(p, "node") + "[" + GpuList(p["gpus"]) + "]";
        }
        std::string when = j.value("complete", true) ? "not within the horizon (30d)"
                                                     : "beyond what the server projects within its time budget";
        if (!j["starts_in_s"].is_null()) {
          const int64_t in = j["starts_in_s"].get<int64_t>();
          when = (j.value("estimate", false) ? "in about " : "in ") + FormatSpan(in * kMicrosPerSecond);
          if (in <= 0) when = "now";
        }
        std::cout << "dry run: " << S(j, "name") << " would be accepted into queue " << S(j, "queue") << " and start " << when
                  << (where.empty() ? "" : " on " + where) << " (nothing was submitted)\n";
        if (j.value("estimate", false)) {
          std::cout << "  (an estimate: a job ahead has no time limit; run times from the learned history of finished "
                       "jobs, else their median, "
                    << FormatSpan(j["default_run_s"].get<int64_t>() * kMicrosPerSecond) << ")\n";
        }
      });
    }
    if (!array.is_array()) {
      // One key per submission: a retry after a lost answer or a failover
      // returns the job it made instead of a second one.
      Response r = c.Post("/v1/jobs" + (overrides.empty() ? "" : "?" + overrides.substr(1)), body, "application/yaml",
                          NewIdempotencyKey());
      NameTheFile(&r, source);
      return Run(c, r, "submit", [](const json& j) {
        std::cout << "submitted job " << j["id"] << " (" << S(j, "name") << ") to queue " << S(j, "queue") << "\n";
        if (j.contains("note")) std::cout << "note: " << S(j, "note") << "\n";
      });
    }
    // A job array: one request, committed whole (all N or none).
    Response r = c.Post("/v1/jobs?count=" + UrlEncode(count_text) + overrides, body, "application/yaml", NewIdempotencyKey());
    NameTheFile(&r, source);
    if (r.status != 201 && r.status != 200) return Client::Fail(r, "submit");
    const json j = json::parse(r.body, nullptr, false);
    if (!j.is_object() || !j.contains("ids")) return Client::Fail(r, "submit");
    const uint64_t first = j["ids"].value("first", uint64_t{0}), last = j["ids"].value("last", uint64_t{0});
    if (c.json_output()) {
      std::cout << json{{"ids", {{"first", first}, {"last", last}}}, {"count", count}}.dump(2) << "\n";
    } else {
      std::cout << "submitted " << count << (count == 1 ? " job" : " jobs") << " (array " << first << ": ids " << first
                << ".." << last;
      if (array.range) std::cout << ", indices " << array.first_index << ".." << array.first_index + count - 1;
      if (array.max_running > 0) std::cout << ", at most " << array.max_running << " at once";
      std::cout << ")\n";
    }
    return kExitOk;
  }

  if (cmd == "jobs") {
    // One page at a time (--limit, default 500; --after ID for the next):
    // a busy cluster's million jobs are never fetched at once.
    std::string query;
    std::string limit = "500";
    bool watch = false, start = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--all" || args[i] == "-a") query += "&all=true";
      else if (args[i] == "--state" && i + 1 < args.size()) query += "&state=" + args[++i];
      else if (args[i] == "--queue" && i + 1 < args.size()) query += "&queue=" + args[++i];
      else if (args[i] == "--user" && i + 1 < args.size()) query += "&user=" + args[++i];
      else if (args[i] == "--array" && i + 1 < args.size()) query += "&array=" + args[++i];
      else if (args[i] == "--after" && i + 1 < args.size()) query += "&after=" + args[++i];
      else if (args[i] == "--limit" && i + 1 < args.size()) limit = args[++i];
      else if (args[i] == "--watch" || args[i] == "-w") watch = true;
      else if (args[i] == "--start") start = true;
      else return Usage(help->usage);
    }
    const bool wide = c.output() == "wide";
    // --watch: the same listing again every 2 s, the screen cleared first on
    // a terminal (like watch(1) and kubectl get -w), until interrupted.
    for (bool first = true;; first = false) {
    if (!first) std::this_thread::sleep_for(std::chrono::seconds(2));
    Response r;
    if (limit == "0") {
      // Every page (scripts that want all of them), merged into one answer.
      json all = json::array();
      std::string after;
      while (true) {
        r = c.Get("/v1/jobs?" + query.substr(query.empty() ? 0 : 1) + (query.empty() ? "" : "&") + "limit=10000" +
                  (after.empty() ? "" : "&after=" + after));
        if (r.status != 200) break;
        json page = json::parse(r.body, nullptr, false);
        if (page.is_discarded()) break;
        for (auto& job : page["jobs"]) all.push_back(std::move(job));
        if (!page.contains("next_after")) {
          r.body = json{{"jobs", std::move(all)}}.dump();
          break;
        }
        after = S(page, "next_after");
      }
    } else {
      r = c.Get("/v1/jobs?" + query.substr(query.empty() ? 0 : 1) + (query.empty() ? "" : "&") + "limit=" + limit);
    }
    if (start && r.status == 200) {
      // --start: each pending job's expected start from the server's
      // projection of its live queue (rota whatif), in the listing.
      Response w = c.Get("/v1/whatif");
      if (w.status == 429) {
        std::cerr << "rota jobs: --start: the server is busy with another projection; listed without START\n";
        start = false;
      } else if (w.status != 200) {
        return Client::Fail(w, "jobs --start");
      }
      if (start) {
      const json projection = json::parse(w.body, nullptr, false);
      json listing = json::parse(r.body, nullptr, false);
      if (projection.is_object() && listing.is_object()) {
        std::map<int64_t, const json*> by_id;
        for (const auto& p : projection["baseline"]["jobs"]) by_id[p["id"].get<int64_t>()] = &p;
        for (auto& job : listing["jobs"]) {
          auto it = by_id.find(job["id"].get<int64_t>());
          if (it == by_id.end()) continue;
          job["expected_start"] = (*it->second)["expected_start"];
          job["starts_in_s"] = (*it->second)["starts_in_s"];
          job["start_estimate"] = (*it->second)["estimate"];
          if (it->second->contains("held")) job["held"] = true;
        }
        r.body = listing.dump();
      }
      }
    }
    if (watch && isatty(STDOUT_FILENO)) std::cout << "\033[H\033[2J";
    const int rc = Run(c, r, "jobs", [wide, start](const json& j) {
      std::vector<std::string> header{"ID", "NAME", "USER", "QUEUE", "STATE", "GPUS", "WAITED", "TIME", "LIMIT", "NODES", "REASON"};
      if (start) header.insert(header.begin() + 9, "START");
      if (wide) header.insert(header.begin() + 5, {"PRIORITY", "SUBMITTED"});
      Table t(header);
      for (const auto& job : j["jobs"]) {
        std::string nodes, reason;
        for (const auto& p : job["placement"]) {
          const std::string n = p["node"];
          // -o wide: each replica's node and GPUs ("n-0[0,1]").
          if (wide) nodes += (nodes.empty() ? "" : ",") + n + "[" + GpuList(p["gpus"]) + "]";
          else if (nodes.find(n) == std::string::npos) nodes += (nodes.empty() ? "" : ",") + n;
        }
        if (job.contains("pending_reason")) reason = S(job["pending_reason"], "code") + ": " + S(job["pending_reason"], "message");
        else if (job.contains("end_reason")) reason = S(job, "end_reason");
        std::string gpus = S(job, "gpus");
        if (job.contains("gpu_shares")) gpus = gpus == "0" ? S(job, "gpu_shares") : gpus + " + " + S(job, "gpu_shares");
        std::vector<std::string> row{S(job, "id"), S(job, "name"), S(job, "user"), S(job, "queue"), S(job, "state"), gpus,
                                     Span(job, "waited_s"), Span(job, "elapsed_s"),
                                     job.contains("time_limit") ? S(job, "time_limit") : "-", nodes.empty() ? "-" : nodes,
                                     reason};
        if (start) {
          std::string when = "-";
          if (job.value("held", false)) {
            when = "held";
          } else if (job.contains("starts_in_s")) {
            if (job["starts_in_s"].is_null()) {
              when = "beyond horizon";
            } else {
              const int64_t in = job["starts_in_s"].get<int64_t>();
              when = (job.value("start_estimate", false) ? "~" : "") +
                     (in <= 0 ? std::string("now") : "in " + FormatSpan(in * kMicrosPerSecond));
            }
          }
          row.insert(row.begin() + 9, when);
        }
        if (wide) row.insert(row.begin() + 5, {S(job, "priority"), S(job, "submitted_at")});
        t.Add(row);
      }
      std::cout << t.Render();
      if (j.contains("next_after")) {
        std::cout << "(more: rota jobs --after " << S(j, "next_after") << " for the next page)\n";
      }
    });
    std::cout << std::flush;
    if (!watch || rc != kExitOk) return rc;
    }
  }

  if (cmd == "describe") {
    if (args.size() != 1) return Usage("rota describe JOB_ID [-o json]");
    Response r = c.Get("/v1/jobs/" + args[0]);
    return Run(c, r, "describe", [](const json& j) {
      Table kv({"Field", "Value"});
      for (const char* k : {"id", "name", "user", "queue", "priority", "state", "replicas", "gpus", "submitted_at",
                            "started_at", "finished_at", "end_reason"}) {
        if (!S(j, k).empty()) kv.Add({std::string(k) + ":", S(j, k)});
      }
      if (j.contains("waited_s")) kv.Add({"waited:", Span(j, "waited_s")});
      if (j.contains("elapsed_s")) kv.Add({"elapsed:", Span(j, "elapsed_s")});
      if (j.contains("time_limit")) {
        std::string limit = S(j, "time_limit");
        if (j.contains("elapsed_s") && S(j, "state") == "running") {
          auto d = ParseDuration(limit);
          if (d.ok()) limit += " (" + FormatSpan(*d - j["elapsed_s"].get<int64_t>() * kMicrosPerSecond) + " left)";
        }
        kv.Add({"time limit:", limit});
      }
      if (j.contains("array")) {
        const json& a = j["array"];
        const int64_t from = a.value("first_index", int64_t{0});
        kv.Add({"array:", S(a, "id") + " (element " + S(a, "index") + " of " + std::to_string(from) + ".." +
                              std::to_string(from + a.value("count", int64_t{1}) - 1) +
                              (a.contains("max_running") ? ", at most " + S(a, "max_running") + " at once" : "") + ")"});
      }
      if (j.contains("flags")) {
        for (const auto& f : j["flags"]) kv.Add({"flag:", f.get<std::string>()});
      }
      if (j.contains("service")) {
        const json& sv = j["service"];
        kv.Add({"service:", "desired " + S(sv, "desired") + " replica(s), port " + S(sv, "port") + "+replica" +
                                (sv.value("autoscale", false) ? ", autoscaled" : "")});
        if (sv.contains("last_scale")) {
          kv.Add({"scaled:", S(sv["last_scale"], "at") + ": " + S(sv["last_scale"], "reason")});
        }
      }
      if (j.contains("elastic")) {
        const json& e = j["elastic"];
        kv.Add({j.contains("service") ? "replicas:" : "elastic:", S(e, "running") + " running of " + S(e, "min_replicas") + ".." + S(e, "replicas") +
                                " replicas (" + S(e, "resizes") + " resizes)"});
      }
      if (j.contains("stopping")) {
        const json& st = j["stopping"];
        kv.Add({"stopping:", "since " + S(st, "since") + ", " + S(st, "reason") +
                                 (S(st, "then") == "restart" ? "; restarts once every replica has stopped"
                                                              : "; requeued once every replica has stopped")});
      }
      if (j.value("restarts", 0) > 0) kv.Add({"restarts:", S(j, "restarts") + " (last: " + S(j, "last_requeue_reason") + ")"});
      if (j.contains("usage")) {
        const json& u = j["usage"];
        // (-1: not measured, as a CPU job's or a GPU fraction's.)
        auto pct = [&](const char* k) { return u.value(k, -1.0) < 0 ? std::string("-") : S(u, k) + "%"; };
        kv.Add({"usage:", S(u, "gpu_hours") + " GPU-hours, activity p50/p90 " + pct("activity_p50") + "/" +
                              pct("activity_p90") + ", " + S(u, "energy_kwh") + " kWh"});
        if (u.contains("recommendation")) kv.Add({"right size:", S(u["recommendation"], "summary")});
      }
      if (j.contains("pending_reason")) {
        kv.Add({"pending:", S(j["pending_reason"], "code")});
        kv.Add({"reason:", S(j["pending_reason"], "message")});
      }
      std::string out = kv.Render();
      std::cout << out.substr(out.find('\n') + 1);
      if (!j["placement"].empty()) {
        Table p({"TASK", "REPLICA", "NODE", "GPUS", "SHARE", "ISOLATION"});
        for (const auto& rep : j["placement"]) {
          const bool shared = rep.contains("gpu_fraction") || rep.contains("mig");
          const std::string share = rep.contains("mig") ? "MIG " + S(rep, "mig") : S(rep, "gpu_fraction");
          p.Add({S(rep, "task"), S(rep, "replica"), S(rep, "node"), GpuList(rep["gpus"]), shared ? share : "whole",
                 shared ? S(rep, "isolation") : "exclusive"});
        }
        std::cout << "\nPlacement\n" << p.Render();
      }
      Table ev({"AT", "EVENT", "DETAIL"});
      for (const auto& e : j["events"]) ev.Add({S(e, "at"), S(e, "event"), S(e, "detail")});
      std::cout << "\nEvents\n" << ev.Render();
    });
  }

  if (cmd == "cancel") {
    // rota cancel ID [ID...] | --array ID: each in turn (like scancel); the
    // exit code is the first failure's.
    std::vector<std::string> ids;
    std::string name, user, state;
    bool selected = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--array" && i + 1 < args.size()) {
        std::string after = "0";
        while (true) {  // the array's live elements, a page at a time
          Response page = c.Get("/v1/jobs?array=" + args[i + 1] + "&limit=10000&after=" + after);
          if (page.status != 200) return Client::Fail(page, "cancel");
          const json j = json::parse(page.body, nullptr, false);
          if (j.is_discarded()) return Client::Fail(page, "cancel");
          for (const auto& job : j["jobs"]) ids.push_back(job["id"].dump());
          if (!j.contains("next_after")) break;
          after = j["next_after"].dump();
        }
        ++i;
      } else if ((args[i] == "--name" || args[i] == "--user" || args[i] == "--state") && i + 1 < args.size()) {
        (args[i] == "--name" ? name : args[i] == "--user" ? user : state) = args[i + 1];
        selected = true;
        ++i;
      } else if (args[i] == "--array" || args[i] == "--name" || args[i] == "--user" || args[i] == "--state" ||
                 (args[i].size() > 1 && args[i][0] == '-')) {
        return Usage(help->usage);
      } else {
        ids.push_back(args[i]);
      }
    }
    if (selected) {
      // --name, --user, --state (like scancel): the live jobs matching all
      // of them, a page at a time (the server lists only what the caller
      // may see).
      if (!state.empty() && state != "pending" && state != "running") {
        std::cerr << "rota cancel: --state: must be pending or running, got '" << state << "'\n";
        return kExitBadInput;
      }
      std::string after = "0";
      size_t matched = 0;
      while (true) {
        Response page = c.Get("/v1/jobs?limit=10000&after=" + after + (user.empty() ? "" : "&user=" + UrlEncode(user)) +
                              (state.empty() ? "" : "&state=" + state));
        if (page.status != 200) return Client::Fail(page, "cancel");
        const json j = json::parse(page.body, nullptr, false);
        if (j.is_discarded()) return Client::Fail(page, "cancel");
        for (const auto& job : j["jobs"]) {
          if (!name.empty() && S(job, "name") != name) continue;
          ids.push_back(job["id"].dump());
          ++matched;
        }
        if (!j.contains("next_after")) break;
        after = j["next_after"].dump();
      }
      if (matched == 0) {
        std::cerr << "rota cancel: no live job matches" << (name.empty() ? "" : " --name " + name)
                  << (user.empty() ? "" : " --user " + user) << (state.empty() ? "" : " --state " + state) << "\n";
        return kExitOk;
      }
    }
    if (ids.empty()) return Usage(help->usage);
    int rc = kExitOk;
    size_t not_ours = 0;
    json cancelled = json::array(), refused = json::array();  // (-o json, for many)
    auto done = [&](const json& id, const std::string& job_name) {
      if (c.json_output()) cancelled.push_back({{"id", id}, {"name", job_name}});
      else std::cout << "cancelled job " << id << " (" << job_name << ")\n";
    };
    // A job not cancelled: its own line, and the exit code if it is the first.
    auto failed = [&](const Response& r, const json& id) {
      if (selected && r.status == 403) {
        ++not_ours;  // a selection (job_visibility: all lists others' jobs) cancels only what we may
        return;
      }
      const int code = Client::Fail(r, "cancel " + (id.is_string() ? id.get<std::string>() : id.dump()));
      if (rc == kExitOk) rc = code;
      if (c.json_output()) {
        const std::string error = r.status == 0 ? r.error : ErrorText(r.body, r.body);
        refused.push_back({{"id", id}, {"status", r.status}, {"error", error}});
      }
    };
    // One job, through its own route (`POST /v1/jobs/ID/cancel`).
    auto cancel_one = [&](const std::string& id) {
      Response r = c.Post("/v1/jobs/" + UrlEncode(id) + "/cancel", "", "application/json");
      const json j = json::parse(r.body, nullptr, false);
      if (r.status < 200 || r.status >= 300 || j.is_discarded()) return failed(r, json(id));
      done(j["id"], S(j, "name"));
    };
    if (ids.size() == 1) {
      // One job: answered with its view (-o json: the job).
      Response r = c.Post("/v1/jobs/" + UrlEncode(ids[0]) + "/cancel", "", "application/json");
      if (r.status < 200 || r.status >= 300) {
        if (selected && r.status == 403) {
          std::cerr << "rota cancel: skipped 1 matching job(s) of other users\n";
          return kExitOk;
        }
        return Client::Fail(r, "cancel " + ids[0]);
      }
      const json j = json::parse(r.body, nullptr, false);
      if (c.json_output()) std::cout << j.dump(2) << "\n";
      else if (!j.is_discarded()) std::cout << "cancelled job " << j["id"] << " (" << S(j, "name") << ")\n";
      return kExitOk;
    }
    // Many: 10,000 to a request (`POST /v1/jobs/cancel`), each request one
    // journal write and each id answered alone. A request refused whole (a
    // full disk, the rate limit) refuses its ids, and the next goes on; a
    // server without the route (older than this client) gets them one by
    // one. An id that is not a number goes alone, so that the server names
    // what is wrong with it.
    std::vector<uint64_t> chunk;
    bool one_by_one = false;
    // The server unreachable: said once, with how many were not sent, not
    // once per id (an array is 100,000 of them).
    std::optional<Response> unreachable;
    size_t unsent = 0;
    auto send = [&] {
      if (chunk.empty()) return;
      if (unreachable) {
        unsent += chunk.size();
        chunk.clear();
        return;
      }
      Response r = one_by_one ? Response{} : c.Post("/v1/jobs/cancel", json{{"ids", chunk}}.dump(), "application/json");
      if (!one_by_one && r.status == 0) {
        unreachable = r;
        unsent += chunk.size();
        chunk.clear();
        return;
      }
      if (!one_by_one && (r.status == 404 || r.status == 405)) one_by_one = true;
      if (one_by_one) {
        for (uint64_t id : chunk) cancel_one(std::to_string(id));
        chunk.clear();
        return;
      }
      const json j = json::parse(r.body, nullptr, false);
      if (r.status != 200 || j.is_discarded() || !j.contains("cancelled")) {
        for (uint64_t id : chunk) failed(r, json(id));
        chunk.clear();
        return;
      }
      chunk.clear();
      for (const auto& job : j["cancelled"]) done(job["id"], S(job, "name"));
      for (const auto& job : j.value("failed", json::array())) {
        failed(Response{.status = job.value("status", 500),
                        .body = json{{"error", {{"message", S(job, "error")}}}}.dump()},
               job["id"]);
      }
    };
    for (const std::string& id : ids) {
      uint64_t value = 0;
      auto [end, ec] = std::from_chars(id.data(), id.data() + id.size(), value);
      if (ec != std::errc() || end != id.data() + id.size() || value == 0) {
        send();  // (in the order given)
        if (unreachable) {
          ++unsent;
        } else {
          cancel_one(id);
        }
        continue;
      }
      chunk.push_back(value);
      if (chunk.size() == 10'000) send();
    }
    send();
    if (unreachable) {
      const int code = Client::Fail(*unreachable, "cancel");
      if (rc == kExitOk) rc = code;
      std::cerr << "rota cancel: " << unsent << " job(s) not cancelled (not sent)\n";
      if (c.json_output()) refused.push_back({{"status", 0}, {"error", unreachable->error}, {"not_sent", unsent}});
    }
    if (c.json_output()) std::cout << json{{"cancelled", cancelled}, {"failed", refused}}.dump(2) << "\n";
    if (not_ours > 0) std::cerr << "rota cancel: skipped " << not_ours << " matching job(s) of other users\n";
    return rc;
  }

  if (cmd == "hold" || cmd == "release" || cmd == "requeue") {
    // Each in turn; the exit code is the first failure's.
    if (args.empty()) return Usage(help->usage);
    for (const std::string& a : args) {
      if (a.size() > 1 && a[0] == '-') return Usage(help->usage);
    }
    int rc = kExitOk;
    json results = json::array();
    const std::string done = cmd == "hold" ? "held" : cmd == "release" ? "released" : "requeued";
    for (const std::string& id : args) {
      Response r = c.Post("/v1/jobs/" + UrlEncode(id) + "/" + cmd, "", "application/json");
      if (r.status < 200 || r.status >= 300) {
        const int failed = Client::Fail(r, cmd + " " + id);
        if (rc == kExitOk) rc = failed;
        continue;
      }
      const json j = json::parse(r.body, nullptr, false);
      if (c.json_output()) results.push_back(j);
      else if (!j.is_discarded()) std::cout << done << " job " << j["id"] << " (" << S(j, "name") << ")\n";
    }
    if (c.json_output()) std::cout << (args.size() == 1 && results.size() == 1 ? results[0] : results).dump(2) << "\n";
    return rc;
  }

  if (cmd == "logs") {
    std::string id, query, task, tail;
    bool follow = false;
    for (size_t i = 0; i < args.size(); ++i) {
      if ((args[i] == "--task" || args[i] == "--tail") && i + 1 < args.size()) {
        query += (query.empty() ? "?" : "&") + args[i].substr(2) + "=" + UrlEncode(args[i + 1]);
        (args[i] == "--task" ? task : tail) = args[i + 1];
        ++i;
      } else if (args[i] == "-f" || args[i] == "--follow") {
        follow = true;
      } else if (id.empty() && args[i][0] != '-') {
        id = args[i];
      } else {
        return Usage(help->usage);
      }
    }
    if (id.empty()) return Usage(help->usage);
    if (!follow) {
      Response r = c.Get("/v1/jobs/" + id + "/logs" + query);
      if (r.status != 200) return Client::Fail(r, "logs");
      std::cout << r.body;
      return kExitOk;
    }
    return FollowLogs(c, id, task, tail);
  }

  if (cmd == "node") {
    std::vector<std::string> words;
    std::string reason, since, step;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == "--reason" && i + 1 < args.size()) reason = args[++i];
      else if (args[i] == "--since" && i + 1 < args.size()) since = args[++i];
      else if (args[i] == "--step" && i + 1 < args.size()) step = args[++i];
      else words.push_back(args[i]);
    }
    if (words.size() != 2 ||
        (words[0] != "drain" && words[0] != "undrain" && words[0] != "describe" && words[0] != "history")) {
      return Usage(help->usage);
    }
    const std::string& name = words[1];
    if (words[0] == "history") return NodeHistory(c, name, since, step);
    if (words[0] == "describe") {
      Response r = c.Get("/v1/nodes");
      if (r.status != 200) return Client::Fail(r, "node describe");
      const json all = json::parse(r.body, nullptr, false);
      if (!all.is_object()) return Client::Fail(r, "node describe");
      for (const auto& n : all["nodes"]) {
        if (S(n, "name") != name) continue;
        if (c.json_output()) {
          std::cout << n.dump(2) << "\n";
          return kExitOk;
        }
        Table kv({"Field", "Value"});
        for (const char* k : {"name", "state", "drain_reason", "gpu_model", "gpus", "gpus_allocated", "gpus_unhealthy",
                              "cpu", "cpu_allocated", "memory", "memory_allocated", "nvlink_islands", "last_heartbeat"}) {
          if (!S(n, k).empty()) kv.Add({std::string(k) + ":", S(n, k)});
        }
        for (const auto& [k, v] : n["labels"].items()) kv.Add({"label:", k + "=" + v.get<std::string>()});
        std::string out = kv.Render();
        std::cout << out.substr(out.find('\n') + 1);
        Table g({"GPU", "ALLOCATED", "HEALTHY", "DETAIL"});
        for (const auto& gpu : n["gpu_list"]) {
          std::string detail;
          if (gpu.contains("job")) detail = "job " + S(gpu, "job");
          if (gpu.contains("shared_milli")) detail += (detail.empty() ? "" : ", ") + S(gpu, "shared_milli") + " milli shared";
          if (gpu.contains("mig")) detail += (detail.empty() ? "" : ", ") + std::string("MIG");
          g.Add({S(gpu, "index"), gpu.value("allocated", false) ? "yes" : "no", gpu.value("healthy", true) ? "yes" : "no",
                 detail.empty() ? "-" : detail});
        }
        std::cout << "\nGPUs\n" << g.Render();
        return kExitOk;
      }
      std::cerr << "rota node describe: no node named '" << name << "'\n";
      return kExitNotFound;
    }
    const bool drain = words[0] == "drain";
    const json body = reason.empty() ? json::object() : json{{"reason", reason}};
    Response r = c.Post("/v1/nodes/" + UrlEncode(name) + (drain ? "/drain" : "/undrain"), body.dump(), "application/json");
    return Run(c, r, "node " + words[0], [&](const json& j) {
      std::cout << (drain ? "drained " : "undrained ") << S(j, "name")
                << (drain && j.contains("drain_reason") ? " (" + S(j, "drain_reason") + ")" : "") << "\n";
    });
  }

  if (cmd == "nodes") {
    if (!args.empty()) return Usage("rota nodes [-o json]");
    Response r = c.Get("/v1/nodes");
    // Node states are the leader's to know (it hears the agents; a standby
    // hears none, and would show every node declared): asked there.
    if (r.status == 200 && r.headers["Rota-Role"] == "standby") {
      const std::string leader = r.headers["Rota-Leader"];
      Response from_leader = leader.empty() ? Response{} : c.GetFrom(leader, "/v1/nodes");
      if (from_leader.status == 200) {
        r = std::move(from_leader);
      } else {
        std::cerr << "rota nodes: answered by a standby, which hears no agent: its nodes read declared; the leader ("
                  << (leader.empty() ? std::string("none known yet") : leader + ": " + from_leader.error) << ") knows their states\n";
      }
    }
    return Run(c, r, "nodes", [](const json& j) {
      Table t({"NAME", "STATE", "MODEL", "GPUS", "ALLOCATED", "CPU", "MEMORY", "RACK", "SIMULATED", "REASON"});
      for (const auto& n : j["nodes"]) {
        t.Add({S(n, "name"), S(n, "state"), S(n, "gpu_model"), S(n, "gpus"), S(n, "gpus_allocated"), S(n, "cpu"),
               S(n, "memory"), n["labels"].value("rack", "-"), n["simulated"].get<bool>() ? "yes" : "no",
               n.contains("drain_reason") ? S(n, "drain_reason") : "-"});
      }
      std::cout << t.Render();
    });
  }

  if (cmd == "services") {
    if (!args.empty()) return Usage("rota services [-o json]");
    Response r = c.Get("/v1/services");
    return Run(c, r, "services", [](const json& j) {
      Table t({"NAME", "JOB", "STATE", "DESIRED", "PLACED", "READY", "MIN-MAX", "IN FLIGHT", "QUEUED", "P99", "LAST SCALING"});
      for (const auto& v : j["services"]) {
        const json& replicas = v["replicas"];
        const json sig = v.value("signals", json::object());
        char p99[32] = "-";
        if (sig.contains("p99_ms") && sig.value("requests", 0) > 0) std::snprintf(p99, sizeof p99, "%.1fms", sig.value("p99_ms", 0.0));
        std::string last = v.contains("rollout")      ? S(v, "rollout")
                           : v.contains("last_scale")  ? "to " + S(v["last_scale"], "to") + ": " + S(v["last_scale"], "reason")
                           : v.contains("reason") ? S(v, "reason")
                                                  : "-";
        t.Add({S(v, "name"), S(v, "job"), S(v, "state") + (v.value("panic", false) ? " (panic)" : ""), S(replicas, "desired"),
               S(replicas, "placed"), S(replicas, "ready"), S(replicas, "min") + "-" + S(replicas, "max"),
               sig.contains("inflight") ? S(sig, "inflight") : "-", sig.contains("queued") ? S(sig, "queued") : "-", p99,
               last});
      }
      std::cout << t.Render();
      if (S(j, "router").empty()) std::cout << "(no router: start the server with --router HOST:PORT for endpoints)\n";
    });
  }

  if (cmd == "apply") {
    if (args.size() != 1 || (args[0].size() > 1 && args[0][0] == '-')) return Usage(help->usage);
    std::ifstream in(args[0]);
    if (!in) {
      std::cerr << "rota apply: " << args[0] << ": cannot open file\n";
      return kExitBadInput;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string body = ss.str();
    auto spec = api::ParseJobSpec(body, args[0]);
    if (!spec.ok()) {
      std::cerr << "rota apply: " << spec.status().message() << "\n";
      return kExitBadInput;
    }
    if (!spec->is_service()) {
      std::cerr << "rota apply: " << args[0] << ": kind: rota apply is for services (kind: service); rota submit runs jobs\n";
      return kExitBadInput;
    }
    Response r = c.Post("/v1/services/" + spec->name + "/apply", body, "application/yaml");
    if (r.status == 404 && r.body.find("no service") != std::string::npos) {
      r = c.Post("/v1/jobs", body, "application/yaml");  // none yet: start it
      NameTheFile(&r, args[0]);
      return Run(c, r, "apply", [](const json& j) {
        std::cout << "started service " << S(j, "name") << " (job " << S(j, "id") << ")\n";
      });
    }
    NameTheFile(&r, args[0]);
    return Run(c, r, "apply", [](const json& j) {
      std::cout << "updated service " << S(j, "name") << " (job " << S(j, "id")
                << "): its replicas roll onto the new spec (rota services shows where it is)\n";
    });
  }

  if (cmd == "endpoints") {
    if (args.size() != 1) return Usage("rota endpoints NAME [-o json]");
    Response r = c.Get("/v1/services/" + args[0] + "/endpoints");
    return Run(c, r, "endpoints", [](const json& j) {
      std::cout << "service " << S(j, "service") << " (job " << S(j, "job") << ")  "
                << (S(j, "url").empty() ? "no router" : S(j, "url")) << "\n";
      Table t({"REPLICA", "ADDRESS", "READY", "OUTSTANDING", "ATTEMPT"});
      for (const auto& e : j["endpoints"]) {
        t.Add({S(e, "replica"), S(e, "address"), e.value("ready", false) ? "yes" : "no", S(e, "outstanding"),
               S(e, "attempt")});
      }
      std::cout << t.Render();
    });
  }

  if (cmd == "status") {
    if (!args.empty()) return Usage("rota status [-o json]");
    Response r = c.Get("/v1/replicas");
    return Run(c, r, "status", [&](const json& j) {
      const std::string leader = S(j, "leader");
      if (S(j, "store") != "postgres") {
        std::cout << "server  " << c.server() << " (one server, SQLite store: no standbys)\n";
        return;
      }
      std::cout << "leader  " << leader << " (epoch " << S(j, "epoch") << ", journal at event " << S(j, "journal_seq")
                << ")\n\n";
      Table t({"REPLICA", "ROLE", "AT EVENT", "LAG", "SEEN"});
      for (const auto& rep : j["replicas"]) {
        t.Add({S(rep, "url"), S(rep, "role"), S(rep, "seq"), S(rep, "lag_events"),
               std::to_string(rep.value("seen_ms_ago", int64_t{0}) / 1000) + "s ago"});
      }
      std::cout << t.Render();
    });
  }

  if (cmd == "whatif") {
    std::vector<std::string> adds, drains;
    std::string horizon, policy_file, policy_flag;
    for (size_t i = 0; i < args.size(); ++i) {
      const std::string& a = args[i];
      if ((a == "--add-nodes" || a == "--drain" || a == "--horizon") && i + 1 < args.size()) {
        const std::string& v = args[++i];
        if (a == "--add-nodes") adds.push_back(v);
        else if (a == "--drain") drains.push_back(v);
        else horizon = v;
        continue;
      }
      if ((a == "--config" || a == "--profile") && i + 1 < args.size() && policy_file.empty()) {
        policy_flag = a;
        policy_file = args[++i];
        continue;
      }
      return Usage(help->usage);
    }
    std::string policy;
    if (!policy_file.empty()) {
      StatusOr<std::string> text = api::ReadFile(policy_file);
      if (!text.ok()) {
        std::cerr << "rota whatif: " << policy_flag << ": " << text.status().message() << "\n";
        return kExitBadInput;
      }
      policy = std::move(*text);
    }
    auto join = [](const std::vector<std::string>& v) {
      std::string out;
      for (const std::string& x : v) out += (out.empty() ? "" : ",") + x;
      return out;
    };
    std::string query;
    if (!adds.empty()) query += "&add_nodes=" + UrlEncode(join(adds));
    if (!drains.empty()) query += "&drain=" + UrlEncode(join(drains));
    if (!horizon.empty()) query += "&horizon=" + UrlEncode(horizon);
    if (policy_flag == "--profile") query += "&only=profile";
    if (!query.empty()) query[0] = '?';
    Response r = policy_file.empty() ? c.Get("/v1/whatif" + query)
                                     : c.Post("/v1/whatif" + query, policy, "application/yaml");
    NameTheFile(&r, policy_file);
    return Run(c, r, "whatif", [&](const json& j) {
      const bool changes = j.contains("with_changes");
      auto start = [](const json& job) -> std::string {
        if (job.value("held", false)) return "held";
        if (job.contains("why")) return "never";
        if (job["starts_in_s"].is_null()) return "beyond horizon";
        const int64_t in = job["starts_in_s"].get<int64_t>();
        return (job.value("estimate", false) ? "~" : "") + (in <= 0 ? std::string("now") : "in " + FormatSpan(in * kMicrosPerSecond));
      };
      std::map<int64_t, const json*> variant;
      if (changes) {
        for (const auto& job : j["with_changes"]["jobs"]) variant[job["id"].get<int64_t>()] = &job;
      }
      std::vector<std::string> head = {"ID", "NAME", "USER", "QUEUE", "EXPECTED START"};
      if (changes) head.push_back("WITH CHANGES");
      Table t(head);
      for (const auto& job : j["baseline"]["jobs"]) {
        std::vector<std::string> row = {S(job, "id"), S(job, "name"), S(job, "user"), S(job, "queue"), start(job)};
        if (changes) {
          auto it = variant.find(job["id"].get<int64_t>());
          row.push_back(it == variant.end() ? "-" : start(*it->second));
        }
        t.Add(row);
      }
      std::cout << t.Render();
      std::cout << "\n~: after a job with no time limit ends (run for what the learned history of finished jobs "
                   "expects, else their median, "
                << FormatSpan(j["baseline"]["default_run_s"].get<int64_t>() * kMicrosPerSecond) << ")\n";
      if (!j["baseline"].value("complete", true) || (changes && !j["with_changes"].value("complete", true))) {
        std::cout << "(the queue is too long to project within the server's time budget: "
                     "'beyond horizon' there means not reached)\n";
      }
    });
  }

  if (cmd == "queues") {
    if (!args.empty()) return Usage("rota queues [-o json]");
    Response r = c.Get("/v1/queues");
    return Run(c, r, "queues", [](const json& j) {
      // (MAX_PRIORITY only where a queue has one.)
      bool capped = false;
      for (const auto& q : j["queues"]) capped = capped || q.contains("max_priority");
      std::vector<std::string> header = {"QUEUE", "WEIGHT", "PENDING", "RUNNING", "GPUS", "GUARANTEED"};
      if (capped) header.push_back("MAX_PRIORITY");
      header.push_back("STATUS");
      Table t(header);
      for (const auto& q : j["queues"]) {
        std::string status = S(q, "status");
        std::replace(status.begin(), status.end(), '_', ' ');
        std::vector<std::string> row = {S(q, "name"), S(q, "weight"), S(q, "pending"), S(q, "running"), S(q, "gpus_allocated"),
                                        S(q, "gpus_guaranteed")};
        if (capped) row.push_back(q.contains("max_priority") ? S(q, "max_priority") : "-");
        row.push_back(status);
        t.Add(row);
      }
      std::cout << t.Render();
    });
  }

  if (cmd == "report") {
    auto csv = [](const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
      for (size_t i = 0; i < header.size(); ++i) std::cout << (i ? "," : "") << CsvField(header[i]);
      std::cout << "\n";
      for (const auto& row : rows) {
        for (size_t i = 0; i < row.size(); ++i) std::cout << (i ? "," : "") << CsvField(row[i]);
        std::cout << "\n";
      }
    };
    auto print = [&](const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
      if (c.output() == "csv") return csv(header, rows);
      Table t(header);
      for (const auto& row : rows) t.Add(row);
      std::cout << t.Render();
    };
    auto num = [](const json& j, const char* key) { return j.contains(key) ? S(j, key) : "-"; };
    if (!args.empty() && args[0] == "job") {
      if (args.size() != 2) return Usage(help->usage);
      Response r = c.Get("/v1/jobs/" + args[1] + "/usage");
      if (c.output() == "csv" && r.status == 200) {
        json j = json::parse(r.body, nullptr, false);
        std::vector<std::string> header = {"job", "attempt", "end", "started_at", "ended_at", "seconds", "gpu_model", "gpus",
                                           "gpu_milli", "gpu_hours", "activity_p50", "activity_p90", "activity_p95",
                                           "gpu_memory_peak_mib", "energy_j", "cpu_used_s", "cpu_throttled_s",
                                           "memory_peak_mib", "preemptions", "lost_work_s"};
        std::vector<std::vector<std::string>> rows;
        for (const auto& a : j["attempts"]) {
          std::vector<std::string> row;
          for (const std::string& h : header) row.push_back(S(a, h.c_str()));
          rows.push_back(std::move(row));
        }
        csv(header, rows);
        return kExitOk;
      }
      return Run(c, r, "report", [&](const json& j) {
        std::vector<std::vector<std::string>> rows;
        for (const auto& a : j["attempts"]) {
          const std::string gpus = a.value("gpus", 0) > 0 ? S(a, "gpus") + "x" + S(a, "gpu_model")
                                   : !S(a, "mig").empty() ? S(a, "mig") : a.value("gpu_milli", 0) > 0 ? S(a, "gpu_milli") + "m" : "-";
          auto pct = [&](const char* k) { return a.value(k, -1) < 0 ? std::string("-") : S(a, k) + "%"; };
          rows.push_back({S(a, "attempt"), S(a, "end"), FormatSpan(a.value("seconds", int64_t{0}) * kMicrosPerSecond), gpus,
                          pct("activity_p50") + "/" + pct("activity_p90") + "/" + pct("activity_p95"),
                          a.value("gpu_memory_peak_mib", 0) > 0 ? FormatMemoryMiB(a["gpu_memory_peak_mib"].get<int64_t>()) : "-",
                          S(a, "energy_j") + " J", S(a, "cpu_used_s") + " s (" + S(a, "cpu_throttled_s") + " s throttled)",
                          a.value("memory_peak_mib", 0) > 0 ? FormatMemoryMiB(a["memory_peak_mib"].get<int64_t>()) : "-"});
        }
        std::cout << "job " << S(j, "job") << (j.contains("family") ? " (family " + S(j, "family") + ")" : "") << "\n";
        if (rows.empty()) {
          std::cout << "no attempt has run yet\n";
          return;
        }
        print({"ATTEMPT", "END", "RAN", "GPUS", "ACTIVITY p50/p90/p95", "GPU MEM PEAK", "ENERGY", "CPU", "MEM PEAK"}, rows);
        std::cout << "GPU-hours: " << num(j, "gpu_hours") << ", energy: " << num(j, "energy_kwh") << " kWh";
        if (j.contains("cost")) std::cout << ", cost: " << num(j, "cost") << (S(j, "currency").empty() ? "" : " " + S(j, "currency"));
        std::cout << "\n";
        if (j.contains("recommendation")) {
          const json& rec = j["recommendation"];
          std::cout << "right size: " << S(rec, "summary") << "\n";
          if (rec.contains("cpu") || rec.contains("memory")) {
            std::cout << "limits from use: " << (rec.contains("cpu") ? "cpu: " + S(rec, "cpu") : "")
                      << (rec.contains("cpu") && rec.contains("memory") ? ", " : "")
                      << (rec.contains("memory") ? "memory: " + S(rec, "memory") : "") << "\n";
          }
        }
      });
    }
    std::string query;
    for (size_t i = 0; i < args.size(); ++i) {
      if ((args[i] == "--since" || args[i] == "--by") && i + 1 < args.size()) {
        query += (query.empty() ? "?" : "&") + args[i].substr(2) + "=" + UrlEncode(args[i + 1]);
        ++i;
      } else {
        return Usage(help->usage);
      }
    }
    Response r = c.Get("/v1/usage/report" + query);
    // Costs show where some node's GPU-hours have a price (accounting:).
    const json parsed = r.status == 200 ? json::parse(r.body, nullptr, false) : json();
    const bool priced = parsed.is_object() && parsed["total"].is_object() && parsed["total"]["cost"].is_number();
    auto row = [&](const json& x) {
      std::vector<std::string> out{S(x, "key"), S(x, "jobs"), S(x, "gpu_hours"), S(x, "gpu_hours_measured"),
                                   S(x, "gpu_hours_used"), S(x, "gpu_hours_idle"), S(x, "gpu_hours_oversized"),
                                   x.value("efficiency_pct", -1.0) < 0 ? "-" : S(x, "efficiency_pct") + "%",
                                   S(x, "energy_kwh")};
      if (priced) {
        for (const char* k : {"cost", "cost_idle"}) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.2f", x[k].is_number() ? x[k].get<double>() : 0.0);
          out.push_back(x[k].is_number() ? buf : "-");
        }
      }
      return out;
    };
    if (c.output() == "csv" && r.status == 200) {
      const json& j = parsed;
      std::vector<std::vector<std::string>> rows;
      for (const auto& x : j["rows"]) rows.push_back(row(x));
      rows.push_back(row(j["total"]));
      std::vector<std::string> header{S(j, "by"), "jobs", "gpu_hours", "gpu_hours_measured", "gpu_hours_used",
                                      "gpu_hours_idle", "gpu_hours_oversized", "efficiency", "energy_kwh"};
      if (priced) header.insert(header.end(), {"cost", "cost_idle"});
      csv(header, rows);
      return kExitOk;
    }
    return Run(c, r, "report", [&](const json& j) {
      std::vector<std::vector<std::string>> rows;
      for (const auto& x : j["rows"]) rows.push_back(row(x));
      rows.push_back(row(j["total"]));
      std::string by = S(j, "by");
      for (char& ch : by) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      std::cout << "from " << S(j, "since") << " to " << S(j, "until") << "\n";
      std::vector<std::string> header{by, "JOBS", "GPU-H", "MEASURED", "USED", "IDLE", "OVERSIZED", "EFFICIENCY", "KWH"};
      if (priced) {
        const std::string currency = S(j, "currency");
        header.push_back(currency.empty() ? "COST" : "COST " + currency);
        header.push_back("IDLE COST");
      }
      print(header, rows);
      if (!j["under_users"].empty()) {
        std::cout << "\nunder-used (GPU-hours a smaller shape would have freed):\n";
        std::vector<std::vector<std::string>> under;
        for (const auto& u : j["under_users"]) {
          under.push_back({S(u, "family"), S(u, "jobs"), S(u, "gpu_hours"), S(u, "gpu_hours_oversized"), S(u, "summary")});
        }
        print({"FAMILY", "JOBS", "GPU-H", "OVERSIZED", "RIGHT SIZE"}, under);
      }
    });
  }

  if (cmd == "top") {
    // --watch: again every 2 s (clearing a terminal), like top(1), until interrupted.
    bool watch = false;
    for (const std::string& a : args) {
      if (a == "--watch" || a == "-w") watch = true;
      else return Usage(help->usage);
    }
    for (bool first = true;; first = false) {
    if (!first) std::this_thread::sleep_for(std::chrono::seconds(2));
    Response r = c.Get("/v1/nodes");
    if (watch && isatty(STDOUT_FILENO)) std::cout << "\033[H\033[2J";
    const int rc = Run(c, r, "top", [](const json& j) {
      Table t({"NODE", "GPU", "JOB", "UTIL%", "MEMORY", "TEMP", "POWER", "HEALTHY", "MIG"});
      int64_t total = 0, allocated = 0;
      for (const auto& n : j["nodes"]) {
        for (const auto& g : n["gpu_list"]) {
          ++total;
          allocated += g["allocated"].get<bool>();
          t.Add({S(n, "name") + (n["simulated"].get<bool>() ? " (sim)" : ""), S(g, "index"),
                 g.contains("jobs") ? GpuList(g["jobs"]) : g.contains("job") ? S(g, "job") : "-", g.contains("utilization_pct") ? S(g, "utilization_pct") : "-",
                 g.contains("memory_used") ? S(g, "memory_used") : "-",
                 g.contains("temperature_c") ? S(g, "temperature_c") + "C" : "-",
                 g.contains("power_w") ? S(g, "power_w") + "W" : "-", g["healthy"].get<bool>() ? "yes" : "no",
                 g.contains("mig") ? (S(g, "mig").empty() ? "(none)" : S(g, "mig")) : "-"});
        }
      }
      std::cout << "GPUs allocated: " << allocated << "/" << total << "\n" << t.Render();
    });
    std::cout << std::flush;
    if (!watch || rc != kExitOk) return rc;
    }
  }

  // token create | list | revoke
  constexpr const char* kTokenUsage =
      "rota token create --user NAME --role user|admin|agent [--node NODE] [--ttl 30d] [--existing]\n"
      "       rota token list\n"
      "       rota token revoke ID";
  if (!args.empty() && args[0] == "list" && args.size() == 1) {
    Response r = c.Get("/v1/tokens");
    return Run(c, r, "token", [](const json& j) {
      Table t({"ID", "USER", "ROLE", "NODE", "CREATED", "EXPIRES", "STATE"});
      for (const auto& k : j["tokens"]) {
        t.Add({S(k, "id"), S(k, "user"), S(k, "role"), S(k, "node").empty() ? "-" : S(k, "node"), S(k, "created_at"),
               S(k, "expires_at").empty() ? "never" : S(k, "expires_at"), S(k, "state")});
      }
      std::cout << t.Render();
    });
  }
  if (!args.empty() && args[0] == "revoke" && args.size() == 2) {
    Response r = c.Post("/v1/tokens/" + args[1] + "/revoke", "{}", "application/json");
    return Run(c, r, "token", [&](const json&) { std::cout << "revoked token " << args[1] << "\n"; });
  }
  if (args.empty() || args[0] != "create") return Usage(kTokenUsage);
  json body = json::object();
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--existing") {
      body["existing"] = true;
      continue;
    }
    if (i + 1 >= args.size()) return Usage(kTokenUsage);
    if (args[i] == "--user") body["user"] = args[i + 1];
    else if (args[i] == "--role") body["role"] = args[i + 1];
    else if (args[i] == "--node") body["node"] = args[i + 1];
    else if (args[i] == "--ttl") body["ttl"] = args[i + 1];
    else return Usage(kTokenUsage);
    ++i;
  }
  Response r = c.Post("/v1/tokens", body.dump(), "application/json");
  return Run(c, r, "token", [](const json& j) { std::cout << S(j, "token") << "\n"; });
}

}  // namespace rota::cli
