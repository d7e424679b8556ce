#include "base/quantity.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace rota {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max() / 4;

// Parses "123.45" into a value scaled by 10^scale_digits. Rejects excess
// precision so that no rounding is ever silent.
StatusOr<int64_t> ParseScaledDecimal(std::string_view s, int scale_digits, std::string_view what) {
  if (s.empty()) return InvalidArgumentError(std::string("empty ") + std::string(what));
  int64_t whole = 0;
  size_t i = 0;
  bool digits = false;
  for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
    whole = whole * 10 + (s[i] - '0');
    digits = true;
    if (whole > kMax / 1000000) return OutOfRangeError(std::string(what) + " '" + std::string(s) + "' is too large");
  }
  int64_t frac = 0;
  int frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) {
      digits = true;
      if (s[i] != '0' && frac_digits >= scale_digits) {
        return InvalidArgumentError(std::string(what) + " '" + std::string(s) + "' has more precision than supported");
      }
      if (frac_digits < scale_digits) {
        frac = frac * 10 + (s[i] - '0');
        ++frac_digits;
      }
    }
  }
  if (!digits || i != s.size()) {
    return InvalidArgumentError("'" + std::string(s) + "' is not a valid " + std::string(what));
  }
  int64_t scale = 1;
  for (int k = 0; k < scale_digits; ++k) scale *= 10;
  for (int k = frac_digits; k < scale_digits; ++k) frac *= 10;
  return whole * scale + frac;
}

}  // namespace

StatusOr<MilliCpu> ParseMilliCpu(std::string_view text) {
  if (!text.empty() && text.back() == 'm') {
    auto v = ParseScaledDecimal(text.substr(0, text.size() - 1), 0, "CPU quantity");
    return v;
  }
  return ParseScaledDecimal(text, 3, "CPU quantity");
}

StatusOr<MemoryMiB> ParseMemoryMiB(std::string_view text) {
  // Units expressed in KiB so decimal units stay exact before rounding up.
  static constexpr struct {
    std::string_view suffix;
    int64_t kib;
  } kUnits[] = {{"Ki", 1},           {"Mi", 1024},           {"Gi", 1024 * 1024},
                {"Ti", 1024LL * 1024 * 1024}, {"K", 0},     {"M", 0}, {"G", 0}, {"T", 0}};
  std::string_view num = text;
  int64_t kib_per_unit = 1024;  // bare number: MiB
  int64_t decimal_bytes = 0;
  for (const auto& u : kUnits) {
    if (text.size() > u.suffix.size() && text.substr(text.size() - u.suffix.size()) == u.suffix) {
      num = text.substr(0, text.size() - u.suffix.size());
      if (u.kib != 0) {
        kib_per_unit = u.kib;
      } else {
        kib_per_unit = 0;
        decimal_bytes = u.suffix == "K" ? 1000 : u.suffix == "M" ? 1000000 : u.suffix == "G" ? 1000000000 : 1000000000000;
      }
      break;
    }
  }
  ROTA_ASSIGN_OR_RETURN(int64_t milli, ParseScaledDecimal(num, 3, "memory quantity"));
  if (kib_per_unit > 0) {
    // milli * kib / 1000 KiB, rounded up to whole MiB.
    if (milli > kMax / kib_per_unit) return OutOfRangeError("memory quantity '" + std::string(text) + "' is too large");
    int64_t kib_x1000 = milli * kib_per_unit;
    int64_t kib = (kib_x1000 + 999) / 1000;
    return (kib + 1023) / 1024;
  }
  // Decimal units: bytes = milli * decimal_bytes / 1000.
  int64_t bytes_per_milli = decimal_bytes / 1000;
  if (milli > kMax / bytes_per_milli) return OutOfRangeError("memory quantity '" + std::string(text) + "' is too large");
  int64_t bytes = milli * bytes_per_milli;
  return (bytes + (1 << 20) - 1) >> 20;
}

StatusOr<Duration> ParseDuration(std::string_view text) {
  if (text.empty()) return InvalidArgumentError("empty duration");
  bool all_digits = true;
  for (char c : text) all_digits = all_digits && std::isdigit(static_cast<unsigned char>(c));
  if (all_digits) {
    ROTA_ASSIGN_OR_RETURN(int64_t secs, ParseScaledDecimal(text, 0, "duration"));
    return secs * kMicrosPerSecond;
  }
  Duration total = 0;
  size_t i = 0;
  while (i < text.size()) {
    size_t start = i;
    while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
    if (start == i) return InvalidArgumentError("'" + std::string(text) + "' is not a valid duration (e.g. 90s, 15m, 48h)");
    std::string_view number = text.substr(start, i - start);
    size_t ustart = i;
    while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
    std::string_view unit = text.substr(ustart, i - ustart);
    int64_t micros;
    if (unit == "us") micros = 1;
    else if (unit == "ms") micros = 1000;
    else if (unit == "s") micros = kMicrosPerSecond;
    else if (unit == "m") micros = 60 * kMicrosPerSecond;
    else if (unit == "h") micros = 3600 * kMicrosPerSecond;
    else if (unit == "d") micros = 86400 * kMicrosPerSecond;
    else return InvalidArgumentError("'" + std::string(text) + "' has unknown duration unit '" + std::string(unit) + "' (use ms, s, m, h, d)");
    ROTA_ASSIGN_OR_RETURN(int64_t milli, ParseScaledDecimal(number, 3, "duration"));
    // (Each part, and their sum: a long run of large parts must not wrap.)
    if (milli > kMax / micros || total > kMax - milli * micros / 1000) {
      return OutOfRangeError("duration '" + std::string(text) + "' is too large");
    }
    total += milli * micros / 1000;
  }
  return total;
}

StatusOr<TimePoint> ParseTime(std::string_view text) {
  int y, mo, d, h, mi;
  double sec;
  char tail[16] = {};
  const std::string t(text);
  const int n = std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%lf%15s", &y, &mo, &d, &h, &mi, &sec, tail);
  // (!(sec >= 0 && sec < 61): a NaN second ("...:nan") is refused too.)
  if (n < 6 || mo < 1 || mo > 12 || d < 1 || d > 31 || h < 0 || h > 23 || mi < 0 || mi > 59 || !(sec >= 0 && sec < 61)) {
    return InvalidArgumentError("'" + t + "' is not a time like 2026-11-29T12:00:00Z");
  }
  int64_t offset_min = 0;
  const std::string z(tail);
  if (z == "Z" || z.empty()) {
    offset_min = 0;
  } else if ((z[0] == '+' || z[0] == '-') && z.size() == 6 && z[3] == ':' && std::isdigit(static_cast<unsigned char>(z[1])) &&
             std::isdigit(static_cast<unsigned char>(z[2])) && std::isdigit(static_cast<unsigned char>(z[4])) &&
             std::isdigit(static_cast<unsigned char>(z[5])) && z.substr(1, 2) <= "23" && z.substr(4, 2) <= "59") {
    offset_min = (std::atoi(z.substr(1, 2).c_str()) * 60 + std::atoi(z.substr(4, 2).c_str())) * (z[0] == '-' ? -1 : 1);
  } else {
    return InvalidArgumentError("'" + t + "' has a bad time zone (use Z or +hh:mm)");
  }
  // Days from the civil date (Howard Hinnant's algorithm).
  const int yy = y - (mo <= 2);
  const int era = (yy >= 0 ? yy : yy - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(yy - era * 400);
  const unsigned doy = (153 * static_cast<unsigned>(mo + (mo > 2 ? -3 : 9)) + 2) / 5 + static_cast<unsigned>(d) - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = static_cast<int64_t>(era) * 146097 + static_cast<int64_t>(doe) - 719468;
  const int64_t secs = days * 86400 + h * 3600 + mi * 60 - offset_min * 60;
  return secs * kMicrosPerSecond + static_cast<int64_t>(sec * kMicrosPerSecond + 0.5);
}

std::string FormatTime(TimePoint t) {
  int64_t secs = t / kMicrosPerSecond;
  int64_t days = secs / 86400;
  int64_t rem = secs % 86400;
  if (rem < 0) {
    rem += 86400;
    --days;
  }
  // Civil date from days (Howard Hinnant's algorithm).
  const int64_t z = days + 719468;
  const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t d = doy - (153 * mp + 2) / 5 + 1;
  const int64_t m = mp + (mp < 10 ? 3 : -9);
  const int64_t y = yoe + era * 400 + (m <= 2);
  char buf[96];  // room for any int64 year
  std::snprintf(buf, sizeof(buf), "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld.%03lldZ", static_cast<long long>(y),
                static_cast<long long>(m), static_cast<long long>(d), static_cast<long long>(rem / 3600),
                static_cast<long long>(rem % 3600 / 60), static_cast<long long>(rem % 60),
                static_cast<long long>((t % kMicrosPerSecond + kMicrosPerSecond) % kMicrosPerSecond / 1000));
  return buf;
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    for (size_t k = 1; k <= n; ++k) {
      if (i + k >= s.size()) return false;
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

std::string FormatMilliCpu(MilliCpu v) {
  std::string out = std::to_string(v / 1000);
  if (int64_t frac = v % 1000; frac != 0) {
    std::string f = std::to_string(frac + 1000).substr(1);
    while (!f.empty() && f.back() == '0') f.pop_back();
    out += "." + f;
  }
  return out;
}

std::string FormatMemoryMiB(MemoryMiB v) {
  if (v != 0 && v % (1024 * 1024) == 0) return std::to_string(v / (1024 * 1024)) + "Ti";
  if (v != 0 && v % 1024 == 0) return std::to_string(v / 1024) + "Gi";
  return std::to_string(v) + "Mi";
}

std::string FormatDuration(Duration v) {
  if (v == 0) return "0s";
  std::string out;
  Duration secs = v / kMicrosPerSecond;
  if (secs * kMicrosPerSecond != v) return std::to_string(v / 1000) + "ms";
  if (secs >= 3600) { out += std::to_string(secs / 3600) + "h"; secs %= 3600; }
  if (secs >= 60) { out += std::to_string(secs / 60) + "m"; secs %= 60; }
  if (secs > 0) out += std::to_string(secs) + "s";
  return out;
}

std::string FormatSpan(Duration v) {
  const Duration secs = std::max<Duration>(0, v) / kMicrosPerSecond;
  auto two = [](Duration major, const char* a, Duration minor, const char* b) {
    return std::to_string(major) + a + (minor > 0 ? std::to_string(minor) + b : "");
  };
  if (secs < 60) return std::to_string(secs) + "s";
  if (secs < 3600) return two(secs / 60, "m", secs % 60, "s");
  if (secs < 86400) return two(secs / 3600, "h", secs % 3600 / 60, "m");
  return two(secs / 86400, "d", secs % 86400 / 3600, "h");
}

}  // namespace rota
