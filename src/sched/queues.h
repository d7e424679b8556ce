// QueueBook: the queue tree of the cluster config, with what each queue holds
// during a cycle. It answers two questions for the engine:
//   - Admits: does a placement keep every queue on the job's path within its
//     guaranteed quota plus its borrowing limit (only the guarantee for jobs
//     that may not be preempted, since borrowed capacity can be reclaimed)?
//   - Share: the queue's weighted dominant share of the cluster (the largest
//     of its shares of GPUs, CPU and memory: DRF), for ordering queues fairly
//     (the lowest share goes next). Weights are hierarchical:
//     a leaf's effective weight is the product, along its path, of its
//     weight over the sum of its siblings'.
// Quotas count GPUs per model; a queue without a quota for a model has none
// guaranteed there. A queue with no quotas at all is not limited. Lending:
// what top-level queues borrow in total must come from capacity no queue is
// guaranteed, or from other top-level queues' unused guarantees, each lending
// at most its `lending_limit`.
//
// Thread-safety: one owner (the scheduler).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/cluster_config.h"
#include "core/cluster_state.h"

namespace rota::sched {

class QueueBook {
 public:
  void Configure(const ClusterConfig& config);
  // Usage from the snapshot's running jobs.
  void Reset(const Snapshot& snap);
  // Only the snapshot's GPU model names (enough for Admits with `empty`).
  void SetModels(const Snapshot& snap);

  bool configured() const { return !queues_.empty(); }
  int32_t LeafIndex(const std::string& path) const;
  // May a job of priority class `priority_class` (or with spec.preemptible) borrow?
  bool MayBorrow(const JobSpec& spec) const;

  // GPUs per interned model that a placement would add.
  using ModelGpus = std::vector<std::pair<int16_t, int64_t>>;
  // With `empty`, as if the queues held nothing (a request beyond even that
  // can never be admitted).
  bool Admits(int32_t leaf, const ModelGpus& add, bool may_borrow, std::string* why, bool empty = false) const;
  void Charge(int32_t leaf, const ModelGpus& add);
  // What a placed job is charged (Reset): its whole GPUs by model, its
  // shares summed and rounded up per model.
  static ModelGpus Charged(const Snapshot& snap, const JobRecord& job);
  // CPU and memory a placement adds (for dominant shares).
  void ChargeResources(int32_t leaf, MilliCpu cpu, MemoryMiB memory);
  double Share(int32_t leaf) const;
  // Decayed past usage per leaf queue path, as average GPUs held over the
  // decay window; it adds to the queue's share, so a queue that ran a lot
  // recently yields to one that did not. Kept until replaced.
  void SetHistory(const std::map<std::string, double>& average_gpus);
  // Whether the leaf holds more GPUs of some model than it is guaranteed.
  bool Borrowing(int32_t leaf) const;
  // Whether a job of `leaf` adding `add` may reclaim from a gang of
  // `victim_leaf` (evict it as a borrower): below their lowest common
  // ancestor, every queue with quotas on the job's side stays within its
  // guarantee (there is one at least), and some queue on the victim's side
  // holds more than its guarantee. Above the common ancestor nothing
  // changes: the eviction moves GPUs inside it, so a parent over its own
  // quota does not hold a team below its guarantee while a sibling borrows.
  // A queue's holding within guarantees counts its children's up to each
  // child's guarantee (what they borrow is reclaimable), so two queues can
  // never take capacity back from each other in turn.
  bool MayReclaim(int32_t leaf, int32_t victim_leaf, const ModelGpus& add) const;
  // The same, for a gang of `victim_leaf` holding `victim_holds`: its side
  // must hold more than its guarantees of a model the gang holds (a queue
  // borrowing H100s gives back no A100s).
  bool MayReclaim(int32_t leaf, int32_t victim_leaf, const ModelGpus& add, const ModelGpus& victim_holds) const;
  // Whether the queue or one above it has a quota (its jobs' admission can refuse them).
  bool Limited(int32_t q) const {
    for (; q >= 0; q = queues_[q].parent) {
      if (queues_[q].has_quota) return true;
    }
    return false;
  }
  // The queue's guaranteed GPUs of `model` (0 without a quota for it).
  int64_t Guarantee(int32_t q, int16_t model) const { return Lookup(queues_[q].quota, model, 0); }
  // GPUs of `model` the queue holds within guarantees: a leaf all it holds;
  // a parent the sum of its children's, each up to the child's guarantee.
  int64_t HeldWithinGuarantees(int32_t q, int16_t model) const;
  const std::string& path(int32_t q) const { return queues_[q].path; }
  const std::string& model_name(int16_t model) const { return models_[model]; }
  // A queue's weight times its ancestors' shares of their levels (0..1].
  double effective_weight(int32_t q) const { return queues_[q].effective_weight; }

 private:
  struct Queue {
    std::string path;
    int32_t parent = -1;
    double effective_weight = 1;
    std::vector<std::pair<std::string, int64_t>> quota;  // by model name
    std::vector<std::pair<std::string, int64_t>> borrowing_limit;
    std::vector<std::pair<std::string, int64_t>> lending_limit;
    bool has_quota = false;
    bool leaf = false;
    std::vector<int32_t> children;
    std::vector<int64_t> used;  // by interned model
    int64_t used_total = 0;
    MilliCpu used_cpu = 0;
    MemoryMiB used_memory = 0;
    double history = 0;  // average GPUs over the decay window
  };
  void Add(const std::vector<QueueConfig>& children, int32_t parent, const std::string& prefix, double parent_weight);
  int64_t Lookup(const std::vector<std::pair<std::string, int64_t>>& m, int16_t model, int64_t missing) const;

  std::vector<Queue> queues_;
  std::vector<PriorityClassConfig> classes_;
  std::vector<std::string> models_;  // interned names, from the snapshot
  std::vector<int64_t> capacity_;     // GPUs per interned model
  bool Lends(const ModelGpus& add, int32_t leaf, std::string* why) const;
  int64_t total_gpus_ = 0;
  MilliCpu total_cpu_ = 0;
  MemoryMiB total_memory_ = 0;
};

// Shares of GPUs (fractions, MIG slices) count against quotas as whole GPUs,
// summed per model and each model's rounded up. AddShare adds `milli`
// milli-GPU of `model` to a tally; SharesAsGpus turns a tally into GPUs
// (models < 0, unknown, left out).
void AddShare(QueueBook::ModelGpus* milli_by_model, int16_t model, int64_t milli);
QueueBook::ModelGpus SharesAsGpus(const QueueBook::ModelGpus& milli_by_model);
// What one replica on `share` of a GPU with `gpu_memory` (0: unknown) counts
// as, in milli-GPU: its compute share, or, where it bounds its GPU memory,
// that memory's part of the GPU if more. A replica asking a thousandth of a
// GPU and all its memory holds the whole GPU (no other share fits beside
// it), and counted a thousandth: 64 such replicas held 64 GPUs against a
// quota charged 1.
int64_t ChargedMilli(const GpuShare& share, MemoryMiB gpu_memory);

}  // namespace rota::sched
