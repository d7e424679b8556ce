// Fuzz target: journal events (a corrupted journal must fail cleanly on replay).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/json_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto event = rota::api::DecodeEvent(text);
  if (event.ok()) {
    // What decodes re-encodes and decodes to the same thing.
    const std::string again = rota::api::EncodeEvent(*event);
    auto back = rota::api::DecodeEvent(again);
    if (!back.ok() || rota::api::EncodeEvent(*back) != again) __builtin_trap();
  }
  return 0;
}
