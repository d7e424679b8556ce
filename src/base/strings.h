// Small string helpers shared by the layers that parse lists from flags and
// query parameters, and that check text from users and agents.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rota {

// "a,b,,c" -> {"a", "b", "c"}: the items between commas, empty ones dropped.
inline std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    if (comma > pos) out.emplace_back(text.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

// The index of the first control character (below 0x20, or DEL) in
// `text`, npos if none: what may not be in a path the kernel reads as a C
// string, nor in text shown on a terminal.
inline size_t FindControlCharacter(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return i;
  }
  return std::string_view::npos;
}

}  // namespace rota
