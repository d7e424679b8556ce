// Accounting storage and report cost (issue 21): N usage records (default
// 100,000: a busy cluster's month of ended attempts) spread over a week,
// written to the SQLite store in batches as the controller writes them;
// then the bytes on disk, and the 7-day report's time: the store's read of
// the records and the report built from them, beside a baseline in the same
// run (the same read of the records alone, without the report).
//
//   build/bench/usage_bench [RECORDS]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/rng.h"
#include "server/report.h"
#include "store/sqlite_store.h"

using namespace rota;

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 100'000;
  char tmpl[] = "/tmp/rota-usage-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto store = SqliteStore::Open(dir + "/rota.db");
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    return 1;
  }
  constexpr TimePoint kStart = 1'800'000'000LL * kMicrosPerSecond;
  constexpr Duration kWeek = 7LL * 24 * 3600 * kMicrosPerSecond;
  Rng rng(21);
  std::vector<UsageRecord> batch;
  const auto write_start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    UsageRecord r;
    r.job = JobId(static_cast<uint64_t>(i + 1));
    r.name = "job" + std::to_string(i % 5000);
    r.user = "user" + std::to_string(i % 200);
    r.queue = "team" + std::to_string(i % 12);
    r.end = "succeeded";
    r.ended_at = kStart + static_cast<TimePoint>(rng.Uniform(static_cast<uint64_t>(kWeek)));
    r.started_at = r.ended_at - static_cast<Duration>(600 + rng.Uniform(7200)) * kMicrosPerSecond;
    r.gpu_model = "H100";
    r.gpu_memory = 81920;
    r.gpus = 1 << rng.Uniform(4);
    r.replicas = 1;
    r.cpu = 8000;
    r.memory = 65536;
    for (int b = 0; b < 8; ++b) r.activity.Add(static_cast<int32_t>(rng.Uniform(101)), static_cast<int64_t>(rng.Uniform(1000)));
    r.gpu_memory_peak = static_cast<MemoryMiB>(rng.Uniform(81920));
    r.energy_mj = static_cast<int64_t>(rng.Uniform(1'000'000'000));
    r.cpu_used_us = static_cast<int64_t>(rng.Uniform(1'000'000'000));
    r.memory_peak = static_cast<MemoryMiB>(rng.Uniform(65536));
    batch.push_back(std::move(r));
    if (batch.size() == 100 || i + 1 == n) {
      if (!(*store)->PutUsage(batch).ok()) return 1;
      batch.clear();
    }
  }
  const double write_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - write_start).count();
  std::error_code ec;
  int64_t bytes = 0;
  for (const char* suffix : {".usage", ".usage-wal"}) {
    const auto size = std::filesystem::file_size(dir + "/rota.db" + suffix, ec);
    if (!ec) bytes += static_cast<int64_t>(size);
  }
  auto time = [](auto&& fn) {
    const auto t = std::chrono::steady_clock::now();
    fn();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  size_t read = 0;
  const double read_s = time([&] { read = (*store)->Usage(kStart, kStart + kWeek)->size(); });
  nlohmann::ordered_json report;
  const double report_s = time([&] {
    auto records = (*store)->Usage(kStart, kStart + kWeek);
    report = server::BuildReport(*records, kStart, kStart + kWeek, kStart + kWeek, {});
  });
  const size_t families = report["families_with_recommendation"].get<size_t>();
  // A job's report (rota describe, GET /v1/jobs/ID): before, a month of
  // every tenant's records read for each (the baseline, as it did it);
  // now the job's own (Store::UsageOfJob) and its family's last attempts,
  // which the controller keeps in memory.
  const JobId one(static_cast<uint64_t>(n / 2));
  const double month_s = time([&] {
    auto records = (*store)->Usage(kStart, kStart + kWeek);
    report = server::BuildJobReport(*records, one, kStart + kWeek, {});
  });
  const double own_s = time([&] {
    auto records = (*store)->UsageOfJob(one);
    report = server::BuildJobReport(*records, one, kStart + kWeek, {});
  });
  std::printf("usage records: %lld written in %.2f s (batches of 100); %lld bytes on disk (%.0f bytes each)\n",
              static_cast<long long>(n), write_s, static_cast<long long>(bytes), static_cast<double>(bytes) / n);
  std::printf("7-day report over %zu records: %.3f s (the store's read alone, baseline: %.3f s; report/read %.2f); "
              "%zu families with a recommendation\n",
              read, report_s, read_s, report_s / read_s, families);
  std::printf("one job's report: %.6f s from its own records, against %.3f s reading every record (baseline): %.0fx\n",
              own_s, month_s, month_s / own_s);
  std::filesystem::remove_all(dir);
  return 0;
}
