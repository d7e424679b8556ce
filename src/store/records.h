// What SqliteStore and PgStore store alike: every journal and snapshot
// record carries a CRC-32 of its sequence number (8 bytes, little-endian)
// and its body, so a changed record, or one moved to another sequence
// number, fails it; a snapshot's body is its events' JSON, one per line.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/event.h"

namespace rota {

int64_t RecordCrc(uint64_t seq, std::string_view body);

std::string EncodeSnapshotBody(const std::vector<Event>& events);
// Calls `fn` with each event of a snapshot body, in order.
Status DecodeSnapshotBody(std::string_view body, const std::function<Status(const Event&)>& fn);

}  // namespace rota
