// rota: one binary, subcommands. This layer only parses arguments and prints;
// the work happens in the libraries.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli/client_cmd.h"
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
    "\n"
    "Client commands take --server URL, --token T (or ROTA_SERVER, ROTA_TOKEN) and -o json;\n"
    "--server may list every replica (URL1,URL2,...): requests follow the leader.\n";

// Every command name, for did-you-mean.
std::vector<std::string> Commands() {
  std::vector<std::string> names = rota::cli::ClientCommandNames();
  names.insert(names.end(), {"up", "server", "agent", "store", "plan", "sim", "version", "help"});
  return names;
}

}  // namespace

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
