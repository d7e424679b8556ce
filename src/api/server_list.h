// ServerList: the addresses of a rota control plane that may have several
// replicas ("URL1,URL2,..." from --server or ROTA_SERVER), and which one a
// client talks to now. A client that cannot reach the current one moves to
// the next; one told by a standby where the leader is (its 503 carries a
// Rota-Leader header) goes there. Thread-safe: an agent's watch, heartbeat
// and registration threads share one list.
//
// Example:
//   ServerList servers("http://a:7070,http://b:7070");
//   auto res = Call(servers.current());
//   if (!res) servers.Failed(tried);
//   else if (res->status == 503 && res->has_header("Rota-Leader")) servers.Redirect(res->get_header_value("Rota-Leader"));
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace rota::api {

class ServerList {
 public:
  // Empty items are skipped; an empty list is "http://127.0.0.1:7070".
  explicit ServerList(std::string_view comma_separated);
  ServerList(const ServerList& other);
  ServerList& operator=(const ServerList& other);

  std::string current() const;
  std::vector<std::string> all() const;
  size_t size() const;

  // `tried` (a URL current() returned) did not answer: move on to the next,
  // unless another thread moved already.
  void Failed(const std::string& tried);
  // What an answer to a request sent to `tried` says about where the leader
  // is: no answer (`status` 0) moves on to the next server; a standby's 503
  // (`role` is its Rota-Role header, "standby") goes to the leader its
  // Rota-Leader header names (`leader`), or, naming none (the lease is
  // between leaders), on to the next server, which may be the one taking
  // over. Any other 503 is the leader's own: it stays the one.
  void Heard(const std::string& tried, int status, std::string_view role, const std::string& leader);

  // A standby named `leader`: go there (it joins the list if it was not in
  // it), unless that one failed in the last two seconds (the standby has
  // not yet seen the leader go): then on to the next instead.
  void Redirect(const std::string& leader);

 private:
  mutable std::mutex mu_;
  std::vector<std::string> urls_;
  size_t at_ = 0;
  std::map<std::string, std::chrono::steady_clock::time_point> failed_at_;  // the last failure of each
};

}  // namespace rota::api
