// Table: left-aligned text columns for the CLI's human output.
#pragma once

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

namespace rota::cli {

// One CSV cell (RFC 4180: quoted where it holds ',', '"', CR or LF). A cell a
// spreadsheet would run as a formula (=, +, -, @, tab, CR first: a user name
// or an agent's GPU model is anyone's text) is kept text with a leading "'",
// as OWASP advises; numbers and a lone "-" are left as they are.
inline std::string CsvField(std::string v) {
  double number;
  const bool numeric = !v.empty() && std::from_chars(v.data(), v.data() + v.size(), number).ptr == v.data() + v.size();
  if (!v.empty() && std::string_view("=+-@\t\r").find(v[0]) != std::string_view::npos && !numeric && v != "-") {
    v = "'" + v;
  }
  if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
  std::string q = "\"";
  for (char ch : v) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

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
