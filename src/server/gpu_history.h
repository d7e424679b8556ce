// GpuHistoryRecorder: folds the agents' reports into each GPU's history
// (core/gpu_history.h): a report's window (its 1 Hz samples since the last
// report) goes into the minute it arrived in; a minute that ends becomes a
// point of the GPU's hour block, and the hour so far a point of its day
// block. Take hands the blocks that changed to the writer; Warm reads the
// current hour's and day's blocks back after a restart, so they are extended
// rather than overwritten.
//
// Memory: two blocks per GPU (about 2 KiB); 10,000 GPUs hold 20 MiB.
//
// Thread-safety: thread-safe (its own lock).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/agent_protocol.h"
#include "core/gpu_history.h"

namespace rota::server {

class GpuHistoryRecorder {
 public:
  // Folds `gpus` (node `node`'s report at `now`; the node has `count`
  // GPUs): GPUs whose window holds no samples, or that the node does not
  // have, are skipped.
  void Fold(const std::string& node, int32_t count, const std::vector<api::GpuTelemetry>& gpus, TimePoint now);
  // The blocks that changed since the last Take, with each GPU's minutes
  // that ended by `now` in them (`all`: the minutes under way too, at a
  // stop); finished hours and days come once more.
  std::vector<GpuHistoryBlock> Take(TimePoint now, bool all = false);
  // The stored blocks of the hour and day holding `now`, to go on from (a
  // minute written before a restart goes on from its point).
  void Warm(const std::vector<GpuHistoryBlock>& blocks, TimePoint now);
  // `node`'s blocks of `step_s` held here (the current hour or day, with
  // the minute under way as a point), for reads that cannot wait for Take.
  std::vector<GpuHistoryBlock> Current(const std::string& node, int32_t step_s, TimePoint now) const;
  size_t gpus() const;

 private:
  struct Minute {
    TimePoint start = -1;  // none open
    int64_t samples = 0, activity_sum = 0, activity_samples = 0;
    MemoryMiB memory_peak = 0;
    int64_t energy_mj = 0;
    GpuPoint Point() const;
  };
  struct Gpu {
    Minute open;
    GpuHistoryBlock minutes, hours;
    bool dirty = false;
  };
  // Closes `g`'s open minute into its blocks (finished blocks go to done_).
  void CloseMinute(Gpu& g);
  // Opens the minute at `minute` (not before `g`'s hour block), going on
  // from its point if one was written before a restart.
  static void OpenMinute(Gpu& g, TimePoint minute);
  // Puts `point` at `minute` in `g`'s blocks, moving to new blocks (the
  // finished ones to `finished`) when it lies past them.
  static void Place(Gpu& g, const GpuPoint& point, TimePoint minute, std::vector<GpuHistoryBlock>* finished);
  static GpuHistoryBlock Block(const std::string& node, int32_t gpu, int32_t step_s, TimePoint t);

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int32_t>, Gpu> gpus_;  // by node, GPU index
  std::vector<GpuHistoryBlock> done_;                     // finished, not taken yet
};

}  // namespace rota::server
