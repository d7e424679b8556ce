#include "store/records.h"

#include <zlib.h>

#include <charconv>

#include "api/json_codec.h"
#include "store/store.h"

namespace rota {

int64_t RecordCrc(uint64_t seq, std::string_view body) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(seq >> (8 * i));
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, le, 8);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return static_cast<int64_t>(crc);
}

int64_t SnapshotPartCrc(uint64_t seq, int64_t part, std::string_view body) {
  unsigned char le[16];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(seq >> (8 * i));
  for (int i = 0; i < 8; ++i) le[8 + i] = static_cast<unsigned char>(static_cast<uint64_t>(part) >> (8 * i));
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, le, 16);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return static_cast<int64_t>(crc);
}

EventSource EventsOf(const std::vector<Event>& events) {
  return [&events](const EventSink& sink) {
    for (const Event& e : events) ROTA_RETURN_IF_ERROR(sink(e));
    return Status::Ok();
  };
}

StatusOr<int64_t> EncodeSnapshotParts(const EventSource& events, size_t part_bytes,
                                      const std::function<Status(int64_t part, std::string_view body)>& put) {
  std::string body;
  body.reserve(part_bytes + part_bytes / 4);
  int64_t parts = 0;
  const Status encoded = events([&](const Event& e) -> Status {
    if (!body.empty()) body += '\n';
    body += api::EncodeEvent(e);
    if (body.size() < part_bytes) return Status::Ok();
    ROTA_RETURN_IF_ERROR(put(parts++, body));
    body.clear();
    return Status::Ok();
  });
  ROTA_RETURN_IF_ERROR(encoded);
  if (!body.empty()) ROTA_RETURN_IF_ERROR(put(parts++, body));
  return parts;
}

namespace {
constexpr std::string_view kHeaderPrefix = R"({"type":"SnapshotInParts","parts":)";
}  // namespace

std::string SnapshotHeader(int64_t parts) { return std::string(kHeaderPrefix) + std::to_string(parts) + "}"; }

std::optional<int64_t> SnapshotParts(std::string_view body) {
  if (!body.starts_with(kHeaderPrefix) || !body.ends_with('}')) return std::nullopt;
  const std::string_view digits = body.substr(kHeaderPrefix.size(), body.size() - kHeaderPrefix.size() - 1);
  int64_t parts = -1;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), parts);
  if (ec != std::errc() || end != digits.data() + digits.size() || parts < 0) return std::nullopt;
  return parts;
}

Status SnapshotPartReader::Read(int64_t part, std::string_view body, int64_t crc,
                                const std::function<Status(const Event&)>& fn) {
  if (part != next_) return Finish();  // (the one expected is missing)
  if (crc != SnapshotPartCrc(seq_, part, body)) {
    return DataLossError(where_ + ": part " + std::to_string(part) + " fails its checksum (the record was changed)");
  }
  if (Status s = DecodeSnapshotBody(body, fn); !s.ok()) return s.WithPrefix(where_ + ": part " + std::to_string(part));
  ++next_;
  return Status::Ok();
}

Status SnapshotPartReader::Finish() const {
  if (done()) return Status::Ok();
  return DataLossError(where_ + ": part " + std::to_string(next_) + " of " + std::to_string(parts_) + " is missing");
}

std::string EncodeSnapshotBody(const std::vector<Event>& events) {
  std::string body;
  for (const Event& e : events) {
    if (!body.empty()) body += '\n';
    body += api::EncodeEvent(e);
  }
  return body;
}

Status DecodeSnapshotBody(std::string_view body, const std::function<Status(const Event&)>& fn) {
  size_t start = 0;
  while (start < body.size()) {
    size_t end = body.find('\n', start);
    if (end == std::string_view::npos) end = body.size();
    ROTA_ASSIGN_OR_RETURN(Event e, api::DecodeEvent(body.substr(start, end - start)));
    ROTA_RETURN_IF_ERROR(fn(e));
    start = end + 1;
  }
  return Status::Ok();
}

Status CopyKept(Store& from, Store& to, const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, uint64_t>> copy;
  for (const std::string& name : names) {
    ROTA_ASSIGN_OR_RETURN(const std::optional<uint64_t> value, from.Kept(name));
    ROTA_ASSIGN_OR_RETURN(const std::optional<uint64_t> there, to.Kept(name));
    if (there && (!value || *there != *value)) {
      return FailedPreconditionError("the destination keeps its own '" + name + "' (a server led on it)");
    }
    if (value && !there) copy.emplace_back(name, *value);
  }
  for (const auto& [name, value] : copy) {
    ROTA_ASSIGN_OR_RETURN(const uint64_t kept, to.Keep(name, value));
    if (kept != value) return FailedPreconditionError("the destination keeps its own '" + name + "'");
  }
  return Status::Ok();
}

}  // namespace rota
