// PlaceContext: what the framework hands a placer for one gang. It combines
// the profile's filters (AND) and scores (weighted sum) over the workspace's
// indexes, and records bindings in the gang's Txn.
//
// Thread-safety: one owner (the cycle).
#pragma once

#include <cstdint>
#include <vector>

#include "sched/registry.h"
#include "sched/workspace.h"

namespace rota::sched {

class PlaceContext {
 public:
  PlaceContext(const Profile* profile, Workspace* ws, Txn* txn) : profile_(profile), ws_(ws), txn_(txn) {}

  // Call at the start of every cycle, after Workspace::Reset.
  void NewCycle();

  Workspace& workspace() { return *ws_; }
  const Topology& topology() const { return ws_->topology(); }
  const Profile& profile() const { return *profile_; }
  Txn& txn() { return *txn_; }

  // Every filter passes for one replica of `task` on `pos`, now.
  bool Fits(const JobRequest& job, const TaskRequest& task, uint32_t pos) const;

  // The best position in [begin, end) for one replica of `task`: the highest
  // weighted score among fitting nodes, ties to fewer free GPUs, then node
  // class, then lower position. Returns `end` if no node fits.
  uint32_t SelectNode(const JobRequest& job, const TaskRequest& task, uint32_t begin, uint32_t end);

  // The same choice by looking at every node: the baseline the indexed
  // search is measured and tested against.
  uint32_t SelectNodeByScan(const JobRequest& job, const TaskRequest& task, uint32_t begin, uint32_t end) const;

  // Binds replica `replica` of `task` on `pos` (GPUs chosen NVLink-island
  // first) in the Txn. REQUIRES: Fits(job, task, pos).
  void Bind(const TaskRequest& task, uint32_t replica, uint32_t pos);

  // Scratch space for placers (reused; no allocation at steady state).
  std::vector<std::pair<int64_t, int32_t>>& scratch() { return scratch_; }

  // Whether each node could ever hold a replica of each of a request's task
  // groups (no filter says kNever): kept by one job's explanation, which
  // reads it up to four times a node (reason.cc; the allocations do not
  // change meanwhile). `job` and `tasks` name the request it was made for.
  struct StaticFits {
    static constexpr uint8_t kFits = 0xff;  // else the Shortfall of the filter that said kNever
    const JobRecord* job = nullptr;
    const TaskRequest* tasks = nullptr;
    size_t count = 0;                         // task groups
    std::vector<std::vector<uint8_t>> found;  // per task group, per node; empty: not yet
  };
  StaticFits& static_fits() { return static_fits_; }

 private:
  struct BucketRef {
    int32_t cls;
    int32_t free;
  };
  struct BucketOrder {
    int16_t model;
    int32_t gpus;
    std::vector<BucketRef> order;
  };
  const std::vector<BucketRef>& OrderFor(const TaskRequest& task);

  const Profile* profile_;
  Workspace* ws_;
  Txn* txn_;
  std::vector<BucketOrder> orders_;
  std::vector<std::pair<int64_t, int32_t>> scratch_;
  StaticFits static_fits_;
};

}  // namespace rota::sched
