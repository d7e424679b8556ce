// Integer quantities and their text forms. Accounting never uses floating
// point: CPU is counted in milli-CPUs, memory in MiB, time in microseconds.
//
//   ParseMilliCpu("32") == 32000, ParseMilliCpu("500m") == 500
//   ParseMemoryMiB("256Gi") == 262144, ParseMemoryMiB("1Ti") == 1048576
//   ParseDuration("48h") == 172800000000 (microseconds)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace rota {

using MilliCpu = int64_t;
using MemoryMiB = int64_t;
// Microseconds; a point in time is microseconds since the Unix epoch.
using Duration = int64_t;
using TimePoint = int64_t;

inline constexpr Duration kMicrosPerSecond = 1'000'000;

// "2", "0.5", "1500m". Exact: "0.0005" is an error (below a milli-CPU).
StatusOr<MilliCpu> ParseMilliCpu(std::string_view text);
// "512Mi", "80Gi", "1Ti", "1024" (bytes are not accepted: must be whole MiB;
// a bare number means MiB). Also G/M/T (decimal), rounded up to whole MiB.
StatusOr<MemoryMiB> ParseMemoryMiB(std::string_view text);
// "90s", "15m", "48h", "2d", "1h30m", "500ms"; a bare number means seconds.
StatusOr<Duration> ParseDuration(std::string_view text);

// "2026-11-29T12:00:00Z" (also with fractional seconds or a +hh:mm offset)
// to microseconds since the epoch, and back (UTC, milliseconds).
StatusOr<TimePoint> ParseTime(std::string_view text);
std::string FormatTime(TimePoint t);

// True if `s` is well-formed UTF-8 (JSON on the wire and in the journal needs it).
bool IsValidUtf8(std::string_view s);

std::string FormatMilliCpu(MilliCpu v);     // "32", "0.5"
std::string FormatMemoryMiB(MemoryMiB v);   // "80Gi", "512Mi"
std::string FormatDuration(Duration v);     // "48h", "1h30m", "90s"
// A span as people read it, rounded down to two units: "45s", "19m58s",
// "5h20m", "2d3h" (negative: "0s"). For times shown to users (reasons,
// ages); FormatDuration is exact, for values users wrote.
std::string FormatSpan(Duration v);

}  // namespace rota
