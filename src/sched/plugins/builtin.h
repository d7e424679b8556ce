// Registration of the plugins shipped with rota, one folder each.
#pragma once

#include "sched/registry.h"

namespace rota::sched {

void RegisterPriority(Registry& r);     // JobOrder: higher priority first
void RegisterFifo(Registry& r);         // JobOrder: earlier submission first
void RegisterAttainedOrders(Registry& r);  // JobOrder (preemptive): las, tiresias, smallest-first
void RegisterLearned(Registry& r);      // JobOrder (preemptive, ranks): the Gittins index learned from the history
void RegisterResourceFit(Registry& r);  // Filter: GPUs, model, GPU memory, CPU, memory, selector, drain
void RegisterGang(Registry& r);         // JobReady: all replicas or nothing
void RegisterTopology(Registry& r);     // Placer: smallest topology domain that fits
void RegisterScan(Registry& r);         // Placer: scan every node, per-replica greedy (baseline)
void RegisterBinpack(Registry& r);      // Score: fill nodes up
void RegisterSpread(Registry& r);       // Score: keep nodes empty
void RegisterFgd(Registry& r);          // SharePlacer: least growth of fragmentation (the default)
void RegisterBestFit(Registry& r);      // SharePlacer: the GPU left fullest
void RegisterDrf(Registry& r);          // QueueOrder: lowest weighted dominant share (the default)
void RegisterQuota(Registry& r);        // Admit: queue quotas, borrowing and lending limits (the default)
void RegisterLostWork(Registry& r);     // VictimOrder: GPU-time since the last checkpoint (the default)
void RegisterAllocate(Registry& r);     // action: the pending jobs in order
void RegisterElastic(Registry& r);      // actions: shrink-elastic (make room), grow-elastic
void RegisterPreempt(Registry& r);      // action (blocked): evict cheaper gangs
void RegisterReserve(Registry& r);      // action (blocked): hold GPUs for the first blocked jobs

inline void RegisterBuiltinPlugins(Registry& r) {
  RegisterPriority(r);
  RegisterFifo(r);
  RegisterAttainedOrders(r);
  RegisterLearned(r);
  RegisterResourceFit(r);
  RegisterGang(r);
  RegisterTopology(r);
  RegisterScan(r);
  RegisterBinpack(r);
  RegisterSpread(r);
  RegisterFgd(r);
  RegisterBestFit(r);
  RegisterDrf(r);
  RegisterQuota(r);
  RegisterLostWork(r);
  RegisterAllocate(r);
  RegisterElastic(r);
  RegisterPreempt(r);
  RegisterReserve(r);
}

}  // namespace rota::sched
