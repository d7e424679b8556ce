// What SqliteStore and PgStore store alike: every journal and snapshot
// record carries a CRC-32 of its sequence number (8 bytes, little-endian)
// and its body, so a changed record, or one moved to another sequence
// number, fails it.
//
// A snapshot is written in parts, as its events are produced, so that
// neither the events nor their encoding are ever in memory whole (a store of
// a million ended jobs is about a gigabyte of JSON, SQLite's and
// PostgreSQL's limit for one value): each part is a run of whole events,
// their JSON one per line, of about kSnapshotPartBytes; its CRC covers the
// snapshot's sequence number, the part's index and its body. The snapshot's
// own record holds only a header line naming how many parts it has, which a
// server from before parts refuses to read (an unknown event type) rather
// than take for an empty state. A snapshot whose body is not a header holds
// its events itself (stores from before parts).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/event.h"

namespace rota {

int64_t RecordCrc(uint64_t seq, std::string_view body);
int64_t SnapshotPartCrc(uint64_t seq, int64_t part, std::string_view body);

// A snapshot's events, produced in order into a sink; stops at (and
// returns) the sink's first error.
using EventSink = std::function<Status(const Event&)>;
using EventSource = std::function<Status(const EventSink&)>;
// A source of `events` (which must outlive it).
EventSource EventsOf(const std::vector<Event>& events);

inline constexpr size_t kSnapshotPartBytes = size_t{1} << 20;

// Encodes `events` into parts of about `part_bytes` (an event is never
// split), calling `put` with each part's index (from 0) and body as it
// fills; returns how many parts were put.
StatusOr<int64_t> EncodeSnapshotParts(const EventSource& events, size_t part_bytes,
                                      const std::function<Status(int64_t part, std::string_view body)>& put);
// The body of a snapshot record whose events are in `parts` parts.
std::string SnapshotHeader(int64_t parts);
// How many parts the snapshot with record body `body` has; none if the
// body holds its events itself.
std::optional<int64_t> SnapshotParts(std::string_view body);

// Reads the parts of the snapshot at `seq` (`parts` of them) as a store
// fetches them, in order: DataLoss (prefixed `where`) for a part missing,
// moved or changed; calls `fn` with their events.
class SnapshotPartReader {
 public:
  SnapshotPartReader(std::string where, uint64_t seq, int64_t parts)
      : where_(std::move(where)), seq_(seq), parts_(parts) {}
  bool done() const { return next_ >= parts_; }
  // The next part fetched: its index, body and stored CRC.
  Status Read(int64_t part, std::string_view body, int64_t crc, const std::function<Status(const Event&)>& fn);
  // After the last fetched: DataLoss if parts are missing at the end.
  Status Finish() const;

 private:
  std::string where_;
  uint64_t seq_;
  int64_t parts_, next_ = 0;
};

// A snapshot body's format, the events' JSON one per line (each part's
// too); what stores from before parts kept in the snapshot's own record.
std::string EncodeSnapshotBody(const std::vector<Event>& events);
// Calls `fn` with each event of a snapshot body (or part), in order.
Status DecodeSnapshotBody(std::string_view body, const std::function<Status(const Event&)>& fn);

}  // namespace rota
