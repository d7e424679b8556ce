// `rota server`, `rota up` and `rota agent`: the long-running subcommands.
#pragma once

#include <string>
#include <vector>

namespace rota::cli {

int ServerMain(std::vector<std::string> args, bool with_local_agent);
int AgentMain(std::vector<std::string> args);
// `rota store migrate --data-dir DIR --to postgres://...`: moves a stopped
// server's SQLite store into an empty PostgreSQL database.
int StoreMain(std::vector<std::string> args);
// The usage text of server, up, agent and store ("" for another).
std::string UsageText(const std::string& cmd);

}  // namespace rota::cli
