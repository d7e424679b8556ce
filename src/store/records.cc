#include "store/records.h"

#include <zlib.h>

#include "api/json_codec.h"

namespace rota {

int64_t RecordCrc(uint64_t seq, std::string_view body) {
  unsigned char le[8];
  for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(seq >> (8 * i));
  uLong crc = crc32(0L, Z_NULL, 0);
  crc = crc32(crc, le, 8);
  crc = crc32(crc, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()));
  return static_cast<int64_t>(crc);
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

}  // namespace rota
