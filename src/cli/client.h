// Client: the CLI's connection to a rota server. Resolves the server and token
// from, in order: --server/--token flags, ROTA_SERVER/ROTA_TOKEN, the config
// file ($ROTA_CONFIG or ~/.config/rota/config.yaml, lines `server: URL` and
// `token: T`), and for a server on this machine the admin token that
// `rota up` wrote to its data directory.
#pragma once

#include <string>
#include <vector>

namespace rota::cli {

// Exit codes shared by every client command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;      // server or network trouble
inline constexpr int kExitBadInput = 2;   // usage, or the server refused the input (400, 413, 422)
inline constexpr int kExitNotFound = 3;   // 404
inline constexpr int kExitDenied = 4;     // 401, 403
inline constexpr int kExitConflict = 5;   // 409

struct Response {
  int status = 0;  // 0 = no answer
  std::string body;
  std::string error;  // network error text when status == 0
};

class Client {
 public:
  // Consumes --server, --token and -o/--output from args; the rest stay.
  static Client FromArgs(std::vector<std::string>* args);

  Response Get(const std::string& path) const;
  Response Post(const std::string& path, const std::string& body, const std::string& content_type) const;

  const std::string& server() const { return server_; }
  bool json_output() const { return output_ == "json"; }

  // Prints the server's error (or the network error) and returns the exit code for it.
  static int Fail(const Response& r, const std::string& what);

 private:
  std::string server_;
  std::string token_;
  std::string output_ = "table";
};

// The data directory `rota up` uses by default: $ROTA_DATA_DIR, else
// ~/.local/share/rota.
std::string DefaultDataDir();

}  // namespace rota::cli
