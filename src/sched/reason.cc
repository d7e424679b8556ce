#include "sched/reason.h"

#include <algorithm>
#include <map>

#include "sched/place_context.h"

namespace rota::sched {
namespace {

std::string Plural(int64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

// "2 replicas x 8 GPUs" / "1 replica x 32 CPU" - the dominant thing asked.
std::string Shape(const TaskRequest& t) {
  std::string s = Plural(t.replicas, "replica", "replicas") + " x ";
  if (t.gpus > 0) return s + Plural(t.gpus, "GPU", "GPUs");
  if (t.cpu > 0) return s + FormatMilliCpu(t.cpu) + " CPU";
  return s + FormatMemoryMiB(t.memory) + " memory";
}

std::string TaskPrefix(const JobRequest& job, const TaskRequest& t) {
  if (job.tasks.size() == 1) return "";
  return "task " + job.job->spec().tasks[t.task].name + ": ";
}

// Replicas of `t` that fit a node with these free amounts.
int64_t ReplicasFitting(const TaskRequest& t, int64_t free_gpus, MilliCpu cpu, MemoryMiB memory) {
  int64_t n = t.replicas;
  if (t.gpus > 0) n = std::min<int64_t>(n, free_gpus / t.gpus);
  if (t.cpu > 0) n = std::min<int64_t>(n, cpu / t.cpu);
  if (t.memory > 0) n = std::min<int64_t>(n, memory / t.memory);
  return std::max<int64_t>(n, 0);
}

// Filters that pass statically (no kNever) for `t` on `pos`.
bool StaticFit(PlaceContext& ctx, const JobRequest& job, const TaskRequest& t, uint32_t pos, Shortfall* why) {
  const NodeView view = ctx.workspace().View(pos);
  for (const FilterPlugin* f : ctx.profile().filters()) {
    FilterResult r = f->Filter(job, t, view);
    if (r.fit == FilterResult::kNever) {
      *why = r.shortfall;
      return false;
    }
  }
  return true;
}

// StaticFit of task group `t` (one of job.tasks) on every node: kFits, or
// the shortfall that rules the node out. Made once per explanation
// (ExplainUnresolvable starts one), for the request it was made for.
const std::vector<uint8_t>& StaticFits(PlaceContext& ctx, const JobRequest& job, const TaskRequest& t) {
  PlaceContext::StaticFits& memo = ctx.static_fits();
  if (memo.job != job.job || memo.tasks != job.tasks.data() || memo.count != job.tasks.size()) {
    memo.job = job.job;
    memo.tasks = job.tasks.data();
    memo.count = job.tasks.size();
    memo.found.resize(std::max(memo.found.size(), job.tasks.size()));
    for (size_t k = 0; k < job.tasks.size(); ++k) memo.found[k].clear();
  }
  std::vector<uint8_t>& found = memo.found[static_cast<size_t>(&t - job.tasks.data())];
  if (found.empty()) {
    const uint32_t n = ctx.workspace().size();
    found.resize(n);
    for (uint32_t pos = 0; pos < n; ++pos) {
      Shortfall why = Shortfall::kNone;
      found[pos] = StaticFit(ctx, job, t, pos, &why) ? PlaceContext::StaticFits::kFits : static_cast<uint8_t>(why);
    }
  }
  return found;
}

std::string FreeList(const std::vector<int32_t>& frees, int64_t nodes_fitting) {
  std::string out = "free per node: ";
  if (frees.size() <= 12) {
    for (size_t i = 0; i < frees.size(); ++i) out += (i ? ", " : "") + std::to_string(frees[i]);
  } else {
    std::map<int32_t, int64_t, std::greater<>> hist;
    for (int32_t f : frees) ++hist[f];
    bool first = true;
    for (const auto& [free, count] : hist) {
      out += (first ? "" : ", ") + std::to_string(free) + " on " + Plural(count, "node", "nodes");
      first = false;
    }
  }
  return out + " (" + Plural(nodes_fitting, "node fits", "nodes fit") + ")";
}

std::string LevelName(PlaceContext& ctx, int32_t level) { return ctx.topology().LevelName(level); }

}  // namespace

std::string_view ReasonCodeName(ReasonCode code) {
  switch (code) {
    case ReasonCode::kNone: return "None";
    case ReasonCode::kInsufficientGpus: return "InsufficientGpus";
    case ReasonCode::kFragmented: return "Fragmented";
    case ReasonCode::kInsufficientCpu: return "InsufficientCpu";
    case ReasonCode::kInsufficientMemory: return "InsufficientMemory";
    case ReasonCode::kNodesUnavailable: return "NodesUnavailable";
    case ReasonCode::kTopology: return "TopologyUnsatisfied";
    case ReasonCode::kUnschedulable: return "Unschedulable";
    case ReasonCode::kReserved: return "HeldForReservation";
    case ReasonCode::kQuota: return "QuotaExceeded";
    case ReasonCode::kPreempting: return "Preempting";
    case ReasonCode::kArrayLimit: return "ArrayLimit";
    case ReasonCode::kExceedsQuota: return "ExceedsQueueLimit";
    case ReasonCode::kNoMatchingNodes: return "NoMatchingNodes";
    case ReasonCode::kExceedsNodeCapacity: return "ExceedsNodeCapacity";
    case ReasonCode::kExceedsDomainCapacity: return "ExceedsDomainCapacity";
    case ReasonCode::kInvalid: return "Invalid";
    case ReasonCode::kUnsupported: return "Unsupported";
  }
  return "Unknown";
}

bool IsUnresolvable(ReasonCode code) {
  return code == ReasonCode::kNoMatchingNodes || code == ReasonCode::kExceedsNodeCapacity ||
         code == ReasonCode::kExceedsDomainCapacity || code == ReasonCode::kInvalid || code == ReasonCode::kExceedsQuota ||
         code == ReasonCode::kUnsupported;
}

namespace {

// Why no node could ever hold a replica of task group `t` (OK if one could).
PendingReason TaskNeverFits(PlaceContext& ctx, const JobRequest& job, const TaskRequest& t) {
  Workspace& ws = ctx.workspace();
  const uint32_t n = ws.size();
  const std::vector<uint8_t>& fits = StaticFits(ctx, job, t);
  if (std::find(fits.begin(), fits.end(), PlaceContext::StaticFits::kFits) != fits.end()) return {};
  const std::string prefix = TaskPrefix(job, t);
  std::map<Shortfall, int64_t> never;
  int32_t max_gpus = 0;
  for (uint32_t pos = 0; pos < n; ++pos) {
    const auto why = static_cast<Shortfall>(fits[pos]);
    ++never[why];
    if (why == Shortfall::kGpus) max_gpus = std::max(max_gpus, ws.node(pos).spec.gpus);
  }
  const std::string& model = job.job->spec().tasks[t.task].gpu_model;
  if (never.count(Shortfall::kGpuModel) && never.size() == 1) {
    std::string have;
    for (uint32_t pos = 0; pos < n; ++pos) {
      const std::string& m = ws.node(pos).spec.gpu_model;
      if (!m.empty() && have.find("'" + m + "'") == std::string::npos) have += (have.empty() ? "'" : ", '") + m + "'";
    }
    return {ReasonCode::kNoMatchingNodes, prefix + "no node has GPU model '" + model + "'" +
                                              (have.empty() ? "" : " (the cluster has " + have + ")")};
  }
  if (never.count(Shortfall::kQueueLimit) &&
      never[Shortfall::kQueueLimit] + never[Shortfall::kGpuModel] + never[Shortfall::kSelector] == n) {
    // (Its queue's limits admit it on no model whose nodes could hold it.)
    return {ReasonCode::kExceedsQuota, prefix + job.QuotaBarredReason()};
  }
  if (never.count(Shortfall::kSelector) && never[Shortfall::kSelector] + never[Shortfall::kGpuModel] == n) {
    std::string sel;
    for (const auto& [k, v] : *job.selector) sel += (sel.empty() ? "" : ", ") + k + ": " + v;
    return {ReasonCode::kNoMatchingNodes,
            prefix + "no node" + (model.empty() ? "" : " with GPU model '" + model + "'") +
                " matches node_selector {" + sel + "}"};
  }
  if (never.count(Shortfall::kGpus)) {
    return {ReasonCode::kExceedsNodeCapacity, prefix + "needs " + Plural(t.gpus, "GPU", "GPUs") +
                                                  " per replica; the largest matching node has " +
                                                  std::to_string(max_gpus)};
  }
  if (never.count(Shortfall::kGpuMemory)) {
    return {ReasonCode::kExceedsNodeCapacity,
            prefix + "needs GPUs with " + FormatMemoryMiB(t.gpu_memory) + " memory; no matching node has them"};
  }
  if (never.count(Shortfall::kCpu)) {
    return {ReasonCode::kExceedsNodeCapacity,
            prefix + "needs " + FormatMilliCpu(t.cpu) + " CPU per replica; no matching node has that many"};
  }
  if (never.count(Shortfall::kMemory)) {
    return {ReasonCode::kExceedsNodeCapacity,
            prefix + "needs " + FormatMemoryMiB(t.memory) + " memory per replica; no matching node has that much"};
  }
  return {ReasonCode::kNoMatchingNodes, prefix + "no node passes the profile's filters"};
}

// Why no domain at the job's level could hold the whole gang, even empty
// (OK if one could).
PendingReason DomainNeverHolds(PlaceContext& ctx, const JobRequest& job) {
  Workspace& ws = ctx.workspace();
  const Topology& topo = ctx.topology();
  const uint32_t n = ws.size();
  const int32_t root = static_cast<int32_t>(topo.domain_levels().size());
  const int32_t level = job.required ? job.level : root;
  // Capacity of the largest domain at the allowed level, counting every node as empty.
  auto static_replicas = [&](const TaskRequest& t, uint32_t pos) -> int64_t {
    if (StaticFits(ctx, job, t)[pos] != PlaceContext::StaticFits::kFits) return 0;
    const NodeSpec& s = ws.node(pos).spec;
    return ReplicasFitting(t, s.gpus, s.cpu, s.memory);
  };
  auto domain_holds = [&](uint32_t begin, uint32_t end, int64_t* worst) {
    bool all = true;
    *worst = INT64_MAX;
    for (const TaskRequest& t : job.tasks) {
      int64_t total = 0;
      for (uint32_t pos = begin; pos < end && total < t.replicas; ++pos) total += static_replicas(t, pos);
      *worst = std::min(*worst, total);
      all = all && total >= t.replicas;
    }
    return all;
  };
  int64_t best = 0;
  std::string best_name;
  if (level < 0) {
    for (uint32_t pos = 0; pos < n; ++pos) {
      int64_t got;
      if (domain_holds(pos, pos + 1, &got)) return {};
      if (got > best) best = got, best_name = ws.node(pos).spec.name;
    }
  } else {
    for (int32_t d : topo.domains_at(level)) {
      int64_t got;
      if (domain_holds(topo.domains()[d].begin, topo.domains()[d].end, &got)) return {};
      if (got > best) best = got, best_name = topo.domains()[d].name;
    }
  }
  const TaskRequest& t = job.tasks[0];
  std::string where = level == root ? "in the whole cluster" : "within one " + LevelName(ctx, level);
  std::string msg = "needs " + (job.tasks.size() == 1 ? Shape(t) : Plural(job.total_replicas, "replica", "replicas")) +
                    " " + where + "; ";
  msg += level == root ? "the cluster holds " + std::to_string(best) + " even when empty"
                       : "the largest " + LevelName(ctx, level) + (best_name.empty() ? "" : " (" + best_name + ")") +
                             " holds " + std::to_string(best) + " even when empty";
  return {ReasonCode::kExceedsDomainCapacity, msg};
}

}  // namespace

PendingReason ExplainUnresolvable(PlaceContext& ctx, const JobRequest& job) {
  ctx.static_fits().job = nullptr;  // (a new explanation: the nodes or the request may differ)
  for (const TaskRequest& t : job.tasks) {
    if (PendingReason why = TaskNeverFits(ctx, job, t); !why.ok()) return why;
  }
  return DomainNeverHolds(ctx, job);
}

namespace {

// Why task group `t` does not fit the cluster now (OK if it does).
PendingReason TaskShortNow(PlaceContext& ctx, const JobRequest& job, const TaskRequest& t) {
  Workspace& ws = ctx.workspace();
  const uint32_t n = ws.size();
  const std::string prefix = TaskPrefix(job, t);
  int64_t matching = 0, available = 0, free_gpus = 0, fit_by_gpu = 0, fit_all = 0, nodes_fitting = 0;
  int64_t fit_by_cpu = 0, fit_by_memory = 0;
  int64_t lost = 0;
  const NodeState* given = nullptr;  // the first drained node with a reason
  std::vector<int32_t> frees;
  const std::vector<uint8_t>& fits = StaticFits(ctx, job, t);
  for (uint32_t pos = 0; pos < n; ++pos) {
    if (fits[pos] != PlaceContext::StaticFits::kFits) continue;
    ++matching;
    if (!ws.schedulable(pos)) {
      const NodeState& node = ws.node(pos);
      lost += node.lost;
      if (given == nullptr && !node.lost && !node.drain_reason.empty()) given = &node;
      continue;
    }
    ++available;
    const NodeView v = ws.View(pos);
    const int32_t f = ws.free_gpus(pos);
    frees.push_back(f);
    free_gpus += f;
    const int64_t g = t.gpus > 0 ? f / t.gpus : t.replicas;
    fit_by_gpu += g;
    fit_by_cpu += t.cpu > 0 ? std::min<int64_t>(g, v.free_cpu / t.cpu) : g;
    fit_by_memory += t.memory > 0 ? std::min<int64_t>(g, v.free_memory / t.memory) : g;
    const int64_t all = ReplicasFitting(t, f, v.free_cpu, v.free_memory);
    fit_all += all;
    nodes_fitting += all > 0;
  }
  if (fit_all >= t.replicas) return {};
  if (available == 0) {
    // Drained (with the first reason given: an admin's, or an agent's
    // "disk: ..."), or lost.
    std::string text = prefix + "all " + Plural(matching, "matching node is", "matching nodes are") +
                       (lost == 0 ? " drained" : lost == matching ? " lost" : " drained or lost");
    if (given != nullptr) {
      text += " (" + given->spec.name + ": " + given->drain_reason + (matching > 1 ? "; and others)" : ")");
    }
    return {ReasonCode::kNodesUnavailable, std::move(text)};
  }
  if (t.gpus > 0 && free_gpus < static_cast<int64_t>(t.replicas) * t.gpus) {
    return {ReasonCode::kInsufficientGpus,
            prefix + "needs " + Plural(static_cast<int64_t>(t.replicas) * t.gpus, "GPU", "GPUs") + " (" + Shape(t) +
                "); " + std::to_string(free_gpus) + " free on " + Plural(available, "matching node", "matching nodes")};
  }
  if (t.gpus > 0 && fit_by_gpu < t.replicas) {
    int64_t gpu_nodes = 0;
    for (int32_t f : frees) gpu_nodes += f >= t.gpus;
    return {ReasonCode::kFragmented, prefix + "needs " + Shape(t) + " on one node each; " + FreeList(frees, gpu_nodes)};
  }
  if (fit_by_cpu < t.replicas) {
    return {ReasonCode::kInsufficientCpu, prefix + "needs " + Plural(t.replicas, "replica", "replicas") + " x " +
                                              FormatMilliCpu(t.cpu) + " CPU; free CPU fits " +
                                              std::to_string(fit_by_cpu) + " on nodes with the GPUs"};
  }
  return {ReasonCode::kInsufficientMemory, prefix + "needs " + Plural(t.replicas, "replica", "replicas") + " x " +
                                               FormatMemoryMiB(t.memory) + " memory; free memory fits " +
                                               std::to_string(fit_by_memory) + " on nodes with the GPUs"};
}

// Every task group fits the cluster now: why the constraint or the
// combination does not.
PendingReason GangShortNow(PlaceContext& ctx, const JobRequest& job) {
  Workspace& ws = ctx.workspace();
  const Topology& topo = ctx.topology();
  const uint32_t n = ws.size();
  const int32_t root = static_cast<int32_t>(topo.domain_levels().size());
  // Every task group fits the cluster now; the constraint or the combination does not.
  if (job.required && job.level < root) {
    int64_t best = -1;
    std::string best_name;
    auto count = [&](uint32_t begin, uint32_t end) {
      int64_t worst = INT64_MAX;
      for (const TaskRequest& t : job.tasks) {
        int64_t total = 0;
        for (uint32_t pos = begin; pos < end; ++pos) {
          if (!ws.schedulable(pos) || StaticFits(ctx, job, t)[pos] != PlaceContext::StaticFits::kFits) continue;
          const NodeView v = ws.View(pos);
          total += ReplicasFitting(t, ws.free_gpus(pos), v.free_cpu, v.free_memory);
        }
        worst = std::min(worst, total);
      }
      return worst;
    };
    if (job.level < 0) {
      for (uint32_t pos = 0; pos < n; ++pos) {
        if (int64_t c = count(pos, pos + 1); c > best) best = c, best_name = ws.node(pos).spec.name;
      }
    } else {
      for (int32_t d : topo.domains_at(job.level)) {
        if (int64_t c = count(topo.domains()[d].begin, topo.domains()[d].end); c > best) {
          best = c, best_name = topo.domains()[d].name;
        }
      }
    }
    const std::string level = LevelName(ctx, job.level);
    const std::string what = job.tasks.size() == 1 ? Shape(job.tasks[0]) : Plural(job.total_replicas, "replica", "replicas");
    return {ReasonCode::kTopology, "needs " + what + " within one " + level + "; the best " + level + " (" +
                                       best_name + ") fits " + std::to_string(std::max<int64_t>(best, 0)) + " now"};
  }
  return {ReasonCode::kUnschedulable, "each task group fits on its own, but no placement holds all " +
                                          Plural(job.total_replicas, "replica", "replicas") + " at once"};
}

}  // namespace

PendingReason ExplainPending(PlaceContext& ctx, const JobRequest& job) {
  for (const TaskRequest& t : job.tasks) {
    if (PendingReason why = TaskShortNow(ctx, job, t); !why.ok()) return why;
  }
  return GangShortNow(ctx, job);
}

}  // namespace rota::sched
