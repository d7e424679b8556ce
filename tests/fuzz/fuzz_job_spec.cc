// Fuzz target: job specs as a client would send them (YAML or JSON).
// Whatever the input, parsing returns a value or an error; it never crashes.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "api/yaml_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto spec = rota::api::ParseJobSpec(text, "fuzz");
  if (spec.ok()) {
    // A parsed spec is valid by construction.
    if (!rota::ValidateJobSpec(*spec).ok()) __builtin_trap();
  }
  auto list = rota::api::ParseJobList(text, "fuzz");
  (void)list;
  return 0;
}
