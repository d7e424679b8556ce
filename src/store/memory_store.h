// MemoryStore: a Store kept in memory, for unit tests of the code above it.
// Not durable; never the shipped path.
#pragma once

#include <mutex>

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
  Status WriteSnapshot(uint64_t seq, const std::vector<Event>& compacted) override {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_ = compacted;
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

 private:
  std::mutex mu_;  // WriteSnapshot may run beside the owner's calls
  uint64_t seq_ = 0;
  std::vector<std::pair<uint64_t, Event>> journal_;
  std::vector<Event> snapshot_;
  std::vector<TokenRecord> tokens_;
};

}  // namespace rota
