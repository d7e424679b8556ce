// Test helpers shared by the tests of the layers above core.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

#include "core/node.h"

namespace rota::testing {

// A node of `gpus` A100 80GB GPUs (64 CPUs, 512Gi), the MIG-capable model the tests use.
inline NodeSpec A100Node(std::string name, int32_t gpus) {
  NodeSpec n;
  n.name = std::move(name);
  n.gpus = gpus;
  n.gpu_model = "A100";
  n.gpu_memory = 80 * 1024;
  n.cpu = 64000;
  n.memory = 512 * 1024;
  return n;
}

// A fresh directory under /tmp, removed with everything in it at the end of
// its scope (an assertion that returns early included).
class TempDir {
 public:
  explicit TempDir(std::string prefix = "rota-test") {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace rota::testing
