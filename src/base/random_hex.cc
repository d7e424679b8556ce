#include "base/random_hex.h"

#include <cstdio>
#include <random>

namespace rota {

std::string RandomHex(int digits) {
  std::random_device rd;
  std::string out;
  char part[9];
  for (int i = 0; i < digits; i += 8) {
    std::snprintf(part, sizeof(part), "%08x", static_cast<unsigned>(rd()));
    out += part;
  }
  return out;
}

}  // namespace rota
