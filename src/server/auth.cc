#include "server/auth.h"

#include "base/random_hex.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <cstdlib>

namespace rota::server {

std::string_view RoleName(Role r) {
  switch (r) {
    case Role::kAdmin: return "admin";
    case Role::kUser: return "user";
    case Role::kAgent: return "agent";
  }
  return "user";
}

StatusOr<Role> ParseRole(std::string_view s) {
  if (s == "admin") return Role::kAdmin;
  if (s == "user") return Role::kUser;
  if (s == "agent") return Role::kAgent;
  return InvalidArgumentError("role: must be admin, user or agent, got '" + std::string(s) + "'");
}

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

uint64_t HmacSha256Prefix(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  // (It fails only without memory or a SHA-256: then no answer is one that
  // replicas and heartbeats agree on.)
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &len) == nullptr ||
      len < 8) {
    std::abort();
  }
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | mac[i];
  return v;
}

std::string NewToken() {
  unsigned char bytes[20];
  SecureRandomBytes(bytes, sizeof(bytes));
  static const char* kHex = "0123456789abcdef";
  std::string out = "rota_";
  for (unsigned char b : bytes) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

void Auth::Add(const TokenRecord& record) {
  std::lock_guard<std::mutex> lock(mu_);
  by_hash_[record.hash] = record;
}

std::string TokenId(const TokenRecord& record) { return record.hash.substr(0, 12); }

std::vector<TokenRecord> Auth::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<TokenRecord> out;
  for (const auto& [hash, r] : by_hash_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const TokenRecord& a, const TokenRecord& b) {
    return a.created_at != b.created_at ? a.created_at < b.created_at : a.hash < b.hash;
  });
  return out;
}

StatusOr<TokenRecord> Auth::Find(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id.size() == 12) {
    for (const auto& [hash, r] : by_hash_) {
      if (hash.compare(0, 12, id) == 0) return r;
    }
  }
  return NotFoundError("no token with id '" + id + "' (ids are the 12 characters rota token list shows)");
}

bool Auth::UserExists(const std::string& user) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [hash, r] : by_hash_) {
    if (r.user == user && r.role != "agent") return true;
  }
  return false;
}

size_t Auth::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return by_hash_.size();
}

StatusOr<Principal> Auth::Authenticate(std::string_view header, TimePoint now) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (header.empty()) return Status(StatusCode::kUnauthenticated, "missing Authorization: Bearer <token>");
  if (header.substr(0, kBearer.size()) != kBearer) {
    return Status(StatusCode::kUnauthenticated, "Authorization must be 'Bearer <token>'");
  }
  const std::string hash = Sha256Hex(header.substr(kBearer.size()));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return Status(StatusCode::kUnauthenticated, "unknown token");
  if (it->second.revoked) return Status(StatusCode::kUnauthenticated, "token " + TokenId(it->second) + " was revoked");
  if (now > 0 && it->second.expires_at > 0 && now >= it->second.expires_at) {
    return Status(StatusCode::kUnauthenticated, "token " + TokenId(it->second) + " expired at " + FormatTime(it->second.expires_at));
  }
  auto role = ParseRole(it->second.role);
  if (!role.ok()) return Status(StatusCode::kUnauthenticated, "token has a bad role");
  return Principal{it->second.user, *role, it->second.node, TokenId(it->second)};
}

}  // namespace rota::server
