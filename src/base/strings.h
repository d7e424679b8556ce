// Small string helpers shared by the layers that parse lists from flags and
// query parameters.
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

}  // namespace rota
