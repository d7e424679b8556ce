#include "sched/share_place.h"

#include <algorithm>
#include <bit>

namespace rota::sched {
namespace {

// Best MIG instance for `task` on `pos`: (gpu, start, used slots after); false if none.
bool FindMigInstance(const Workspace& ws, const TaskRequest& task, uint32_t pos, int32_t* gpu, int32_t* start,
                     int32_t* fullness) {
  const NodeState& n = ws.node(pos);
  const int32_t profile = n.mig_geometry->ProfileIndex(*task.mig);
  bool found = false;
  for (uint64_t m = n.mig_mask & n.healthy_mask; m != 0; m &= m - 1) {
    const int32_t g = std::countr_zero(m);
    const Workspace::MigView use = ws.mig(pos, g);
    int32_t used_slots = 0;
    for (const MigInstance& i : *use.layout) {
      if ((use.used >> i.start) & 1) used_slots += std::popcount(MigSlotMask(*n.mig_geometry, i));
    }
    for (const MigInstance& i : *use.layout) {
      if (i.profile != profile || ((use.used >> i.start) & 1) != 0) continue;
      // Best fit: the GPU with the most of its slots in use.
      if (!found || used_slots > *fullness) {
        found = true;
        *fullness = used_slots;
        *gpu = g;
        *start = i.start;
      }
      break;
    }
  }
  return found;
}

// An idle MIG GPU on `pos` to re-partition for `task`, and its new layout.
bool PlanMigLayout(Session& s, const TaskRequest& task, uint32_t pos, int32_t* gpu, MigLayout* layout) {
  const NodeState& n = s.ws().node(pos);
  if (n.spec.mig_fixed) return false;  // the driver's layouts, used as they are
  const MigGeometry& geo = *n.mig_geometry;
  const int32_t profile = geo.ProfileIndex(*task.mig);
  const std::vector<const std::string*>& demand = s.MigDemand();
  // An idle MIG GPU, preferring one whose instances no pending job wants.
  int32_t best = -1, best_wanted = INT32_MAX;
  for (uint64_t m = n.mig_mask & n.healthy_mask; m != 0; m &= m - 1) {
    const int32_t g = std::countr_zero(m);
    const Workspace::MigView use = s.ws().mig(pos, g);
    if (use.used != 0) continue;
    int32_t wanted = 0;
    for (const MigInstance& i : *use.layout) {
      for (const std::string* d : demand) wanted += *d == geo.profiles[i.profile].name;
    }
    if (wanted < best_wanted) {
      best_wanted = wanted;
      best = g;
    }
  }
  if (best < 0) return false;
  // The request first, then the cycle's other pending demand, then the
  // largest profiles that still fit: no slot is left unpartitioned.
  layout->clear();
  uint8_t occupied = 0;
  auto add = [&](int32_t p) {
    const int32_t start = MigFirstFreeStart(geo, p, occupied);
    if (start < 0) return;
    layout->push_back({static_cast<int8_t>(p), static_cast<int8_t>(start)});
    occupied |= MigSlotMask(geo, layout->back());
  };
  add(profile);
  for (const std::string* d : demand) {
    if (const int32_t p = geo.ProfileIndex(*d); p >= 0) add(p);
  }
  for (int32_t p = static_cast<int32_t>(geo.profiles.size()) - 1; p >= 0; --p) {
    while (MigFirstFreeStart(geo, p, occupied) >= 0) add(p);
  }
  std::sort(layout->begin(), layout->end(), [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  *gpu = best;
  return true;
}

// Where one replica goes.
struct Choice {
  uint32_t pos = UINT32_MAX;
  int32_t gpu = -1;
  int32_t left = INT32_MAX;   // a fraction: milli-GPU left on the GPU after it
  double cost = 0;            // a fraction: the share placer's
  int32_t mig_start = -1;     // a MIG slice: its instance
  int32_t mig_fullness = -1;  // a MIG slice: used slots on its GPU
  bool found() const { return pos != UINT32_MAX; }
};

// The fraction's best GPU on `pos`, if better than *best.
void ConsiderFraction(Session& s, const TaskRequest& task, uint32_t pos, Choice* best) {
  const Workspace& ws = s.ws();
  const NodeState& n = ws.node(pos);
  const uint64_t free = ws.free_mask(pos);
  // Each GPU's shares in use, or -1 when it takes no share (held whole,
  // MIG, unhealthy).
  int32_t used[kMaxGpusPerNode];
  MemoryMiB used_memory[kMaxGpusPerNode];
  int32_t left[kMaxGpusPerNode];
  bool candidate[kMaxGpusPerNode];
  bool any = false;
  for (int32_t g = 0; g < n.spec.gpus; ++g) {
    const uint64_t bit = uint64_t{1} << g;
    used[g] = -1;
    used_memory[g] = 0;
    if ((n.healthy_mask & bit) != 0) {
      if (const Workspace::GpuShare* sh = ws.share(pos, g); sh != nullptr) {
        used[g] = sh->milli;
        used_memory[g] = sh->memory;
      } else if ((n.shared_mask & bit) != 0 && (n.allocated_mask & bit) == 0) {
        used[g] = n.milli_used(g);
        used_memory[g] = n.memory_shared(g);
      } else if ((free & bit) != 0) {
        used[g] = 0;
      }
    }
    left[g] = used[g] < 0 ? 0 : 1000 - used[g];
    candidate[g] = used[g] >= 0 && used[g] + task.milli <= 1000 &&
                   !(n.spec.gpu_memory > 0 && used_memory[g] + task.share_memory > n.spec.gpu_memory);
    any = any || candidate[g];
  }
  if (!any) return;
  const SharePlacerPlugin& placer = s.profile().share_placer();
  double cost[kMaxGpusPerNode] = {};
  const ShareNode view{left, n.spec.gpus, ws.View(pos).free_cpu, n.model,
                       placer.needs_task_mix() ? &s.TypicalMix() : nullptr};
  placer.Costs(view, candidate, task.milli, task.cpu, cost);
  for (int32_t g = 0; g < n.spec.gpus; ++g) {
    if (!candidate[g]) continue;
    const int32_t after = 1000 - used[g] - task.milli;
    if (!best->found() || cost[g] < best->cost || (cost[g] == best->cost && after < best->left)) {
      *best = {pos, g, after, cost[g], -1, -1};
    }
  }
}

// The best place for one replica among the nodes as they are; *any_node
// if some node could ever hold it.
Choice ChooseReplica(Session& s, const TaskRequest& task, const TaskRequest& cpu_part, bool* any_node) {
  Choice best;
  Workspace& ws = s.ws();
  for (uint32_t pos = 0; pos < ws.size(); ++pos) {
    if (!s.ShareCouldFit(task, pos)) continue;
    *any_node = true;
    if (!ws.schedulable(pos) || !s.ctx().Fits(s.request(), cpu_part, pos)) continue;
    if (task.mig != nullptr) {
      int32_t g = -1, start = -1, full = -1;
      if (FindMigInstance(ws, task, pos, &g, &start, &full) && full > best.mig_fullness) {
        best.pos = pos;
        best.gpu = g;
        best.mig_start = start;
        best.mig_fullness = full;
      }
      continue;
    }
    if (task.milli == 0) {  // a CPU-only task of the gang: the first node that fits
      best.pos = pos;
      return best;
    }
    ConsiderFraction(s, task, pos, &best);
  }
  return best;
}

// No free instance of the profile anywhere: re-partition an idle MIG GPU.
Choice Repartition(Session& s, const TaskRequest& task, const TaskRequest& cpu_part) {
  Choice c;
  Workspace& ws = s.ws();
  for (uint32_t pos = 0; pos < ws.size(); ++pos) {
    if (!s.ShareCouldFit(task, pos) || !ws.schedulable(pos) || !s.ctx().Fits(s.request(), cpu_part, pos)) continue;
    int32_t g = -1;
    MigLayout layout;
    if (!PlanMigLayout(s, task, pos, &g, &layout)) continue;
    const MigGeometry& geo = *ws.node(pos).mig_geometry;
    s.out().reconfigurations.push_back(
        {s.topology().node_at(pos), g, FormatMigLayout(geo, layout), FormatMigLayout(geo, *ws.mig(pos, g).layout)});
    s.txn().SetMig(pos, g, {std::move(layout), 0});
    int32_t full = -1;
    FindMigInstance(ws, task, pos, &c.gpu, &c.mig_start, &full);
    c.pos = pos;
    return c;
  }
  return c;
}

PendingReason WhyNot(const TaskRequest& task, int32_t placed, bool any_node, bool* never) {
  const std::string share = task.mig != nullptr ? "a MIG " + *task.mig + " instance"
                            : task.milli > 0    ? FormatMilliCpu(task.milli) + " of a GPU"
                                                : "CPU only";
  if (!any_node) {
    *never = true;
    return {ReasonCode::kNoMatchingNodes,
            "needs " + share + (task.share_memory > 0 ? " with " + FormatMemoryMiB(task.share_memory) : "") +
                " per replica; " +
                (task.mig != nullptr ? "no node has a MIG-mode GPU offering that profile" : "no node has a matching GPU")};
  }
  return {ReasonCode::kInsufficientGpus,
          "needs " + std::to_string(task.replicas) + " replicas x " + share +
              (task.share_memory > 0 ? " (" + FormatMemoryMiB(task.share_memory) + ")" : "") + "; " +
              std::to_string(placed) +
              (task.mig != nullptr ? " fit now (free instances of the profile, or idle MIG GPUs to re-partition)"
                                   : " fit now on shared or free GPUs")};
}

// Takes the chosen place for replica `rep` in the Txn; returns its binding.
ReplicaPlacement Bind(Session& s, const TaskRequest& task, uint32_t rep, const Choice& c) {
  Workspace& ws = s.ws();
  Txn& txn = s.txn();
  const NodeState& n = ws.node(c.pos);
  uint64_t mask = 0;
  if (task.mig != nullptr) {
    const Workspace::MigView now = ws.mig(c.pos, c.gpu);
    txn.SetMig(c.pos, c.gpu, {*now.layout, static_cast<uint8_t>(now.used | (1u << c.mig_start))});
    mask = uint64_t{1} << c.gpu;
    txn.Place({task.task, rep, c.pos, 0, task.cpu, task.memory});
  } else if (task.milli > 0) {
    const uint64_t bit = uint64_t{1} << c.gpu;
    const Workspace::GpuShare* cur = ws.share(c.pos, c.gpu);
    Workspace::GpuShare use = cur != nullptr ? *cur : Workspace::GpuShare{n.milli_used(c.gpu), n.memory_shared(c.gpu)};
    use.milli += task.milli;
    use.memory += task.share_memory;
    txn.SetShare(c.pos, c.gpu, use);
    mask = bit;
    // A free GPU that takes its first share leaves the whole-GPU pool.
    txn.Place({task.task, rep, c.pos, (ws.free_mask(c.pos) & bit), task.cpu, task.memory});
  } else {
    txn.Place({task.task, rep, c.pos, 0, task.cpu, task.memory});
  }
  return {task.task, rep, s.topology().node_at(c.pos), mask, task.milli, task.mig ? c.mig_start : -1};
}

// One more replica of `task` where it fits best (re-partitioning an idle
// MIG GPU if no instance of its profile is free); false if none does.
bool PlaceOne(Session& s, const TaskRequest& task, uint32_t rep, bool* any_node, ReplicaPlacement* placed) {
  TaskRequest cpu_part = task;  // the filters see the replica's CPU and memory, no whole GPUs
  cpu_part.gpus = 0;
  cpu_part.model = -1;
  Choice c = ChooseReplica(s, task, cpu_part, any_node);
  if (task.mig != nullptr && !c.found()) c = Repartition(s, task, cpu_part);
  if (!c.found()) return false;
  *placed = Bind(s, task, rep, c);
  return true;
}

}  // namespace

bool PlaceShares(Session& s, PendingReason* why, bool* never) {
  CycleResult& out = s.out();
  s.txn().Begin();
  const size_t first = out.replicas.size();
  const size_t first_reconf = out.reconfigurations.size();
  bool any_node = false;  // some node could hold a replica if the cluster were empty
  // A service starts with what fits, down to its min, rather than not at all.
  const JobSpec& spec = s.request().job->spec();
  const int32_t at_least = spec.is_service() && spec.elastic() ? std::max(1, spec.elastic_min_replicas) : -1;
  for (const TaskRequest& task : s.request().tasks) {
    for (int32_t rep = 0; rep < task.replicas; ++rep) {
      ReplicaPlacement placed;
      if (!PlaceOne(s, task, static_cast<uint32_t>(rep), &any_node, &placed)) {
        if (at_least >= 0 && rep >= at_least) break;
        s.txn().Rollback();
        out.replicas.resize(first);
        out.reconfigurations.resize(first_reconf);
        *why = WhyNot(task, rep, any_node, never);
        if (!any_node && s.request().quota_barred_models != 0) {
          // (Nodes there are, on models its queue's limits never admit it on.)
          *why = {ReasonCode::kExceedsQuota, s.request().QuotaBarredReason()};
        }
        return false;
      }
      out.replicas.push_back(placed);
    }
  }
  out.placed.push_back({s.request().job->id, static_cast<uint32_t>(first), static_cast<uint32_t>(out.replicas.size() - first)});
  return true;
}

std::vector<ReplicaPlacement> GrowShares(Session& s, const JobRecord& job, int32_t count) {
  const TaskRequest& task = s.request().tasks[0];
  const GpuShare& spec_share = job.spec().tasks[0].gpu_share;
  std::vector<bool> used(static_cast<size_t>(job.spec().tasks[0].replicas), false);
  QueueBook::ModelGpus milli;  // what it holds, in milli-GPU per model
  auto node_of = [&](NodeId node) -> const NodeState& { return s.ws().node(s.topology().position_of(node)); };
  for (const ReplicaPlacement& p : job.placement) {
    if (p.replica < used.size()) used[p.replica] = true;
    AddShare(&milli, node_of(p.node).model, ChargedMilli(spec_share, node_of(p.node).spec.gpu_memory));
  }
  const int32_t leaf = s.fair() ? s.Leaf(job) : -1;
  std::vector<ReplicaPlacement> grown;
  uint32_t next = 0;
  bool any_node = false;
  while (static_cast<int32_t>(grown.size()) < count) {
    while (next < used.size() && used[next]) ++next;
    if (next >= used.size()) break;
    const size_t reconf = s.out().reconfigurations.size();
    s.txn().Begin();
    ReplicaPlacement placed;
    if (!PlaceOne(s, task, next, &any_node, &placed)) break;
    const int16_t model = node_of(placed.node).model;
    const int64_t share = ChargedMilli(spec_share, node_of(placed.node).spec.gpu_memory);
    if (leaf >= 0) {
      // Admission, as for its start: its shares count as whole GPUs of
      // their model, rounded up (what this one adds to that).
      int64_t held = 0;
      for (const auto& [m, n] : milli) held += m == model ? n : 0;
      const int64_t more = (held + share + 999) / 1000 - (held + 999) / 1000;
      const QueueBook::ModelGpus add = model >= 0 && more > 0 ? QueueBook::ModelGpus{{model, more}} : QueueBook::ModelGpus{};
      if (!add.empty() && !s.QuotaAdmits(job, leaf, add)) {
        s.txn().Rollback();
        s.out().reconfigurations.resize(reconf);
        break;
      }
      if (!add.empty()) s.book().Charge(leaf, add);
      s.book().ChargeResources(leaf, task.cpu, task.memory);
    }
    s.txn().Commit();
    AddShare(&milli, model, share);
    used[next] = true;
    grown.push_back(placed);
  }
  return grown;
}

}  // namespace rota::sched
