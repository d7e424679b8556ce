// rota: one binary, subcommands. This layer only parses arguments and prints;
// the work happens in the libraries.
#include <iostream>
#include <string>

#include "cli/plan_cmd.h"

namespace {

constexpr const char* kUsage =
    "usage: rota <command> [flags]\n"
    "\n"
    "commands:\n"
    "  plan      schedule a jobs file on a cluster config, offline (what-if)\n"
    "  version   print the version\n"
    "\n"
    "Run 'rota <command> --help' for a command's flags.\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string cmd = argv[1];
  if (cmd == "plan") return rota::cli::PlanMain(argc - 2, argv + 2);
  if (cmd == "version" || cmd == "--version") {
    std::cout << "rota 0.1.0\n";
    return 0;
  }
  if (cmd == "help" || cmd == "-h" || cmd == "--help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "rota: unknown command '" << cmd << "'\n" << kUsage;
  return 2;
}
