// Base64 (RFC 4648, with padding): bytes through JSON, which carries only
// valid UTF-8 (task logs shipped by agents).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rota {

std::string Base64Encode(std::string_view bytes);
// nullopt if `text` is not valid base64.
std::optional<std::string> Base64Decode(std::string_view text);

}  // namespace rota
