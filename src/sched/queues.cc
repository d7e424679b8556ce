#include "sched/queues.h"

#include <algorithm>
#include <bit>

namespace rota::sched {

void QueueBook::Configure(const ClusterConfig& config) {
  queues_.clear();
  classes_ = PriorityClasses(config);
  Add(config.queues, -1, "", 1.0);
}

void QueueBook::Add(const std::vector<QueueConfig>& children, int32_t parent, const std::string& prefix,
                    double parent_weight) {
  int64_t sum = 0;
  for (const QueueConfig& q : children) sum += q.weight;
  for (const QueueConfig& q : children) {
    Queue e;
    e.path = prefix.empty() ? q.name : prefix + "/" + q.name;
    e.parent = parent;
    e.effective_weight = parent_weight * static_cast<double>(q.weight) / static_cast<double>(std::max<int64_t>(sum, 1));
    e.quota.assign(q.quota.begin(), q.quota.end());
    e.borrowing_limit.assign(q.borrowing_limit.begin(), q.borrowing_limit.end());
    e.lending_limit.assign(q.lending_limit.begin(), q.lending_limit.end());
    e.has_quota = !q.quota.empty();
    e.leaf = q.children.empty();
    const int32_t index = static_cast<int32_t>(queues_.size());
    // Copies: the recursion grows queues_, which may move its elements.
    const std::string path = e.path;
    const double weight = e.effective_weight;
    queues_.push_back(std::move(e));
    if (parent >= 0) queues_[parent].children.push_back(index);
    Add(q.children, index, path, weight);
  }
}

int32_t QueueBook::LeafIndex(const std::string& path) const {
  for (size_t i = 0; i < queues_.size(); ++i) {
    if (queues_[i].leaf && queues_[i].path == path) return static_cast<int32_t>(i);
  }
  return -1;
}

bool QueueBook::MayBorrow(const JobSpec& spec) const {
  if (spec.preemptible) return true;
  for (const PriorityClassConfig& c : classes_) {
    if (c.name == spec.priority_class) return c.preemptible;
  }
  return false;
}

void QueueBook::SetModels(const Snapshot& snap) {
  if (models_ == snap.gpu_models()) return;
  models_ = snap.gpu_models();
  capacity_.assign(models_.size(), 0);
  for (Queue& q : queues_) q.used.assign(models_.size(), 0);
}

QueueBook::ModelGpus QueueBook::Charged(const Snapshot& snap, const JobRecord& job) {
  ModelGpus add, shares;
  for (const ReplicaPlacement& r : job.placement) {
    const int16_t model = snap.node(r.node).model;
    if (model < 0) continue;
    if (r.shares_gpu()) {  // fractions and MIG slices: their whole GPUs, rounded up per job and model
      AddShare(&shares, model, ChargedMilli(job.spec().tasks[r.task].gpu_share, snap.node(r.node).spec.gpu_memory));
    } else {
      add.push_back({model, std::popcount(r.gpu_mask)});
    }
  }
  for (const auto& g : SharesAsGpus(shares)) add.push_back(g);
  return add;
}

void QueueBook::Reset(const Snapshot& snap) {
  models_ = snap.gpu_models();
  total_gpus_ = 0;
  total_cpu_ = 0;
  total_memory_ = 0;
  capacity_.assign(models_.size(), 0);
  for (const NodeState& n : snap.nodes()) {
    total_gpus_ += n.spec.gpus;
    total_cpu_ += n.spec.cpu;
    total_memory_ += n.spec.memory;
    if (n.model >= 0) capacity_[n.model] += n.spec.gpus;
  }
  for (Queue& q : queues_) {
    q.used.assign(models_.size(), 0);
    q.used_total = 0;
    q.used_cpu = 0;
    q.used_memory = 0;
  }
  for (const auto& [id, job] : snap.live_jobs()) {
    if (job->state != JobState::kRunning && job->state != JobState::kPreempting) continue;
    const int32_t leaf = LeafIndex(job->spec().queue);
    if (leaf < 0) continue;
    Charge(leaf, Charged(snap, *job));
    MilliCpu cpu = 0;
    MemoryMiB memory = 0;
    for (const ReplicaPlacement& r : job->placement) {
      cpu += job->spec().tasks[r.task].cpu;
      memory += job->spec().tasks[r.task].memory;
    }
    ChargeResources(leaf, cpu, memory);
  }
}

int64_t QueueBook::Lookup(const std::vector<std::pair<std::string, int64_t>>& m, int16_t model, int64_t missing) const {
  for (const auto& [name, n] : m) {
    if (model >= 0 && static_cast<size_t>(model) < models_.size() && name == models_[model]) return n;
  }
  return missing;
}

bool QueueBook::Admits(int32_t leaf, const ModelGpus& add, bool may_borrow, std::string* why, bool empty) const {
  if (!empty && !Lends(add, leaf, why)) return false;
  for (int32_t q = leaf; q >= 0; q = queues_[q].parent) {
    const Queue& e = queues_[q];
    if (!e.has_quota) continue;
    for (const auto& [model, n] : add) {
      // A job kept within guarantees is not held back by what siblings
      // borrow beyond theirs (that is reclaimable, and preempt reclaims it).
      const int64_t used = empty ? 0 : !may_borrow && q != leaf ? HeldWithinGuarantees(q, model) : e.used[model];
      const int64_t quota = Lookup(e.quota, model, 0);
      constexpr int64_t kUnlimited = int64_t{1} << 50;
      const int64_t ceiling = quota + Lookup(e.borrowing_limit, model, kUnlimited);
      const int64_t limit = may_borrow ? ceiling : quota;
      // Whatever is reclaimable, a queue never holds more than its ceiling.
      const bool over_ceiling = !empty && e.used[model] + n > ceiling;
      if (used + n > limit || over_ceiling) {
        const std::string& name = models_[model];
        const bool within = !may_borrow && q != leaf && !empty;
        if (used + n <= limit) {  // within guarantees, but the borrowers fill its ceiling
          *why = "queue " + e.path + " holds " + std::to_string(e.used[model]) + " " + name + " GPUs and would hold " +
                 std::to_string(e.used[model] + n) + "; its limit is " + std::to_string(quota) + " guaranteed + " +
                 std::to_string(ceiling - quota) + " borrowable (its children borrow the rest)";
          return false;
        }
        *why = "queue " + e.path + " holds " + std::to_string(used) + " " + name + " GPUs" +
               (within ? " within its children's guarantees" : "") + " and would hold " +
               std::to_string(used + n) + "; its limit is " + std::to_string(quota) + " guaranteed" +
               (may_borrow ? " + " + std::to_string(limit - quota) + " borrowable"
                           : " (jobs that may not be preempted use only the guarantee)");
        return false;
      }
    }
  }
  return true;
}

bool QueueBook::Lends(const ModelGpus& add, int32_t leaf, std::string* why) const {
  // The top-level queue the job's leaf belongs to.
  int32_t top = leaf;
  while (queues_[top].parent >= 0) top = queues_[top].parent;
  for (const auto& [model, n] : add) {
    constexpr int64_t kUnlimited = int64_t{1} << 50;
    int64_t borrowed = 0, lendable = 0, guaranteed = 0;
    bool any_limit = false;
    for (size_t i = 0; i < queues_.size(); ++i) {
      const Queue& q = queues_[i];
      if (q.parent >= 0) continue;
      const int64_t quota = Lookup(q.quota, model, 0);
      const int64_t used = q.used[model] + (static_cast<int32_t>(i) == top ? n : 0);
      const int64_t limit = Lookup(q.lending_limit, model, kUnlimited);
      any_limit = any_limit || limit != kUnlimited;
      guaranteed += quota;
      borrowed += std::max<int64_t>(0, used - quota);
      lendable += std::min(std::max<int64_t>(0, quota - used), limit);
    }
    if (!any_limit) continue;  // without lending limits, capacity alone bounds borrowing
    lendable += std::max<int64_t>(0, capacity_[model] - guaranteed);
    if (borrowed > lendable) {
      *why = "borrowing " + std::to_string(borrowed) + " " + models_[model] + " GPUs across queues; only " +
             std::to_string(lendable) + " may be lent (lending limits keep the rest for their queues)";
      return false;
    }
  }
  return true;
}

void QueueBook::Charge(int32_t leaf, const ModelGpus& add) {
  for (int32_t q = leaf; q >= 0; q = queues_[q].parent) {
    for (const auto& [model, n] : add) {
      queues_[q].used[model] += n;
      queues_[q].used_total += n;
    }
  }
}

bool QueueBook::Borrowing(int32_t leaf) const {
  const Queue& q = queues_[leaf];
  if (!q.has_quota) return false;
  for (size_t m = 0; m < q.used.size(); ++m) {
    if (q.used[m] > Lookup(q.quota, static_cast<int16_t>(m), 0)) return true;
  }
  return false;
}

int64_t QueueBook::HeldWithinGuarantees(int32_t q, int16_t model) const {
  const Queue& e = queues_[q];
  if (e.leaf) return e.used[model];
  int64_t held = 0;
  for (int32_t c : e.children) {
    const int64_t inner = HeldWithinGuarantees(c, model);
    held += queues_[c].has_quota ? std::min(inner, Lookup(queues_[c].quota, model, 0)) : inner;
  }
  return held;
}

bool QueueBook::MayReclaim(int32_t leaf, int32_t victim_leaf, const ModelGpus& add) const {
  return MayReclaim(leaf, victim_leaf, add, {});
}

bool QueueBook::MayReclaim(int32_t leaf, int32_t victim_leaf, const ModelGpus& add, const ModelGpus& victim_holds) const {
  // The lowest common ancestor (-1: different top-level queues).
  std::vector<int32_t> mine;
  for (int32_t q = leaf; q >= 0; q = queues_[q].parent) mine.push_back(q);
  int32_t common = -1;
  for (int32_t q = victim_leaf; q >= 0 && common < 0; q = queues_[q].parent) {
    if (std::find(mine.begin(), mine.end(), q) != mine.end()) common = q;
  }
  bool any_quota = false;
  for (int32_t q = leaf; q != common; q = queues_[q].parent) {
    const Queue& e = queues_[q];
    if (!e.has_quota) continue;
    any_quota = true;
    for (const auto& [model, n] : add) {
      if (HeldWithinGuarantees(q, model) + n > Lookup(e.quota, model, 0)) return false;
    }
  }
  if (!any_quota) return false;
  for (int32_t q = victim_leaf; q != common; q = queues_[q].parent) {
    const Queue& e = queues_[q];
    if (!e.has_quota) continue;
    for (size_t m = 0; m < e.used.size(); ++m) {
      const auto model = static_cast<int16_t>(m);
      if (!victim_holds.empty() && std::none_of(victim_holds.begin(), victim_holds.end(),
                                                 [&](const auto& h) { return h.first == model && h.second > 0; })) {
        continue;
      }
      if (HeldWithinGuarantees(q, model) > Lookup(e.quota, model, 0)) return true;
    }
  }
  return false;
}

void QueueBook::ChargeResources(int32_t leaf, MilliCpu cpu, MemoryMiB memory) {
  for (int32_t q = leaf; q >= 0; q = queues_[q].parent) {
    queues_[q].used_cpu += cpu;
    queues_[q].used_memory += memory;
  }
}

double QueueBook::Share(int32_t leaf) const {
  const Queue& q = queues_[leaf];
  // Dominant resource: GPUs (with decayed past use), CPU or memory.
  double share = 0;
  if (total_gpus_ > 0) share = (static_cast<double>(q.used_total) + q.history) / static_cast<double>(total_gpus_);
  if (total_cpu_ > 0) share = std::max(share, static_cast<double>(q.used_cpu) / static_cast<double>(total_cpu_));
  if (total_memory_ > 0) share = std::max(share, static_cast<double>(q.used_memory) / static_cast<double>(total_memory_));
  return share / q.effective_weight;
}

void QueueBook::SetHistory(const std::map<std::string, double>& average_gpus) {
  for (Queue& q : queues_) {
    auto it = average_gpus.find(q.path);
    q.history = it == average_gpus.end() ? 0 : it->second;
  }
}

void AddShare(QueueBook::ModelGpus* milli_by_model, int16_t model, int64_t milli) {
  for (auto& [m, n] : *milli_by_model) {
    if (m == model) {
      n += milli;
      return;
    }
  }
  milli_by_model->push_back({model, milli});
}

int64_t ChargedMilli(const GpuShare& share, MemoryMiB gpu_memory) {
  const int64_t compute = share.milli();
  if (share.memory <= 0 || gpu_memory <= 0) return compute;
  const int64_t memory = std::min<int64_t>(1000, (int64_t{share.memory} * 1000 + gpu_memory - 1) / gpu_memory);
  return std::max(compute, memory);
}

QueueBook::ModelGpus SharesAsGpus(const QueueBook::ModelGpus& milli_by_model) {
  QueueBook::ModelGpus out;
  for (const auto& [model, milli] : milli_by_model) {
    if (model >= 0 && milli > 0) out.push_back({model, (milli + 999) / 1000});
  }
  return out;
}

}  // namespace rota::sched
