// A two-level bitset over node positions: set, clear, and "first set bit in
// [from, end)" in a few word operations, with a summary word per 64 words so
// sparse sets are skipped 4096 positions at a time. No allocation after Resize.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace rota::sched {

class TwoLevelBitset {
 public:
  void Resize(uint32_t n) {
    n_ = n;
    words_.assign((n + 63) / 64, 0);
    summary_.assign((words_.size() + 63) / 64, 0);
  }
  void ClearAll() {
    std::fill(words_.begin(), words_.end(), 0);
    std::fill(summary_.begin(), summary_.end(), 0);
  }
  void Set(uint32_t i) {
    words_[i >> 6] |= 1ULL << (i & 63);
    summary_[i >> 12] |= 1ULL << ((i >> 6) & 63);
  }
  void Clear(uint32_t i) {
    uint64_t& w = words_[i >> 6];
    w &= ~(1ULL << (i & 63));
    if (w == 0) summary_[i >> 12] &= ~(1ULL << ((i >> 6) & 63));
  }
  bool Test(uint32_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }

  // First set position in [from, end), or `end` if none.
  uint32_t FindNext(uint32_t from, uint32_t end) const {
    if (from >= end) return end;
    uint32_t wi = from >> 6;
    uint64_t w = words_[wi] & (~0ULL << (from & 63));
    if (w != 0) return Clamp(wi * 64 + std::countr_zero(w), end);
    // Next non-empty word through the summary.
    uint32_t next_word = wi + 1;
    const uint32_t end_word = (end + 63) >> 6;
    while (next_word < end_word) {
      uint32_t si = next_word >> 6;
      uint64_t s = summary_[si] & (~0ULL << (next_word & 63));
      if (s != 0) {
        uint32_t word = si * 64 + std::countr_zero(s);
        if (word >= end_word) return end;
        return Clamp(word * 64 + std::countr_zero(words_[word]), end);
      }
      next_word = (si + 1) * 64;
    }
    return end;
  }

 private:
  static uint32_t Clamp(uint32_t v, uint32_t end) { return v < end ? v : end; }
  uint32_t n_ = 0;
  std::vector<uint64_t> words_;
  std::vector<uint64_t> summary_;
};

}  // namespace rota::sched
