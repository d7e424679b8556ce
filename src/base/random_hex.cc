#include "base/random_hex.h"

#include <sys/random.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

void SecureRandomBytes(void* buf, size_t n) {
  auto* bytes = static_cast<unsigned char*>(buf);
  for (size_t got = 0; got < n;) {
    const ssize_t r = getrandom(bytes + got, n - got, 0);
    if (r > 0) got += static_cast<size_t>(r);
    else if (errno != EINTR) std::abort();  // (not a token or key from anything weaker)
  }
}

uint64_t SecureRandom63() {
  uint64_t v = 0;
  SecureRandomBytes(&v, sizeof(v));
  return v & uint64_t{INT64_MAX};
}

}  // namespace rota
