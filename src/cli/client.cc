#include "cli/client.h"

#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

namespace rota::cli {

std::string DefaultDataDir() {
  if (const char* d = std::getenv("ROTA_DATA_DIR"); d && *d) return d;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.local/share/rota";
}

namespace {

std::string ReadConfigValue(const std::string& key) {
  std::string path;
  if (const char* p = std::getenv("ROTA_CONFIG"); p && *p) path = p;
  else if (const char* home = std::getenv("HOME"); home && *home) path = std::string(home) + "/.config/rota/config.yaml";
  std::ifstream in(path);
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

}  // namespace

Client Client::FromArgs(std::vector<std::string>* args) {
  Client c;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args->size(); ++i) {
    const std::string& a = (*args)[i];
    auto value = [&]() { return i + 1 < args->size() ? (*args)[++i] : std::string(); };
    if (a == "--server") c.server_ = value();
    else if (a == "--token") c.token_ = value();
    else if (a == "-o" || a == "--output") c.output_ = value();
    else rest.push_back(a);
  }
  *args = rest;
  if (c.server_.empty()) {
    if (const char* s = std::getenv("ROTA_SERVER"); s && *s) c.server_ = s;
  }
  if (c.server_.empty()) c.server_ = ReadConfigValue("server");
  if (c.server_.empty()) c.server_ = "http://127.0.0.1:7070";
  if (c.token_.empty()) {
    if (const char* t = std::getenv("ROTA_TOKEN"); t && *t) c.token_ = t;
  }
  if (c.token_.empty()) c.token_ = ReadConfigValue("token");
  const bool local = c.server_.find("://127.0.0.1") != std::string::npos || c.server_.find("://localhost") != std::string::npos;
  if (c.token_.empty() && local) {
    std::ifstream in(DefaultDataDir() + "/admin.token");
    std::getline(in, c.token_);
    c.token_ = Trimmed(c.token_);
  }
  return c;
}

Response Client::Get(const std::string& path) const {
  httplib::Client http(server_);
  http.set_bearer_token_auth(token_);
  http.set_connection_timeout(5, 0);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(30, 0);
  auto res = http.Get(path);
  if (!res) return {0, "", "cannot reach " + server_ + " (" + httplib::to_string(res.error()) + "); is `rota up` running?"};
  return {res->status, res->body, ""};
}

Response Client::Post(const std::string& path, const std::string& body, const std::string& content_type) const {
  httplib::Client http(server_);
  http.set_bearer_token_auth(token_);
  http.set_connection_timeout(5, 0);
  http.set_tcp_nodelay(true);
  http.set_read_timeout(30, 0);
  auto res = http.Post(path, body, content_type);
  if (!res) return {0, "", "cannot reach " + server_ + " (" + httplib::to_string(res.error()) + "); is `rota up` running?"};
  return {res->status, res->body, ""};
}

int Client::Fail(const Response& r, const std::string& what) {
  if (r.status == 0) {
    std::cerr << "rota " << what << ": " << r.error << "\n";
    return kExitError;
  }
  std::string message = r.body;
  auto j = nlohmann::json::parse(r.body, nullptr, false);
  if (!j.is_discarded() && j.contains("error")) message = j["error"].value("message", r.body);
  std::cerr << "rota " << what << ": " << message << " (HTTP " << r.status << ")\n";
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
