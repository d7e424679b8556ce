// Client: the CLI's connection to a rota server. The server may be several
// replicas ("URL1,URL2"): a request goes to the leader, following a
// standby's Rota-Leader answer or moving on from one that does not answer,
// for up to 15 s (a failover). Resolves the server and token
// from, in order: --server/--token flags, ROTA_SERVER/ROTA_TOKEN, the config
// file ($ROTA_CONFIG or ~/.config/rota/config.yaml, lines `server: URL` and
// `token: T`), the address a `rota up` on this machine recorded in its data
// directory (DATA_DIR/server.url; DATA_DIR is $ROTA_DATA_DIR or
// ~/.local/share/rota), else http://127.0.0.1:7070; and for a server on this
// machine the admin token `rota up` wrote to DATA_DIR/admin.token.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/server_list.h"

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
  std::map<std::string, std::string> headers;  // the server's (names as sent)
};

class Client {
 public:
  // Consumes --server, --token and -o/--output from args; the rest stay.
  static Client FromArgs(std::vector<std::string>* args);

  Response Get(const std::string& path) const;
  // GET `path` from `server` itself (a URL), once: not through the list.
  Response GetFrom(const std::string& server, const std::string& path) const;
  // `idempotency_key` (an Idempotency-Key header) makes the POST safe to send
  // again when its answer was lost; without one, a POST is sent again only
  // when it cannot have reached a server (no connection, a standby's 503).
  Response Post(const std::string& path, const std::string& body, const std::string& content_type,
                const std::string& idempotency_key = "") const;

  std::string server() const { return servers_.current(); }
  // The server's version (its /healthz Rota-Version), "" if none answers within 2 s.
  std::string ServerVersion() const;
  bool json_output() const { return output_ == "json"; }
  const std::string& output() const { return output_; }
  // table, json, or wide (a table with more columns, where a command has them).
  bool output_valid() const { return output_ == "json" || output_ == "table" || output_ == "wide"; }

  // Prints the server's error (or the network error) and returns the exit code for it.
  static int Fail(const Response& r, const std::string& what);

 private:
  Response Send(const std::string& method, const std::string& path, const std::string& body,
               const std::string& content_type, const std::string& idempotency_key) const;

  mutable api::ServerList servers_{""};
  std::string found_in_;  // the file the server's address came from, if one did
  std::string token_;
  std::string output_ = "table";
};

// What an error answer's body says: rota's {"error": {"message": ...}}, or
// {"error": "..."} (the services' router's); `otherwise` for any other body.
std::string ErrorText(const std::string& body, const std::string& otherwise);

// The client config file: $ROTA_CONFIG, else ~/.config/rota/config.yaml.
std::string ClientConfigPath();
// Where a server serving from `data_dir` records its address (one line, a URL).
std::string ServerUrlPath(const std::string& data_dir);

// The data directory `rota up` uses by default: $ROTA_DATA_DIR, else
// ~/.local/share/rota.
std::string DefaultDataDir();

// A fresh random Idempotency-Key (128 bits, hex).
std::string NewIdempotencyKey();

}  // namespace rota::cli
