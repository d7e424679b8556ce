// MemoryStore: a Store kept in memory, for unit tests of the code above it.
// Not durable; never the shipped path.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <tuple>

#include "store/store.h"

namespace rota {

class MemoryStore final : public Store {
 public:
  StatusOr<uint64_t> Append(const std::vector<Event>& events) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Event& e : events) journal_.push_back({++seq_, e});
    return seq_;
  }
  Status Replay(const std::function<Status(const Event&)>& fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Event& e : snapshot_) ROTA_RETURN_IF_ERROR(fn(e));
    for (const auto& [seq, e] : journal_) ROTA_RETURN_IF_ERROR(fn(e));
    return Status::Ok();
  }
  Status WriteSnapshot(uint64_t seq, const EventSource& compacted) override {
    std::vector<Event> events;
    ROTA_RETURN_IF_ERROR(compacted([&](const Event& e) {
      events.push_back(e);
      return Status::Ok();
    }));
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_ = std::move(events);
    std::erase_if(journal_, [seq](const auto& p) { return p.first <= seq; });
    return Status::Ok();
  }
  uint64_t last_seq() const override { return seq_; }
  Status PutToken(const TokenRecord& token) override {
    std::erase_if(tokens_, [&](const TokenRecord& t) { return t.hash == token.hash; });
    tokens_.push_back(token);
    return Status::Ok();
  }
  StatusOr<std::vector<TokenRecord>> Tokens() override { return tokens_; }
  StatusOr<uint64_t> Keep(const std::string& name, uint64_t value) override {
    std::lock_guard<std::mutex> lock(mu_);
    return kept_.try_emplace(name, value & uint64_t{INT64_MAX}).first->second;
  }
  StatusOr<std::optional<uint64_t>> Kept(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = kept_.find(name);
    return it == kept_.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  }
  Status PutUsage(const std::vector<UsageRecord>& records) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const UsageRecord& r : records) {
      if (!usage_keys_.insert({r.job.value(), r.attempt}).second) continue;
      usage_.push_back(r);
    }
    return Status::Ok();
  }
  StatusOr<std::vector<UsageRecord>> Usage(TimePoint since, TimePoint until) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<UsageRecord> out;
    for (const UsageRecord& r : usage_) {
      if (r.ended_at >= since && r.ended_at < until) out.push_back(r);
    }
    std::stable_sort(out.begin(), out.end(), [](const UsageRecord& a, const UsageRecord& b) { return a.ended_at < b.ended_at; });
    return out;
  }
  StatusOr<std::vector<UsageRecord>> UsageOfJob(JobId job) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<UsageRecord> out;
    for (const UsageRecord& r : usage_) {
      if (r.job == job) out.push_back(r);
    }
    std::sort(out.begin(), out.end(), [](const UsageRecord& a, const UsageRecord& b) { return a.attempt < b.attempt; });
    return out;
  }
  StatusOr<int64_t> DropUsage(TimePoint before) override {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    std::erase_if(usage_, [&](const UsageRecord& r) {
      if (r.ended_at >= before) return false;
      usage_keys_.erase({r.job.value(), r.attempt});
      return ++n, true;
    });
    return n;
  }
  Status PutGpuHistory(const std::vector<GpuHistoryBlock>& blocks) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const GpuHistoryBlock& b : blocks) history_[{b.node, b.gpu, b.step_s, b.start}] = b;
    return Status::Ok();
  }
  StatusOr<std::vector<GpuHistoryBlock>> GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                    TimePoint until) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<GpuHistoryBlock> out;
    for (const auto& [key, b] : history_) {
      if ((node.empty() || b.node == node) && b.step_s == step_s && b.start >= since && b.start < until) out.push_back(b);
    }
    return out;
  }
  StatusOr<int64_t> DropGpuHistory(int32_t step_s, TimePoint before) override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(std::erase_if(history_, [&](const auto& kv) {
      return kv.second.step_s == step_s && kv.second.start < before;
    }));
  }

 private:
  std::mutex mu_;  // WriteSnapshot may run beside the owner's calls
  uint64_t seq_ = 0;
  std::vector<std::pair<uint64_t, Event>> journal_;
  std::vector<Event> snapshot_;
  std::vector<TokenRecord> tokens_;
  std::map<std::string, uint64_t> kept_;
  std::vector<UsageRecord> usage_;
  std::set<std::pair<uint64_t, int32_t>> usage_keys_;
  std::map<std::tuple<std::string, int32_t, int32_t, TimePoint>, GpuHistoryBlock> history_;
};

}  // namespace rota
