// A replica's log as the API answers it (GET /v1/jobs/ID/logs): its files
// one after another (the local agent's, then those shipped from its nodes),
// read only where the answer needs them. A task writes its log as fast as it
// likes, and can make it sparse (ftruncate): 2 GiB of it read whole for a
// `--tail 3` had held 6 GB of the server's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace rota::server {

struct LogRead {
  std::string text;       // the answer's bytes
  uint64_t size = 0;      // the log's length now (its files')
  bool cut = false;       // what was asked for is longer than `cap`: `text` is its end
};

// The log from byte `offset` on (one past its end, where it started over:
// from the start), or with `tail` > 0 only its last `tail` lines there (a
// final line without its newline counts), and of those the last `cap` bytes.
// A file that cannot be read counts as empty.
LogRead ReadLog(const std::vector<std::string>& files, uint64_t offset, size_t tail, size_t cap);

}  // namespace rota::server
