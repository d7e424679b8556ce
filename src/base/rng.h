// Rng: the injected source of randomness, deterministic for a given seed on
// every platform (xoshiro256** seeded through splitmix64; no std::
// distributions, whose output differs between standard libraries).
//
// Thread-safety: none; one owner.
//
// Example:
//   Rng rng(42);
//   uint64_t die = rng.Uniform(6);  // 0..5
#pragma once

#include <cstdint>

namespace rota {

class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, n). REQUIRES: n > 0.
  uint64_t Uniform(uint64_t n);
  // Uniform in [0, 1) with 53 bits.
  double UniformDouble();
  // Standard normal (Box-Muller; two uniform draws).
  double Normal();

 private:
  uint64_t s_[4];
};

}  // namespace rota
