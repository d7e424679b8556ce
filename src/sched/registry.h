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
#include "sched/actions/action.h"
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
// topology, scan, binpack, spread, fgd, bestfit, drf, quota, lost-work; and the actions
// allocate, shrink-elastic, preempt, reserve, grow-elastic.
const Registry& BuiltinRegistry();

// priority, fifo, resource-fit, gang, topology, binpack.
ProfileConfig DefaultProfileConfig();
// allocate, shrink-elastic, preempt, reserve, grow-elastic.
std::vector<std::string> DefaultActions();

struct WeightedScore {
  const ScorePlugin* plugin;
  int32_t weight;
};

class Profile {
 public:
  // An empty plugin list means DefaultProfileConfig()'s plugins, an empty
  // action list DefaultActions(). Fails on an unknown name, a duplicate, a
  // weight outside 0..100, not exactly one placer, more than one queue
  // order or victim order, an action listed as a plugin or a plugin as an
  // action, or a share_placement that is not a share placer. Without a queue
  // order, admit or victim order plugin listed: drf, quota, lost-work.
  static StatusOr<Profile> Create(const ProfileConfig& config, const Registry& registry);

  const std::string& name() const { return name_; }
  const std::vector<const JobOrderPlugin*>& job_orders() const { return job_orders_; }
  const std::vector<const FilterPlugin*>& filters() const { return filters_; }
  const std::vector<WeightedScore>& scores() const { return scores_; }
  const PlacerPlugin& placer() const { return *placer_; }
  const std::vector<const JobReadyPlugin*>& job_ready() const { return job_ready_; }
  const SharePlacerPlugin& share_placer() const { return *share_placer_; }
  const QueueOrderPlugin& queue_order() const { return *queue_order_; }
  const std::vector<const AdmitPlugin*>& admit() const { return admit_; }
  const VictimOrderPlugin& victim_order() const { return *victim_order_; }
  // The cycle's actions, and the make-room and blocked ones allocate runs
  // for each job, in the order the profile lists them.
  const std::vector<const CycleAction*>& actions() const { return actions_; }
  const std::vector<const MakeRoomAction*>& make_room() const { return make_room_; }
  const std::vector<const BlockedAction*>& when_blocked() const { return when_blocked_; }
  const std::vector<std::string>& action_names() const { return action_names_; }

  // Weighted sum of all scorers.
  int64_t Score(const NodeFit& fit) const {
    int64_t total = 0;
    for (const WeightedScore& s : scores_) total += static_cast<int64_t>(s.weight) * s.plugin->Score(fit);
    return total;
  }

 private:
  Status AddActions(const std::vector<std::string>& names, const Registry& registry);

  std::string name_;
  std::vector<std::unique_ptr<Plugin>> owned_;
  std::vector<const JobOrderPlugin*> job_orders_;
  std::vector<const FilterPlugin*> filters_;
  std::vector<WeightedScore> scores_;
  const PlacerPlugin* placer_ = nullptr;
  std::vector<const JobReadyPlugin*> job_ready_;
  const SharePlacerPlugin* share_placer_ = nullptr;
  const QueueOrderPlugin* queue_order_ = nullptr;
  std::vector<const AdmitPlugin*> admit_;
  const VictimOrderPlugin* victim_order_ = nullptr;
  std::vector<const CycleAction*> actions_;
  std::vector<const MakeRoomAction*> make_room_;
  std::vector<const BlockedAction*> when_blocked_;
  std::vector<std::string> action_names_;
};

}  // namespace rota::sched
