// rota: one binary, subcommands. This layer only parses arguments and prints;
// the work happens in the libraries.
#include <iostream>
#include <string>
#include <vector>

#include "cli/client_cmd.h"
#include "cli/plan_cmd.h"
#include "cli/server_cmd.h"
#include "cli/sim_cmd.h"

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
    "  token      create, list and revoke API tokens (admin)\n"
    "  status     the control plane: the leader, its epoch, the standbys and their lag\n"
    "offline:\n"
    "  plan       schedule a jobs file on a cluster config (what-if)\n"
    "  sim        replay a cluster trace through the scheduler in virtual time\n"
    "  version    print the version\n"
    "\n"
    "Client commands take --server URL, --token T (or ROTA_SERVER, ROTA_TOKEN) and -o json;\n"
    "--server may list every replica (URL1,URL2,...): requests follow the leader.\n";

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
  const std::string cmd = argv[first];
  std::vector<std::string> args(argv + first + 1, argv + argc);
  args.insert(args.end(), leading.begin(), leading.end());
  if (!leading.empty() &&
      (cmd == "plan" || cmd == "sim" || cmd == "server" || cmd == "up" || cmd == "agent" || cmd == "store")) {
    std::cerr << "rota: --server/--token/-o go with client commands, not '" << cmd << "'\n";
    return 2;
  }
  if (cmd == "plan") return rota::cli::PlanMain(argc - 2, argv + 2);
  if (cmd == "sim") return rota::cli::SimMain(args);
  if (cmd == "server") return rota::cli::ServerMain(args, /*with_local_agent=*/false);
  if (cmd == "up") return rota::cli::ServerMain(args, /*with_local_agent=*/true);
  if (cmd == "agent") return rota::cli::AgentMain(args);
  if (cmd == "store") return rota::cli::StoreMain(args);
  if (int rc = rota::cli::ClientMain(cmd, args); rc >= 0) return rc;
  if (cmd == "version" || cmd == "--version") {
    std::cout << "rota 0.2.0\n";
    return 0;
  }
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "rota: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
