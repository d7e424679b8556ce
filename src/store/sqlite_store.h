// SqliteStore: the embedded default Store. One SQLite file in WAL mode with
// synchronous=FULL, so a committed Append survives kill -9 and power loss.
// Events are stored as one JSON document each (api/json_codec.h).
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(auto store, SqliteStore::Open(data_dir + "/rota.db"));
#pragma once

#include <memory>
#include <string>

#include "store/store.h"

struct sqlite3;

namespace rota {

class SqliteStore final : public Store {
 public:
  static StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;

  StatusOr<uint64_t> Append(const std::vector<Event>& events) override;
  Status Replay(const std::function<Status(const Event&)>& fn) override;
  Status WriteSnapshot(uint64_t seq, const std::vector<Event>& compacted) override;
  uint64_t last_seq() const override { return last_seq_; }
  Status PutToken(const TokenRecord& token) override;
  StatusOr<std::vector<TokenRecord>> Tokens() override;

 private:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status Exec(const char* sql);
  Status Error(const std::string& what) const;

  sqlite3* db_;
  std::string path_;
  uint64_t last_seq_ = 0;
};

}  // namespace rota
