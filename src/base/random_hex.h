// Random identifiers from the system's entropy (std::random_device):
// idempotency keys, agent and lease-holder instances.
#pragma once

#include <string>

namespace rota {

// `digits` random lowercase hex digits (a multiple of 8).
std::string RandomHex(int digits);

}  // namespace rota
