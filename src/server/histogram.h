// A Prometheus histogram kept as a count per bucket (the server's cycle
// latency, the watch hub's push delay): which bucket a value counts in, and
// the histogram's samples in the text format.
#pragma once

#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

namespace rota::server {

// The bucket `value` counts in: the first of `bounds` (ascending) it does
// not exceed (Prometheus' `le`), or bounds.size() past the last (+Inf).
inline size_t BucketOf(std::span<const double> bounds, double value) {
  size_t b = 0;
  while (b < bounds.size() && value > bounds[b]) ++b;
  return b;
}

// Appends histogram `name`'s samples (its HELP and TYPE lines are the
// caller's): a cumulative `_bucket` per bound and +Inf, `_sum` with
// `sum_decimals` decimals and `_count`. `counts` holds one count per bucket
// (BucketOf's index); one it lacks counts 0.
inline void AppendHistogram(std::string& out, std::string_view name, std::span<const double> bounds,
                            std::span<const uint64_t> counts, double sum, int sum_decimals) {
  const auto count = [&](size_t b) { return b < counts.size() ? counts[b] : 0; };
  const auto bucket = [&](std::string_view le, uint64_t n) {
    out.append(name).append("_bucket{le=\"").append(le).append("\"} ").append(std::to_string(n)).append("\n");
  };
  uint64_t below = 0;
  char text[64];
  for (size_t b = 0; b < bounds.size(); ++b) {
    below += count(b);
    std::snprintf(text, sizeof text, "%g", bounds[b]);
    bucket(text, below);
  }
  below += count(bounds.size());
  bucket("+Inf", below);
  std::snprintf(text, sizeof text, "%.*f", sum_decimals, sum);
  out.append(name).append("_sum ").append(text).append("\n");
  out.append(name).append("_count ").append(std::to_string(below)).append("\n");
}

}  // namespace rota::server
