// Registration of the plugins shipped with rota, one folder each.
#pragma once

#include "sched/registry.h"

namespace rota::sched {

void RegisterPriority(Registry& r);     // JobOrder: higher priority first
void RegisterFifo(Registry& r);         // JobOrder: earlier submission first
void RegisterResourceFit(Registry& r);  // Filter: GPUs, model, GPU memory, CPU, memory, selector, drain
void RegisterGang(Registry& r);         // JobReady: all replicas or nothing
void RegisterTopology(Registry& r);     // Placer: smallest topology domain that fits
void RegisterScan(Registry& r);         // Placer: scan every node, per-replica greedy (baseline)
void RegisterBinpack(Registry& r);      // Score: fill nodes up
void RegisterSpread(Registry& r);       // Score: keep nodes empty

inline void RegisterBuiltinPlugins(Registry& r) {
  RegisterPriority(r);
  RegisterFifo(r);
  RegisterResourceFit(r);
  RegisterGang(r);
  RegisterTopology(r);
  RegisterScan(r);
  RegisterBinpack(r);
  RegisterSpread(r);
}

}  // namespace rota::sched
