// Auth: bearer tokens with roles. Tokens are random ("rota_" + 40 hex
// digits), shown once at creation and stored only as their SHA-256 hash.
//
// Roles: admin (everything), user (submit; see and cancel own jobs), agent
// (register and heartbeat for its own node only).
//
// Thread-safety: all methods are safe to call from any thread.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "store/store.h"

namespace rota::server {

enum class Role { kAdmin, kUser, kAgent };
std::string_view RoleName(Role r);
StatusOr<Role> ParseRole(std::string_view s);

struct Principal {
  std::string user;
  Role role = Role::kUser;
  std::string node;  // agents only
  bool admin() const { return role == Role::kAdmin; }
};

std::string Sha256Hex(std::string_view data);
// "rota_" + 40 random hex digits from the kernel's CSPRNG.
std::string NewToken();

class Auth {
 public:
  // Registers a known token record (from the store).
  void Add(const TokenRecord& record);
  // Unauthenticated if the header is missing, malformed or unknown.
  StatusOr<Principal> Authenticate(std::string_view authorization_header) const;
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, TokenRecord> by_hash_;
};

}  // namespace rota::server
