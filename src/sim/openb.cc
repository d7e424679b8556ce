#include "sim/openb.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <tuple>
#include <unordered_map>

#include "base/rng.h"
#include "sched/fgd.h"

namespace rota::sim {
namespace {

constexpr int kMaxGpus = 8;
// The artifact's normalisers for CPU and GPU (open-gpu-share's MaxSpecCpu, MaxSpecGpu).
constexpr double kMaxSpecCpu = 128000;
constexpr double kMaxSpecGpu = 8000;

enum class Policy { kFgd, kBestFit, kPacking, kClustering, kDotProd, kRandom, kRota };

struct Node {
  int64_t cpu_left = 0;
  int64_t mem_left = 0;
  int32_t gpus = 0;
  int16_t model = -1;
  int32_t left[kMaxGpus] = {};
  uint32_t rank = 0;     // tie-break: lower first
  uint32_t version = 0;  // changes with every placement
  double frag = 0;
  std::map<std::string, int32_t> tags;  // clustering: GPU shapes placed here
  int64_t left_sum() const {
    int64_t s = 0;
    for (int g = 0; g < gpus; ++g) s += left[g];
    return s;
  }
};

// A pod's request as the artifact sees it.
struct Pod {
  int64_t cpu = 0;
  int64_t mem = 0;
  int32_t num = 0;
  int32_t milli = 0;                // per GPU; 0 for CPU-only pods
  std::vector<int16_t> models;      // accessible models; empty = any
  bool any_model = true;
  uint32_t shape = 0;               // interned (cpu, milli, num, models) for score caching
  std::string tag;                  // clustering: "share-gpu" or "<n>-gpu"; empty for CPU-only
};

using Typical = sched::TypicalTask;

bool Accessible(const Pod& p, int16_t model) {
  return p.any_model || std::find(p.models.begin(), p.models.end(), model) != p.models.end();
}

// FGD's fragmentation of one node for the typical pod mix (sched/fgd.h).
double NodeFrag(const std::vector<Typical>& typical, int64_t cpu_left, const int32_t* left, int32_t gpus, int16_t model) {
  return sched::NodeFragmentation(typical, cpu_left, left, gpus, model);
}

int64_t Sigmoid100(double x) { return static_cast<int64_t>(1.0 / (1.0 + std::exp(-x)) * 100); }

// The GPUs a multi-GPU (or CPU-only) pod takes: the lowest-index free ones.
void TakeWhole(const Node& n, const Pod& p, int32_t* left_after) {
  std::copy(n.left, n.left + n.gpus, left_after);
  int32_t need = p.num;
  for (int g = 0; g < n.gpus && need > 0; ++g) {
    if (left_after[g] >= p.milli && p.milli > 0) {
      left_after[g] -= p.milli;
      --need;
    }
  }
}

// Stable ascending order of GPUs by milli left, taking the first `num` with
// enough (resource.go, Sub). For whole GPUs these are the free ones in index order.
void SubAscending(const Node& n, const Pod& p, int32_t* left_after) {
  std::copy(n.left, n.left + n.gpus, left_after);
  if (p.milli == 0) return;
  int32_t idx[kMaxGpus];
  std::iota(idx, idx + n.gpus, 0);
  std::stable_sort(idx, idx + n.gpus, [&](int a, int b) { return n.left[a] < n.left[b]; });
  int32_t need = p.num;
  for (int k = 0; k < n.gpus && need > 0; ++k) {
    if (left_after[idx[k]] >= p.milli) {
      left_after[idx[k]] -= p.milli;
      --need;
    }
  }
}

bool Feasible(const Node& n, const Pod& p) {
  if (n.cpu_left < p.cpu || n.mem_left < p.mem) return false;
  if (p.milli == 0) return true;
  if (n.gpus == 0 || !Accessible(p, n.model)) return false;
  int32_t fit = 0;
  for (int g = 0; g < n.gpus; ++g) fit += n.left[g] >= p.milli;
  return fit >= p.num;
}

struct Choice {
  double score = 0;
  double tie = 0;  // rota: second key (higher better)
  int32_t gpu = -1;  // the shared GPU for a fractional pod
};

bool Fractional(const Pod& p) { return p.num == 1 && p.milli > 0 && p.milli < 1000; }

// The shared GPU best-fit picks: the least milli left that is enough.
int32_t BestGpu(const Node& n, const Pod& p) {
  int32_t best = -1;
  for (int g = 0; g < n.gpus; ++g) {
    if (n.left[g] >= p.milli && (best < 0 || n.left[g] < n.left[best])) best = g;
  }
  return best;
}

Choice Score(Policy policy, const std::vector<Typical>& typical, const Node& n, const Pod& p) {
  Choice c;
  int32_t after[kMaxGpus];
  switch (policy) {
    case Policy::kFgd:
    case Policy::kRota: {
      const double before = n.frag;
      if (Fractional(p)) {
        bool first = true;
        for (int g = 0; g < n.gpus; ++g) {
          if (n.left[g] < p.milli) continue;
          std::copy(n.left, n.left + n.gpus, after);
          after[g] -= p.milli;
          const double a = NodeFrag(typical, n.cpu_left - p.cpu, after, n.gpus, n.model);
          const double s = static_cast<double>(Sigmoid100((before - a) / 1000.0));
          // FGD: the first GPU with the best score; rota: the tightest of those.
          const double tie = policy == Policy::kRota ? -static_cast<double>(after[g]) : 0;
          if (first || s > c.score || (s == c.score && tie > c.tie)) c = {s, tie, g};
          first = false;
        }
      } else {
        SubAscending(n, p, after);
        const double a = NodeFrag(typical, n.cpu_left - p.cpu, after, n.gpus, n.model);
        c.score = static_cast<double>(Sigmoid100((before - a) / 1000.0));
      }
      if (policy == Policy::kRota) {
        // Among nodes FGD scores alike, the best fit (least CPU and GPU left)
        // rather than an arbitrary one.
        const double left_after = static_cast<double>(n.left_sum() - static_cast<int64_t>(p.milli) * p.num);
        c.tie = -(static_cast<double>(n.cpu_left - p.cpu) / kMaxSpecCpu + left_after / kMaxSpecGpu);
      }
      return c;
    }
    case Policy::kBestFit: {
      const double s = static_cast<double>(n.cpu_left - p.cpu) / kMaxSpecCpu * 0.5 +
                       static_cast<double>(n.left_sum() - static_cast<int64_t>(p.milli) * p.num) / kMaxSpecGpu * 0.5;
      c.score = static_cast<double>(static_cast<int64_t>((1.0 - s) * 100));
      if (Fractional(p)) c.gpu = BestGpu(n, p);
      return c;
    }
    case Policy::kPacking: {
      if (Fractional(p)) c.gpu = BestGpu(n, p);
      if (p.milli == 0) return c;
      int32_t free = 0;
      for (int g = 0; g < n.gpus; ++g) free += n.left[g] == 1000;
      if (free == n.gpus) {
        c.score = std::max(33 - free, free);
        return c;
      }
      int32_t idx[kMaxGpus];
      std::iota(idx, idx + n.gpus, 0);
      std::stable_sort(idx, idx + n.gpus, [&](int a, int b) { return n.left[a] < n.left[b]; });
      int32_t need = p.num, free_used = 0;
      int64_t taken_left = 0;
      for (int k = 0; k < n.gpus && need > 0; ++k) {
        if (n.left[idx[k]] >= p.milli) {
          free_used += n.left[idx[k]] == 1000;
          taken_left += n.left[idx[k]];
          --need;
        }
      }
      if (free_used > 0) {
        c.score = std::max(50 - free_used, 33);
      } else {
        c.score = static_cast<double>(std::max<int64_t>(100 - (taken_left * 100 / 1000) / 10, 50));
      }
      return c;
    }
    case Policy::kClustering: {
      if (Fractional(p)) c.gpu = BestGpu(n, p);
      if (p.tag.empty()) return c;
      const int64_t base = 25 * (8000 - n.left_sum()) / 8000;
      auto it = n.tags.find(p.tag);
      if (it != n.tags.end()) {
        c.score = static_cast<double>(n.tags.size() == 1 ? base + 75 : base + 50);
      } else {
        c.score = static_cast<double>(n.tags.empty() ? base + 25 : base);
      }
      return c;
    }
    case Policy::kDotProd: {
      if (Fractional(p)) c.gpu = BestGpu(n, p);
      const double ip = (static_cast<double>(n.cpu_left) / kMaxSpecCpu) * (static_cast<double>(p.cpu) / kMaxSpecCpu) +
                        (static_cast<double>(n.left_sum()) / kMaxSpecGpu) *
                            (static_cast<double>(static_cast<int64_t>(p.milli) * p.num) / kMaxSpecGpu);
      c.score = static_cast<double>(static_cast<int64_t>(100 * (1 - ip / 2)));
      return c;
    }
    case Policy::kRandom:
      return c;
  }
  return c;
}

StatusOr<Policy> ParsePolicy(const std::string& name) {
  static const std::pair<const char*, Policy> kNames[] = {
      {"fgd", Policy::kFgd},         {"bestfit", Policy::kBestFit}, {"packing", Policy::kPacking},
      {"clustering", Policy::kClustering}, {"dotprod", Policy::kDotProd}, {"random", Policy::kRandom},
      {"rota", Policy::kRota},       {"default", Policy::kRota}};
  for (auto [n, p] : kNames) {
    if (name == n) return p;
  }
  std::string known;
  for (const std::string& n : OpenbPlacements()) known += (known.empty() ? "" : ", ") + n;
  return InvalidArgumentError("--placement: unknown placement '" + name + "' for openb pods (known: " + known + ")");
}

std::string JoinModels(const std::vector<std::string>& models) {
  std::string s;
  for (const std::string& m : models) s += (s.empty() ? "" : "|") + m;
  return s;
}

}  // namespace

const std::vector<std::string>& OpenbPlacements() {
  static const std::vector<std::string> kNames = {"rota", "fgd", "bestfit", "packing", "clustering", "dotprod", "random"};
  return kNames;
}

std::vector<TypicalPod> TypicalPods(const std::vector<TraceJob>& pods, double coverage) {
  std::map<std::tuple<int64_t, int32_t, int32_t, std::string>, int64_t> counts;
  for (const TraceJob& p : pods) {
    const int32_t milli = p.gpus > 0 ? p.gpu_milli : 0;
    ++counts[{std::max<int64_t>(p.cpu, 100), milli, p.gpus, JoinModels(p.gpu_models)}];
  }
  std::vector<TypicalPod> all;
  for (const auto& [key, count] : counts) {
    all.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), 0, count});
  }
  // Most common first; ties by the key, descending (the artifact's order).
  std::stable_sort(all.begin(), all.end(), [](const TypicalPod& a, const TypicalPod& b) {
    if (a.count != b.count) return a.count > b.count;
    return std::tie(a.cpu, a.milli, a.gpus, a.models) > std::tie(b.cpu, b.milli, b.gpus, b.models);
  });
  std::vector<TypicalPod> out;
  int64_t cum = 0;
  const double target = coverage * static_cast<double>(pods.size());
  for (const TypicalPod& t : all) {
    if (static_cast<double>(cum) >= target) break;
    out.push_back(t);
    cum += t.count;
  }
  // Computed as the artifact does ((count / n) / (cum / n)): ties between
  // scores depend on the last bit.
  const double n = static_cast<double>(pods.size());
  for (TypicalPod& t : out) t.weight = (static_cast<double>(t.count) / n) / (static_cast<double>(cum) / n);
  return out;
}

StatusOr<OpenbResult> RunOpenb(const std::vector<TraceNode>& trace_nodes, const std::vector<TraceJob>& trace_pods,
                               const OpenbOptions& options) {
  const auto wall_start = std::chrono::steady_clock::now();
  ROTA_ASSIGN_OR_RETURN(Policy policy, ParsePolicy(options.placement));
  if (trace_nodes.empty()) return InvalidArgumentError("--nodes: no nodes");
  if (trace_pods.empty()) return InvalidArgumentError("--trace: no pods");
  if (!(options.inflate > 0 && options.inflate <= 10)) return InvalidArgumentError("--inflate: must be in (0, 10]");

  // Models, nodes (in name order, as the artifact sorts them).
  std::vector<std::string> models;
  auto model_index = [&](const std::string& m) -> int16_t {
    auto it = std::find(models.begin(), models.end(), m);
    if (it != models.end()) return static_cast<int16_t>(it - models.begin());
    models.push_back(m);
    return static_cast<int16_t>(models.size() - 1);
  };
  std::vector<uint32_t> by_name(trace_nodes.size());
  std::iota(by_name.begin(), by_name.end(), 0);
  std::stable_sort(by_name.begin(), by_name.end(),
                   [&](uint32_t a, uint32_t b) { return trace_nodes[a].name < trace_nodes[b].name; });
  std::vector<Node> nodes(trace_nodes.size());
  int64_t capacity_gpus = 0;
  for (size_t i = 0; i < trace_nodes.size(); ++i) {
    const TraceNode& t = trace_nodes[i];
    if (t.gpus > kMaxGpus) {
      return InvalidArgumentError("--nodes: node '" + t.name + "' has " + std::to_string(t.gpus) + " GPUs; at most " +
                                  std::to_string(kMaxGpus) + " per node here");
    }
    Node& n = nodes[i];
    n.cpu_left = t.cpu;
    n.mem_left = t.memory;
    n.gpus = t.gpus;
    n.model = t.gpus > 0 ? model_index(t.model) : -1;
    for (int g = 0; g < t.gpus; ++g) n.left[g] = 1000;
    capacity_gpus += t.gpus;
  }
  if (capacity_gpus == 0) return InvalidArgumentError("--nodes: the nodes have no GPUs");

  // Pods, with shapes interned.
  std::vector<Pod> pods(trace_pods.size());
  std::map<std::tuple<int64_t, int64_t, int32_t, int32_t, std::string>, uint32_t> shapes;
  for (size_t i = 0; i < trace_pods.size(); ++i) {
    const TraceJob& t = trace_pods[i];
    Pod& p = pods[i];
    p.cpu = std::max<int64_t>(t.cpu, 100);
    p.mem = t.memory;
    p.num = t.gpus;
    p.milli = t.gpus > 0 ? t.gpu_milli : 0;
    p.any_model = t.gpu_models.empty();
    for (const std::string& m : t.gpu_models) {
      auto it = std::find(models.begin(), models.end(), m);
      if (it != models.end()) p.models.push_back(static_cast<int16_t>(it - models.begin()));
    }
    if (p.milli > 0) p.tag = Fractional(p) ? "share-gpu" : std::to_string(p.num) + "-gpu";
    auto key = std::make_tuple(p.cpu, p.mem, p.num, p.milli, JoinModels(t.gpu_models));
    auto [it, inserted] = shapes.emplace(key, static_cast<uint32_t>(shapes.size()));
    p.shape = it->second;
  }

  // Typical pods of the original list, with per-model access.
  std::vector<Typical> typical;
  for (const TypicalPod& t : TypicalPods(trace_pods)) {
    Typical x{t.cpu, t.milli, t.gpus, std::vector<bool>(models.size(), t.models.empty()), t.weight};
    for (size_t m = 0; m < models.size(); ++m) {
      for (const std::string& name : [&] {
             std::vector<std::string> v;
             std::string_view s = t.models;
             while (!s.empty()) {
               size_t bar = s.find('|');
               v.emplace_back(s.substr(0, bar));
               if (bar == std::string_view::npos) break;
               s.remove_prefix(bar + 1);
             }
             return v;
           }()) {
        if (name == models[m]) x.access[m] = true;
      }
    }
    typical.push_back(std::move(x));
  }
  for (Node& n : nodes) n.frag = NodeFrag(typical, n.cpu_left, n.left, n.gpus, n.model);

  Rng rng(options.seed);
  OpenbResult result;
  result.capacity_milli = capacity_gpus * 1000;
  // Arrivals: the pods in name order, shuffled, then random copies until the
  // demand would pass `inflate` x capacity.
  if (!options.arrival_order.empty()) {
    for (uint32_t i : options.arrival_order) {
      if (i >= pods.size()) return InvalidArgumentError("arrival order: pod index out of range");
    }
    result.arrivals = options.arrival_order;
  } else {
    std::vector<uint32_t> order(pods.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return trace_pods[a].name < trace_pods[b].name; });
    for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.Uniform(i)]);
    int64_t total = 0;
    for (const Pod& p : pods) total += static_cast<int64_t>(p.num) * p.milli;
    if (total == 0) return InvalidArgumentError("--trace: no pod asks for a GPU; nothing to inflate");
    const double limit = options.inflate * static_cast<double>(result.capacity_milli);
    result.arrivals = order;
    while (true) {
      const uint32_t i = order[rng.Uniform(order.size())];
      const int64_t add = static_cast<int64_t>(pods[i].num) * pods[i].milli;
      if (static_cast<double>(total + add) > limit) break;
      total += add;
      result.arrivals.push_back(i);
    }
  }
  // Tie-break ranks: a seeded permutation of the nodes in name order.
  if (!options.node_rank.empty()) {
    if (options.node_rank.size() != nodes.size()) return InvalidArgumentError("node ranks: one per node needed");
    for (size_t i = 0; i < nodes.size(); ++i) nodes[i].rank = options.node_rank[i];
  } else {
    std::vector<uint32_t> perm(nodes.size());
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.Uniform(i)]);
    for (size_t k = 0; k < by_name.size(); ++k) nodes[by_name[k]].rank = perm[k];
  }
  // Nodes in rank order: the first best score wins.
  std::vector<uint32_t> ranked(nodes.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::sort(ranked.begin(), ranked.end(), [&](uint32_t a, uint32_t b) { return nodes[a].rank < nodes[b].rank; });

  // Score cache: per node and pod shape, valid while the node is unchanged.
  struct Cached {
    uint32_t version = UINT32_MAX;
    Choice choice;
  };
  std::vector<std::vector<Cached>> cache(nodes.size(), std::vector<Cached>(shapes.size()));
  const bool cacheable = policy != Policy::kRandom;

  int64_t used = 0, arrived = 0;
  double frag_total = 0;
  for (const Node& n : nodes) frag_total += n.frag;
  std::vector<uint32_t> feasible;
  result.steps.reserve(result.arrivals.size());
  for (uint32_t pi : result.arrivals) {
    const Pod& p = pods[pi];
    arrived += static_cast<int64_t>(p.num) * p.milli;
    feasible.clear();
    for (uint32_t ni : ranked) {
      if (Feasible(nodes[ni], p)) feasible.push_back(ni);
    }
    int32_t chosen = -1;
    Choice best;
    if (feasible.size() == 1) {
      chosen = static_cast<int32_t>(feasible[0]);
      if (cacheable) best = Score(policy, typical, nodes[chosen], p);
    } else if (!feasible.empty()) {
      if (policy == Policy::kRandom) {
        chosen = static_cast<int32_t>(feasible[rng.Uniform(feasible.size())]);
      } else {
        bool first = true;
        for (uint32_t ni : feasible) {
          Cached& c = cache[ni][p.shape];
          if (c.version != nodes[ni].version || !options.cache_scores) {
            c.choice = Score(policy, typical, nodes[ni], p);
            c.version = nodes[ni].version;
          }
          if (first || c.choice.score > best.score || (c.choice.score == best.score && c.choice.tie > best.tie)) {
            best = c.choice;
            chosen = static_cast<int32_t>(ni);
            first = false;
          }
        }
      }
    }
    if (chosen < 0) {
      ++result.failed;
      result.steps.push_back({-1, used, arrived, frag_total});
      continue;
    }
    Node& n = nodes[chosen];
    if (Fractional(p)) {
      int32_t g = best.gpu;
      if (policy == Policy::kRandom) {
        // Reservoir sampling over the GPUs with enough left.
        int32_t seen = 0;
        for (int k = 0; k < n.gpus; ++k) {
          if (n.left[k] >= p.milli && rng.Uniform(++seen) == 0) g = k;
        }
      }
      if (g < 0) g = BestGpu(n, p);
      n.left[g] -= p.milli;
    } else {
      int32_t after[kMaxGpus];
      TakeWhole(n, p, after);
      std::copy(after, after + n.gpus, n.left);
    }
    n.cpu_left -= p.cpu;
    n.mem_left -= p.mem;
    if (!p.tag.empty()) ++n.tags[p.tag];
    ++n.version;
    frag_total -= n.frag;
    n.frag = NodeFrag(typical, n.cpu_left, n.left, n.gpus, n.model);
    frag_total += n.frag;
    used += static_cast<int64_t>(p.num) * p.milli;
    result.steps.push_back({chosen, used, arrived, frag_total});
  }

  // Discrete curves: mean over the steps whose arrived demand rounds to k%.
  const double per_pct = static_cast<double>(capacity_gpus) * 10.0;  // milli-GPU in 1% of capacity
  std::vector<double> alloc_sum(131, 0), frag_sum(131, 0);
  std::vector<int64_t> hits(131, 0);
  std::vector<int32_t> bucket(result.steps.size());
  for (size_t s = 0; s < result.steps.size(); ++s) {
    const OpenbStep& st = result.steps[s];
    const double ar = std::nearbyint(static_cast<double>(st.arrived_milli) / per_pct);
    bucket[s] = ar <= 130 ? static_cast<int32_t>(ar) : -1;
    if (bucket[s] < 0) continue;
    alloc_sum[bucket[s]] += std::nearbyint(static_cast<double>(st.used_milli) / per_pct * 100) / 100;
    frag_sum[bucket[s]] += st.frag_milli;
    ++hits[bucket[s]];
  }
  result.alloc_pct_by_arrived.assign(131, 0);
  result.frag_pct_by_arrived.assign(131, 0);
  for (int k = 0; k <= 130; ++k) {
    double a = alloc_sum[k], f = frag_sum[k];
    int64_t h = hits[k];
    if (h == 0) {
      for (int j = std::max(0, k - 1); j <= std::min(130, k + 1); ++j) {
        a += alloc_sum[j];
        f += frag_sum[j];
        h += hits[j];
      }
    }
    if (h == 0) continue;
    result.alloc_pct_by_arrived[k] = std::nearbyint(a / static_cast<double>(h) * 100) / 100;
    result.frag_pct_by_arrived[k] =
        std::nearbyint(100.0 * (f / static_cast<double>(h)) / 1000.0 / static_cast<double>(capacity_gpus) * 100) / 100;
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return result;
}

}  // namespace rota::sim
