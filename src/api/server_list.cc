#include "api/server_list.h"

#include <algorithm>

namespace rota::api {
namespace {

std::string Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '/')) s.remove_suffix(1);
  return std::string(s);
}

}  // namespace

ServerList::ServerList(std::string_view comma_separated) {
  size_t start = 0;
  while (start <= comma_separated.size()) {
    size_t end = comma_separated.find(',', start);
    if (end == std::string_view::npos) end = comma_separated.size();
    std::string url = Trim(comma_separated.substr(start, end - start));
    if (!url.empty() && std::find(urls_.begin(), urls_.end(), url) == urls_.end()) urls_.push_back(std::move(url));
    start = end + 1;
  }
  if (urls_.empty()) urls_.push_back("http://127.0.0.1:7070");
}

ServerList::ServerList(const ServerList& other) {
  std::lock_guard<std::mutex> lock(other.mu_);
  urls_ = other.urls_;
  at_ = other.at_;
}

ServerList& ServerList::operator=(const ServerList& other) {
  if (this == &other) return *this;
  std::scoped_lock lock(mu_, other.mu_);
  urls_ = other.urls_;
  at_ = other.at_;
  return *this;
}

std::string ServerList::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return urls_[at_];
}

std::vector<std::string> ServerList::all() const {
  std::lock_guard<std::mutex> lock(mu_);
  return urls_;
}

size_t ServerList::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return urls_.size();
}

void ServerList::Failed(const std::string& tried) {
  std::lock_guard<std::mutex> lock(mu_);
  failed_at_[tried] = std::chrono::steady_clock::now();
  if (urls_[at_] == tried) at_ = (at_ + 1) % urls_.size();
}

void ServerList::Heard(const std::string& tried, int status, std::string_view role, const std::string& leader) {
  if (status == 0) {
    Failed(tried);
  } else if (status == 503 && !leader.empty()) {
    Redirect(leader);
  } else if (status == 503 && role == "standby") {
    // It answered, so it is not recorded as failed: it may be the next leader.
    std::lock_guard<std::mutex> lock(mu_);
    if (urls_[at_] == tried) at_ = (at_ + 1) % urls_.size();
  }
}

void ServerList::Redirect(const std::string& leader) {
  const std::string url = Trim(leader);
  if (url.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto f = failed_at_.find(url);
      f != failed_at_.end() && std::chrono::steady_clock::now() - f->second < std::chrono::seconds(2)) {
    // A stale answer: the leader it names just failed us. Try another.
    if (urls_.size() > 1 && urls_[at_] == url) at_ = (at_ + 1) % urls_.size();
    return;
  }
  auto it = std::find(urls_.begin(), urls_.end(), url);
  if (it == urls_.end()) {
    urls_.push_back(url);
    it = urls_.end() - 1;
  }
  at_ = static_cast<size_t>(it - urls_.begin());
}

}  // namespace rota::api
