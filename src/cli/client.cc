#include "cli/client.h"

#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <random>
#include <thread>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/random_hex.h"

namespace rota::cli {

std::string DefaultDataDir() {
  if (const char* d = std::getenv("ROTA_DATA_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/rota";
}

std::string ClientConfigPath() {
  if (const char* p = std::getenv("ROTA_CONFIG"); p && *p) return p;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.config/rota/config.yaml";
}

namespace {

std::string ReadConfigValue(const std::string& key) {
  std::ifstream in(ClientConfigPath());
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::string v = line.substr(key.size() + 1);
    v.erase(0, v.find_first_not_of(" \t\"'"));
    v.erase(v.find_last_not_of(" \t\"'\r") + 1);
    return v;
  }
  return "";
}

std::string Trimmed(std::string s) {
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  return s;
}

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return Trimmed(line);
}

// The first line of `path` if this user owns it and nobody else may write it
// (or the directory it is in); "" otherwise.
std::string OwnFirstLine(const std::string& path) {
  struct stat file, dir;
  const std::string parent = path.substr(0, path.rfind('/') == std::string::npos ? 0 : path.rfind('/'));
  if (stat(path.c_str(), &file) != 0 || file.st_uid != geteuid() || (file.st_mode & (S_IWGRP | S_IWOTH)) != 0) return "";
  if (!parent.empty() && (stat(parent.c_str(), &dir) != 0 || (dir.st_uid != geteuid() && dir.st_uid != 0) ||
                          (dir.st_mode & (S_IWGRP | S_IWOTH)) != 0)) {
    return "";
  }
  return FirstLine(path);
}

// One request to `server`, as the client sends each: its token, and the
// timeouts to connect and to read the answer.
httplib::Result Request(const std::string& server, const std::string& token, int connect_seconds, int read_seconds,
                        const std::string& method, const std::string& path, const httplib::Headers& headers,
                        const std::string& body, const std::string& content_type) {
  httplib::Client http(server);
  http.set_bearer_token_auth(token);
  http.set_connection_timeout(connect_seconds, 0);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(read_seconds, 0);
  return method == "GET" ? http.Get(path, headers) : http.Post(path, headers, body, content_type);
}

Response Answer(const httplib::Response& res) {
  Response out{res.status, res.body, "", {}};
  for (const auto& [k, v] : res.headers) out.headers.emplace(k, v);
  return out;
}

}  // namespace

std::string ServerUrlPath(const std::string& data_dir) { return data_dir + "/server.url"; }

std::string NewIdempotencyKey() { return RandomHex(32); }

Client Client::FromArgs(std::vector<std::string>* args) {
  Client c;
  std::string server;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    auto value = [&]() { return i + 1 < args->size() ? (*args)[++i] : std::string(); };
    if (a == "--server") server = value();
    else if (a == "--token") c.token_ = value();
    else if (a == "-o" || a == "--output") c.output_ = value();
    else rest.push_back(a);
  }
  *args = rest;
  if (server.empty()) {
    if (const char* s = std::getenv("ROTA_SERVER"); s && *s) server = s;
  }
  if (server.empty()) server = ReadConfigValue("server");
  if (server.empty()) {
    // A `rota up` (or `rota server`) on this machine records where it listens.
    // Only a file of this user's that nobody else may write: another account
    // must not point this user's CLI (and its token) at a server of theirs.
    server = OwnFirstLine(ServerUrlPath(DefaultDataDir()));
    if (!server.empty()) c.found_in_ = ServerUrlPath(DefaultDataDir());
  }
  if (server.empty()) server = "http://127.0.0.1:7070";
  c.servers_ = api::ServerList(server);
  if (c.token_.empty()) {
    if (const char* t = std::getenv("ROTA_TOKEN"); t && *t) c.token_ = t;
  }
  if (c.token_.empty()) c.token_ = ReadConfigValue("token");
  const bool local = server.find("://127.0.0.1") != std::string::npos || server.find("://localhost") != std::string::npos;
  if (c.token_.empty() && local) {
    std::ifstream in(DefaultDataDir() + "/admin.token");
    std::getline(in, c.token_);
    c.token_ = Trimmed(c.token_);
  }
  return c;
}

Response Client::Send(const std::string& method, const std::string& path, const std::string& body,
                      const std::string& content_type, const std::string& idempotency_key) const {
  // One server: one try, as always. Several (replicas): follow the leader
  // through a failover, for up to 15 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  const bool replicated = servers_.size() > 1;
  int busy_retries = 0;
  for (int attempt = 0;; ++attempt) {
    const std::string server = servers_.current();
    if (replicated && attempt == 0) {
      // A replica that accepts and never answers (a hung, paused leader) is
      // passed over at once: its /healthz answers within 2 s or not at all.
      httplib::Client probe(server);
      probe.set_connection_timeout(2, 0);
      probe.set_read_timeout(2, 0);
      if (!probe.Get("/healthz")) {
        servers_.Heard(server, 0, "", "");
        continue;
      }
    }
    httplib::Headers headers;
    if (!idempotency_key.empty()) headers.emplace("Idempotency-Key", idempotency_key);
    // (With replicas, one that hangs mid-request is left after 10 s, with
    // time to try the next.)
    auto res = Request(server, token_, replicated ? 2 : 5, replicated ? 10 : 30, method, path, headers, body, content_type);
    const bool more_time = std::chrono::steady_clock::now() < deadline;
    if (!res) {
      // A request that never connected reached no server; one whose answer
      // was lost may have: sent again only with an idempotency key (or a GET).
      const bool unsent = res.error() == httplib::Error::Connection;
      if (!(replicated && more_time && (unsent || method == "GET" || !idempotency_key.empty()))) {
        return {0, "", "cannot reach " + server + " (" + httplib::to_string(res.error()) + ")" +
                           (found_in_.empty() ? "" : " (the address in " + found_in_ + ")") +
                           (replicated ? "" : "; is `rota up` running?")};
      }
      servers_.Heard(server, 0, "", "");
    } else if (res->status == 503 && res->get_header_value("Rota-Role") == "standby" && more_time) {
      // A standby: it did nothing, and names the leader (or, between
      // leaders, none: then the next server, after a pause).
      const std::string leader = res->get_header_value("Rota-Leader");
      servers_.Heard(server, res->status, "standby", leader);
      if (!leader.empty() && servers_.current() != server) continue;  // straight to the leader it named
    } else if (res->status == 429 && method == "GET" && res->has_header("Retry-After") && busy_retries < 5) {
      // Busy (a rate or concurrency limit): a read is asked again after the
      // wait it names (at most 2 s), a few times.
      ++busy_retries;
      const int wait_s = std::clamp(std::atoi(res->get_header_value("Retry-After").c_str()), 0, 2);
      std::this_thread::sleep_for(std::chrono::milliseconds(250 + 1000 * wait_s));
      continue;
    } else {
      return Answer(*res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(500, 50 << std::min(attempt, 4))));
  }
}

std::string Client::ServerVersion() const {
  httplib::Client http(servers_.current());
  http.set_connection_timeout(2, 0);
  http.set_read_timeout(2, 0);
  auto res = http.Get("/healthz");
  if (!res || !res->has_header("Rota-Version")) return "";
  return res->get_header_value("Rota-Version");
}

Response Client::Get(const std::string& path) const { return Send("GET", path, "", "", ""); }

Response Client::GetFrom(const std::string& server, const std::string& path) const {
  auto res = Request(server, token_, 2, 30, "GET", path, {}, "", "");
  if (!res) return {0, "", "cannot reach " + server + " (" + httplib::to_string(res.error()) + ")", {}};
  return Answer(*res);
}

Response Client::Post(const std::string& path, const std::string& body, const std::string& content_type,
                      const std::string& idempotency_key) const {
  return Send("POST", path, body, content_type, idempotency_key);
}

std::string ErrorText(const std::string& body, const std::string& otherwise) {
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("error")) return otherwise;
  const auto& error = j["error"];
  if (error.is_string()) return error.get<std::string>();  // the services' router's
  if (error.is_object() && error.contains("message") && error["message"].is_string()) {
    return error["message"].get<std::string>();
  }
  return otherwise;
}

int Client::Fail(const Response& r, const std::string& what) {
  if (r.status == 0) {
    std::cerr << "rota " << what << ": " << r.error << "\n";
    return kExitError;
  }
  const std::string message = ErrorText(r.body, r.body);
  std::cerr << "rota " << what << ": " << message << " (HTTP " << r.status << ")\n";
  if (r.status == 401) {
    std::cerr << "rota: give a token with --token, ROTA_TOKEN or a `token:` line in " << ClientConfigPath()
              << " (on the server's machine, `rota up` wrote the admin token to DATA_DIR/admin.token, "
              << "by default " << DefaultDataDir() << "/admin.token)\n";
  }
  switch (r.status) {
    case 400:
    case 413:
    case 422: return kExitBadInput;
    case 401:
    case 403: return kExitDenied;
    case 404: return kExitNotFound;
    case 409: return kExitConflict;
    default: return kExitError;
  }
}

}  // namespace rota::cli

