#include "core/usage_record.h"

namespace rota {

int64_t ActivityHistogram::total() const {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  return n;
}

int32_t ActivityHistogram::Percentile(int32_t p) const {
  const int64_t n = total();
  if (n == 0) return -1;
  // The smallest bucket with at least p% of the samples at or below it.
  const int64_t want = (n * p + 99) / 100;
  int64_t seen = 0;
  for (int b = 0; b < kBuckets; ++b) {
    seen += counts[b];
    if (seen >= want && seen > 0) return b == kBuckets - 1 ? 100 : (b + 1) * 5;
  }
  return 100;
}

int32_t ActivityHistogram::Mean() const {
  const int64_t n = total();
  if (n == 0) return -1;
  int64_t sum = 0;  // in tenths of a percent: bucket middles 2.5, 7.5, ..., and 100
  for (int b = 0; b < kBuckets; ++b) sum += counts[b] * (b == kBuckets - 1 ? 1000 : b * 50 + 25);
  return static_cast<int32_t>((sum / n + 5) / 10);
}

}  // namespace rota
