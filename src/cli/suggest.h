// DidYouMean: the closest of `known` to a mistyped word, for "unknown
// command 'comand'; did you mean 'command'?" (Damerau-Levenshtein distance
// with adjacent swaps; within 2 edits, or a third of the word).
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

namespace rota::cli {

inline size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] != b[j - 1])});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// "; did you mean 'x'?" or "" when nothing is close.
inline std::string DidYouMean(std::string_view word, const std::vector<std::string>& known) {
  const std::string* best = nullptr;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& k : known) {
    const size_t d = EditDistance(word, k);
    if (d < best_d) {
      best_d = d;
      best = &k;
    }
  }
  return best == nullptr ? "" : "; did you mean '" + *best + "'?";
}

}  // namespace rota::cli
