// Table: left-aligned text columns for the CLI's human output.
#pragma once

#include <string>
#include <vector>

namespace rota::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns separated by two spaces; the last column is not padded.
  std::string Render() const {
    std::vector<size_t> width;
    for (const auto& r : rows_) {
      if (width.size() < r.size()) width.resize(r.size(), 0);
      for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    std::string out;
    for (const auto& r : rows_) {
      for (size_t i = 0; i < r.size(); ++i) {
        out += r[i];
        if (i + 1 < r.size()) out += std::string(width[i] - r[i].size() + 2, ' ');
      }
      out += "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace rota::cli
