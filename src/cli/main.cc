// rota: one binary, subcommands. This layer only parses arguments and prints;
// the work happens in the libraries.
#include <algorithm>
#include <cctype>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cli/client_cmd.h"
#include "cli/explain.h"
#include "cli/plan_cmd.h"
#include "cli/server_cmd.h"
#include "cli/sim_cmd.h"
#include "cli/suggest.h"

namespace {

constexpr const char* kUsage =
    "usage: rota <command> [flags]\n"
    "\n"
    "run:\n"
    "  up         server and a local agent in one process (single machine)\n"
    "  server     the control plane: REST API, scheduler, durable store\n"
    "  agent      a node agent that runs the tasks placed on its node\n"
    "  store      move a server's SQLite store into PostgreSQL (store migrate)\n"
    "use:\n"
    "  submit     submit a job file (YAML or JSON)\n"
    "  jobs       list jobs, a page at a time (--all for ended ones, --limit N, --after ID)\n"
    "  describe   a job's state, placement, pending reason and events\n"
    "  cancel     cancel a job\n"
    "  logs       a job's output\n"
    "  nodes      nodes and their GPUs\n"
    "  queues     queues with pending and running jobs\n"
    "  top        GPU utilisation per node\n"
    "  report     where the GPU-hours went: by user, queue or model; a job's use and right size\n"
    "  token      create, list and revoke API tokens (admin)\n"
    "  status     the control plane: the leader, its epoch, the standbys and their lag\n"
    "offline:\n"
    "  plan       schedule a jobs file on a cluster config (what-if)\n"
    "  sim        replay a cluster trace through the scheduler in virtual time\n"
    "  version    print the version\n"
    "  explain    what a job-spec or cluster-config field means (rota explain tasks.gpu)\n"
    "  completion a bash or zsh completion script (source <(rota completion bash))\n"
    "\n"
    "Client commands take --server URL, --token T (or ROTA_SERVER, ROTA_TOKEN) and -o json;\n"
    "--server may list every replica (URL1,URL2,...): requests follow the leader.\n";

// Every command name, for did-you-mean.
std::vector<std::string> Commands() {
  std::vector<std::string> names = rota::cli::ClientCommandNames();
  names.insert(names.end(), {"up", "server", "agent", "store", "plan", "sim", "version", "help", "explain", "completion"});
  return names;
}

// `rota completion bash|zsh`: every command with the flags it parses (the
// client's table; the usage texts of the others) and the words after it.
int Completion(const std::vector<std::string>& args) {
  if (args.size() != 1 || (args[0] != "bash" && args[0] != "zsh")) {
    const bool help = args.size() == 1 && (args[0] == "--help" || args[0] == "-h");
    (help ? std::cout : std::cerr)
        << "usage: rota completion bash|zsh\n\nPrints a completion script for the shell: commands, their flags and\n"
           "subcommands. Load it with `source <(rota completion bash)` (in ~/.bashrc), or for zsh\n"
           "`source <(rota completion zsh)` (in ~/.zshrc).\n";
    return help ? 0 : 2;
  }
  std::vector<rota::cli::CompletionCommand> commands;
  const std::map<std::string, std::vector<std::string>> words = {
      {"node", {"drain", "undrain", "describe", "history"}},
      {"token", {"create", "list", "revoke"}},
      {"report", {"job"}},
      {"store", {"migrate"}},
      {"completion", {"bash", "zsh"}},
      {"help", Commands()}};
  auto with_words = [&](rota::cli::CompletionCommand c) {
    if (auto it = words.find(c.name); it != words.end()) c.words = it->second;
    return c;
  };
  for (auto& [name, flags] : rota::cli::ClientCommandFlags()) commands.push_back(with_words({name, flags, {}}));
  const std::pair<const char*, std::string> others[] = {
      {"up", rota::cli::UsageText("up")},         {"server", rota::cli::UsageText("server")},
      {"agent", rota::cli::UsageText("agent")},   {"store", rota::cli::UsageText("store")},
      {"plan", rota::cli::PlanUsage()},           {"sim", rota::cli::SimUsage()},
      {"explain", ""},                            {"completion", ""},
      {"version", "--server"},                    {"help", ""}};
  for (const auto& [name, usage] : others) {
    std::set<std::string> flags;
    for (size_t i = usage.find("--"); i != std::string::npos; i = usage.find("--", i + 2)) {
      size_t end = i + 2;
      while (end < usage.size() && (std::isalnum(static_cast<unsigned char>(usage[end])) || usage[end] == '-')) ++end;
      if (end > i + 2) flags.insert(usage.substr(i, end - i));
    }
    commands.push_back(with_words({name, {flags.begin(), flags.end()}, {}}));
  }
  std::cout << rota::cli::CompletionScript(args[0], commands);
  return 0;
}

}  // namespace

// jemalloc's options (the rota binary links jemalloc, which reads this
// global at its first allocation; MALLOC_CONF in the environment is applied
// after it). Its background thread gives freed memory back to the kernel on
// its own clock. Without it, purging happened only inside later
// allocations, so an idle server kept its last burst's transient memory
// resident: after a 100,000-job cancel, 277 MiB of heap against 54 MiB with
// it (bench/mass_cancel.sh).
extern "C" {
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables): jemalloc's name and type
const char* malloc_conf = "background_thread:true";
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  // Client flags may come before the command: rota --token T jobs.
  std::vector<std::string> leading;
  int first = 1;
  while (first + 1 < argc && (std::string(argv[first]) == "--server" || std::string(argv[first]) == "--token" ||
                              std::string(argv[first]) == "-o")) {
    leading.push_back(argv[first]);
    leading.push_back(argv[first + 1]);
    first += 2;
  }
  if (first >= argc) {
    std::cerr << kUsage;
    return 2;
  }
  std::string cmd = argv[first];
  std::vector<std::string> args(argv + first + 1, argv + argc);
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    if (args.empty()) {
      std::cout << kUsage;
      return 0;
    }
    // rota help --man: this help and every command's, as a man page
    // (rota help --man > rota.1; man -l rota.1).
    if (args[0] == "--man") {
      std::vector<std::pair<std::string, std::string>> pages = rota::cli::ClientCommandHelp();
      for (const char* name : {"up", "server", "agent", "store"}) pages.push_back({name, rota::cli::UsageText(name)});
      pages.push_back({"plan", rota::cli::PlanUsage()});
      pages.push_back({"sim", rota::cli::SimUsage()});
      pages.push_back({"explain", "usage: rota explain PATH\n\nA job-spec or cluster-config field's type, default and meaning.\n"});
      pages.push_back({"completion", "usage: rota completion bash|zsh\n\nA completion script for the shell.\n"});
      std::cout << rota::cli::ManPage(kUsage, pages);
      return 0;
    }
    // rota help CMD: that command's own help, as `rota CMD --help` prints it.
    const std::vector<std::string> known = Commands();
    if (std::find(known.begin(), known.end(), args[0]) == known.end() || args[0] == "help") {
      std::cerr << "rota help: unknown command '" << args[0] << "'" << rota::cli::DidYouMean(args[0], known) << "\n";
      return 2;
    }
    cmd = args[0];
    args = {"--help"};
  }
  args.insert(args.end(), leading.begin(), leading.end());
  if (!leading.empty() &&
      (cmd == "plan" || cmd == "sim" || cmd == "server" || cmd == "up" || cmd == "agent" || cmd == "store")) {
    std::cerr << "rota: --server/--token/-o go with client commands, not '" << cmd << "'\n";
    return 2;
  }
  if (cmd == "plan") {
    std::vector<char*> plan_argv;
    for (std::string& a : args) plan_argv.push_back(a.data());
    return rota::cli::PlanMain(static_cast<int>(plan_argv.size()), plan_argv.data());
  }
  if (cmd == "sim") return rota::cli::SimMain(args);
  if (cmd == "explain") return rota::cli::ExplainMain(args);
  if (cmd == "completion") return Completion(args);
  if (cmd == "server") return rota::cli::ServerMain(args, /*with_local_agent=*/false);
  if (cmd == "up") return rota::cli::ServerMain(args, /*with_local_agent=*/true);
  if (cmd == "agent") return rota::cli::AgentMain(args);
  if (cmd == "store") return rota::cli::StoreMain(args);
  if (int rc = rota::cli::ClientMain(cmd, args); rc >= 0) return rc;
  if (cmd == "version" || cmd == "--version") {
    if (std::find(args.begin(), args.end(), "--help") != args.end()) {
      std::cout << "usage: rota version [--server URL]\n\nThis binary's version, and the server's when one answers.\n";
      return 0;
    }
    return rota::cli::VersionMain(args);
  }
  std::cerr << "rota: unknown command '" << cmd << "'" << rota::cli::DidYouMean(cmd, Commands()) << "\n"
            << "(rota help lists the commands)\n";
  return 2;
}
