// Random identifiers from the system's entropy (std::random_device):
// idempotency keys, agent and lease-holder instances; and, for what must
// not be guessed (API tokens, keys), bytes from the kernel's CSPRNG.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace rota {

// `digits` random lowercase hex digits (a multiple of 8).
std::string RandomHex(int digits);

// Fills `buf` with `n` bytes from getrandom(2) (the kernel's CSPRNG: there
// since Linux 3.17; aborts if it fails otherwise than by a signal).
void SecureRandomBytes(void* buf, size_t n);
// A random value of 63 bits from SecureRandomBytes (0..INT64_MAX: a store
// keeps it as a signed 64-bit integer).
uint64_t SecureRandom63();

}  // namespace rota
