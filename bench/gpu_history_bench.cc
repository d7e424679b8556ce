// Per-GPU history storage and cost (issue 21): a week of NODES x GPUS GPUs
// (default 1,250 x 8) at minute resolution in the SQLite store, with each
// day's hour points; the bytes on disk; the server's work for an hour of
// 10 s reports from all of them (the recorder's fold, and its 5-minute
// flush); and the reads an operator makes, each beside a baseline in the
// same run (the same rows read without decoding their points).
//
// The mix: 60% of GPUs busy (activity 40-100%, memory 20-79 GiB, 250-700 W),
// 25% idle (0%, 0 MiB, 55-70 W), 15% switching between the two every few
// hours.
//
//   build/bench/gpu_history_bench [NODES] [GPUS] [DAYS]
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/rng.h"
#include "server/gpu_history.h"
#include "store/sqlite_store.h"

using namespace rota;

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

struct Synth {
  Rng rng{21};
  // GPU `g`'s minute `m`: busy or not by its class, with noise.
  GpuPoint Minute(int64_t g, int64_t m) {
    const int64_t kind = g % 20;  // 0-11 busy, 12-16 idle, 17-19 switching
    bool busy = kind < 12;
    if (kind >= 17) busy = ((m / 60 + g) / 3) % 2 == 0;  // 3-hour spells
    GpuPoint p;
    p.samples = 60;
    if (busy) {
      p.activity = 40 + static_cast<int32_t>(rng.Uniform(61));
      p.memory_peak = 20'480 + (g * 977) % 60'000 + static_cast<int64_t>(rng.Uniform(512));
      p.energy_j = 60 * (250 + static_cast<int64_t>(rng.Uniform(451)));
    } else {
      p.activity = 0;
      p.energy_j = 60 * (55 + static_cast<int64_t>(rng.Uniform(16)));
    }
    return p;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t nodes = argc > 1 ? std::atoll(argv[1]) : 1250;
  const int32_t per_node = argc > 2 ? std::atoi(argv[2]) : 8;
  const int64_t days = argc > 3 ? std::atoll(argv[3]) : 7;
  const int64_t gpus = nodes * per_node;
  char tmpl[] = "/tmp/rota-history-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto opened = SqliteStore::Open(dir + "/rota.db");
  if (!opened.ok()) {
    std::fprintf(stderr, "%s\n", opened.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<SqliteStore> store = std::move(opened).value();
  constexpr TimePoint kStart = 1'800'057'600LL * kMicrosPerSecond;  // a UTC midnight
  constexpr TimePoint kMinute = 60 * kMicrosPerSecond;
  Synth synth;

  // 1. The week, block by block as the recorder finishes them: each hour's
  // minute blocks for every GPU, and each day's hour blocks at its end.
  const auto write_start = std::chrono::steady_clock::now();
  int64_t points = 0, blocks_written = 0, encoded_bytes = 0, day_bytes = 0, day_blocks = 0;
  std::vector<GpuHistoryBlock> day(static_cast<size_t>(gpus));
  for (int64_t h = 0; h < days * 24; ++h) {
    std::vector<GpuHistoryBlock> batch;
    batch.reserve(static_cast<size_t>(gpus));
    for (int64_t g = 0; g < gpus; ++g) {
      GpuHistoryBlock b;
      b.node = "gpu-" + std::to_string(g / per_node);
      b.gpu = static_cast<int32_t>(g % per_node);
      b.start = kStart + h * 60 * kMinute;
      b.points.resize(60);
      for (int64_t m = 0; m < 60; ++m) b.points[static_cast<size_t>(m)] = synth.Minute(g, h * 60 + m);
      points += 60;
      encoded_bytes += static_cast<int64_t>(EncodeGpuPoints(b.points).size());
      GpuHistoryBlock& d = day[static_cast<size_t>(g)];
      if (h % 24 == 0) {
        d = GpuHistoryBlock{.node = b.node, .gpu = b.gpu, .step_s = GpuHistoryBlock::kHour, .start = b.start};
        d.points.resize(24);
      }
      d.points[static_cast<size_t>(h % 24)] = Rollup(b.points);
      batch.push_back(std::move(b));
    }
    if (h % 24 == 23) {
      for (const GpuHistoryBlock& d : day) {
        const auto size = static_cast<int64_t>(EncodeGpuPoints(d.points).size());
        encoded_bytes += size;
        day_bytes += size;
        ++day_blocks;
      }
      batch.insert(batch.end(), day.begin(), day.end());
    }
    blocks_written += static_cast<int64_t>(batch.size());
    for (size_t i = 0; i < batch.size(); i += 5000) {
      std::vector<GpuHistoryBlock> part(batch.begin() + static_cast<std::ptrdiff_t>(i),
                                        batch.begin() + static_cast<std::ptrdiff_t>(std::min(batch.size(), i + 5000)));
      if (Status s = store->PutGpuHistory(part); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
    }
  }
  const double write_s = Since(write_start);
  store.reset();
  int64_t bytes = 0;
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    if (f.path().filename().string().rfind("rota.db.usage", 0) == 0) bytes += static_cast<int64_t>(f.file_size());
  }
  std::printf("gpu history: %lld GPUs x %lld days at 1 min: %lld points in %lld blocks written in %.1f s\n",
              static_cast<long long>(gpus), static_cast<long long>(days), static_cast<long long>(points),
              static_cast<long long>(blocks_written), write_s);
  // A year of day blocks: their points' bytes plus each row's share of
  // what the store adds beyond the points (keys, index, pages).
  const double row_overhead = static_cast<double>(bytes - encoded_bytes) / static_cast<double>(blocks_written);
  const double year = 365.0 * static_cast<double>(gpus) *
                      (static_cast<double>(day_bytes) / static_cast<double>(std::max<int64_t>(day_blocks, 1)) + row_overhead);
  std::printf("  on disk: %lld bytes (%.2f bytes a minute point; the points' own encoding %.2f; %.0f bytes a row "
              "beside them); a year of hour points for these GPUs: about %.0f bytes\n",
              static_cast<long long>(bytes), static_cast<double>(bytes) / static_cast<double>(points),
              static_cast<double>(encoded_bytes) / static_cast<double>(points), row_overhead, year);

  // 2. Reads: one node's week at minute resolution, the whole cluster's last
  // hour, beside the same rows read without decoding (sqlite3 directly).
  store = std::move(SqliteStore::Open(dir + "/rota.db")).value();
  const TimePoint end = kStart + days * 24 * 60 * kMinute;
  auto timed = [&](const char* what, const std::string& node, TimePoint since) {
    const auto t0 = std::chrono::steady_clock::now();
    auto got = store->GpuHistory(node, GpuHistoryBlock::kMinute, since, end);
    const double read_s = Since(t0);
    sqlite3* db = nullptr;
    sqlite3_open_v2((dir + "/rota.db.usage").c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
    sqlite3_stmt* st = nullptr;
    const std::string sql = node.empty() ? "SELECT node, gpu, start, points FROM gpu_history WHERE step = 60 AND start >= ?"
                                         : "SELECT node, gpu, start, points FROM gpu_history WHERE node = ? AND step = 60 "
                                           "AND start >= ?";
    const auto t1 = std::chrono::steady_clock::now();
    sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr);
    int arg = 1;
    if (!node.empty()) sqlite3_bind_text(st, arg++, node.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, arg, since);
    int64_t rows = 0, blob = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
      ++rows;
      blob += sqlite3_column_bytes(st, 3);
    }
    sqlite3_finalize(st);
    const double raw_s = Since(t1);
    sqlite3_close(db);
    std::printf("  %s: %zu blocks in %.3f s (the rows alone, baseline: %.3f s, %lld rows; ratio %.2f)\n", what,
                got.ok() ? got->size() : 0, read_s, raw_s, static_cast<long long>(rows),
                raw_s > 0 ? read_s / raw_s : 0.0);
  };
  timed("one node's week", "gpu-7", end - days * 24 * 60 * kMinute);
  timed("every GPU's last hour", "", end - 60 * kMinute);

  // 3. The server's work for an hour of 10 s reports from every GPU.
  server::GpuHistoryRecorder recorder;
  std::vector<std::vector<api::GpuTelemetry>> reports(static_cast<size_t>(nodes));
  double fold_s = 0, take_s = 0;
  size_t taken = 0;
  for (int64_t s = 10; s <= 3600; s += 10) {
    const TimePoint now = end + s * kMicrosPerSecond;
    for (int64_t n = 0; n < nodes; ++n) {
      std::vector<api::GpuTelemetry>& r = reports[static_cast<size_t>(n)];
      r.resize(static_cast<size_t>(per_node));
      for (int32_t i = 0; i < per_node; ++i) {
        const GpuPoint p = synth.Minute(n * per_node + i, s / 60);
        api::GpuTelemetry& t = r[static_cast<size_t>(i)];
        t.index = i;
        t.samples = 10;
        t.activity.assign(ActivityHistogram::kBuckets, 0);
        t.activity[static_cast<size_t>(ActivityHistogram::Bucket(p.activity))] = 10;
        t.activity_sum = int64_t{p.activity} * 10;
        t.memory_peak = p.memory_peak;
        t.energy_mj = p.energy_j * 1000 / 6;
      }
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t n = 0; n < nodes; ++n) recorder.Fold("gpu-" + std::to_string(n), per_node, reports[static_cast<size_t>(n)], now);
    fold_s += Since(t0);
    if (s % 300 == 0) {
      const auto t1 = std::chrono::steady_clock::now();
      std::vector<GpuHistoryBlock> blocks = recorder.Take(now);
      taken = blocks.size();
      if (Status st = store->PutGpuHistory(blocks); !st.ok()) std::fprintf(stderr, "%s\n", st.ToString().c_str());
      take_s += Since(t1);
    }
  }
  std::printf("  an hour of 10 s reports from %lld nodes: folding took %.2f s (%.2f us a report), "
              "12 flushes of %zu blocks %.2f s: %.3f%% of a core\n",
              static_cast<long long>(nodes), fold_s, fold_s * 1e6 / (360.0 * static_cast<double>(nodes)), taken, take_s,
              100.0 * (fold_s + take_s) / 3600.0);
  store.reset();
  std::filesystem::remove_all(dir);
  return 0;
}
