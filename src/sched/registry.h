// Registry: plugin name -> factory. Profile: the plugins a scheduler runs,
// resolved from a ProfileConfig (names and weights) against a registry.
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(Profile p, Profile::Create(config.profile, BuiltinRegistry()));
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cluster_config.h"
#include "sched/framework.h"

namespace rota::sched {

class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Plugin>()>;
  // REQUIRES: name not registered yet.
  void Register(std::string name, Factory factory);
  std::unique_ptr<Plugin> Create(const std::string& name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, Factory> factories_;
};

// The plugins shipped with rota: priority, fifo, resource-fit, gang,
// topology, scan, binpack, spread.
const Registry& BuiltinRegistry();

// priority, fifo, resource-fit, gang, topology, binpack.
ProfileConfig DefaultProfileConfig();

struct WeightedScore {
  const ScorePlugin* plugin;
  int32_t weight;
};

class Profile {
 public:
  // An empty plugin list means DefaultProfileConfig(). Fails on an unknown
  // name, a duplicate, a weight outside 0..100, or not exactly one placer.
  static StatusOr<Profile> Create(const ProfileConfig& config, const Registry& registry);

  const std::string& name() const { return name_; }
  const std::vector<const JobOrderPlugin*>& job_orders() const { return job_orders_; }
  const std::vector<const FilterPlugin*>& filters() const { return filters_; }
  const std::vector<WeightedScore>& scores() const { return scores_; }
  const PlacerPlugin& placer() const { return *placer_; }
  const std::vector<const JobReadyPlugin*>& job_ready() const { return job_ready_; }

  // Weighted sum of all scorers.
  int64_t Score(const NodeFit& fit) const {
    int64_t total = 0;
    for (const WeightedScore& s : scores_) total += static_cast<int64_t>(s.weight) * s.plugin->Score(fit);
    return total;
  }

 private:
  std::string name_;
  std::vector<std::unique_ptr<Plugin>> owned_;
  std::vector<const JobOrderPlugin*> job_orders_;
  std::vector<const FilterPlugin*> filters_;
  std::vector<WeightedScore> scores_;
  const PlacerPlugin* placer_ = nullptr;
  std::vector<const JobReadyPlugin*> job_ready_;
};

}  // namespace rota::sched
