// Helpers for the simulator's tests: the shared traces (../shared/traces,
// beside the checkout; tests skip when it is absent).
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace rota::sim {

inline std::string SharedTraces() {
  const char* src = std::getenv("ROTA_SOURCE_DIR");
  return std::string(src != nullptr ? src : ".") + "/../shared/traces/";
}

inline bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

}  // namespace rota::sim
