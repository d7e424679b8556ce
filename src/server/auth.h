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
#include <vector>

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
  std::string token_id;  // which token it came with ("" for internal callers)
};

// A token's public name: the first 12 hex digits of its hash (the hash of
// 160 random bits says nothing about the token).
std::string TokenId(const TokenRecord& record);

std::string Sha256Hex(std::string_view data);
// HMAC-SHA256 of `data` under `key`: its first 8 bytes, little-endian.
uint64_t HmacSha256Prefix(std::string_view key, std::string_view data);
// "rota_" + 40 random hex digits from the kernel's CSPRNG.
std::string NewToken();

class Auth {
 public:
  // Registers a known token record (from the store), or replaces it.
  void Add(const TokenRecord& record);
  // Unauthenticated if the header is missing, malformed or unknown, or the
  // token is revoked or expired at `now` (0 = do not check expiry).
  StatusOr<Principal> Authenticate(std::string_view authorization_header, TimePoint now = 0) const;
  size_t size() const;
  std::vector<TokenRecord> List() const;
  // The record whose TokenId is `id`; NotFound otherwise.
  StatusOr<TokenRecord> Find(const std::string& id) const;
  // True if a user or admin token (live or not) was ever issued to `user`:
  // the name belongs to that user record.
  bool UserExists(const std::string& user) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, TokenRecord> by_hash_;
};

}  // namespace rota::server
