#include "sched/registry.h"

#include <algorithm>

#include "sched/plugins/builtin.h"

namespace rota::sched {

void Registry::Register(std::string name, Factory factory) { factories_.emplace(std::move(name), std::move(factory)); }

std::unique_ptr<Plugin> Registry::Create(const std::string& name) const {
  auto it = factories_.find(name);
  return it == factories_.end() ? nullptr : it->second();
}

std::vector<std::string> Registry::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : factories_) out.push_back(name);
  return out;
}

const Registry& BuiltinRegistry() {
  static const Registry* registry = [] {
    auto* r = new Registry();
    RegisterBuiltinPlugins(*r);
    return r;
  }();
  return *registry;
}

ProfileConfig DefaultProfileConfig() {
  ProfileConfig p;
  p.name = "default";
  p.plugins = {{"priority", 1}, {"fifo", 1}, {"resource-fit", 1}, {"gang", 1}, {"topology", 1}, {"binpack", 1}};
  return p;
}

std::vector<std::string> DefaultActions() { return {"allocate", "shrink-elastic", "preempt", "reserve", "grow-elastic"}; }

namespace {

bool IsAction(const Plugin* p) {
  return dynamic_cast<const CycleAction*>(p) != nullptr || dynamic_cast<const MakeRoomAction*>(p) != nullptr ||
         dynamic_cast<const BlockedAction*>(p) != nullptr;
}

// The registered names of one kind, for an error message.
std::string Known(const Registry& registry, bool actions) {
  std::string known;
  for (const auto& n : registry.Names()) {
    if (IsAction(registry.Create(n).get()) == actions) known += (known.empty() ? "" : ", ") + n;
  }
  return known;
}

}  // namespace

Status Profile::AddActions(const std::vector<std::string>& names, const Registry& registry) {
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = "profile.actions[" + std::to_string(i) + "]";
    for (size_t j = 0; j < i; ++j) {
      if (names[j] == names[i]) return InvalidArgumentError(path + ": action '" + names[i] + "' listed twice");
    }
    std::unique_ptr<Plugin> action = registry.Create(names[i]);
    if (action == nullptr || !IsAction(action.get())) {
      return InvalidArgumentError(path + ": unknown action '" + names[i] + "' (known: " + Known(registry, true) + ")");
    }
    if (auto* a = dynamic_cast<const CycleAction*>(action.get())) actions_.push_back(a);
    if (auto* a = dynamic_cast<const MakeRoomAction*>(action.get())) make_room_.push_back(a);
    if (auto* a = dynamic_cast<const BlockedAction*>(action.get())) when_blocked_.push_back(a);
    action_names_.push_back(names[i]);
    owned_.push_back(std::move(action));
  }
  const bool allocates = std::find(names.begin(), names.end(), "allocate") != names.end();
  if (!allocates && (!make_room_.empty() || !when_blocked_.empty())) {
    return InvalidArgumentError("profile.actions: '" +
                                std::string(!make_room_.empty() ? make_room_[0]->name() : when_blocked_[0]->name()) +
                                "' acts inside allocate; list allocate too");
  }
  return Status::Ok();
}

StatusOr<Profile> Profile::Create(const ProfileConfig& config, const Registry& registry) {
  const ProfileConfig& effective = config.plugins.empty() ? DefaultProfileConfig() : config;
  Profile p;
  p.name_ = effective.name.empty() ? "default" : effective.name;
  for (size_t i = 0; i < effective.plugins.size(); ++i) {
    const PluginConfig& pc = effective.plugins[i];
    const std::string path = "profile.plugins[" + std::to_string(i) + "]";
    for (size_t j = 0; j < i; ++j) {
      if (effective.plugins[j].name == pc.name) return InvalidArgumentError(path + ": plugin '" + pc.name + "' listed twice");
    }
    std::unique_ptr<Plugin> plugin = registry.Create(pc.name);
    if (plugin == nullptr) {
      return InvalidArgumentError(path + ": unknown plugin '" + pc.name + "' (known: " + Known(registry, false) + ")");
    }
    if (IsAction(plugin.get())) {
      return InvalidArgumentError(path + ": '" + pc.name + "' is an action; list it under profile.actions");
    }
    if (pc.weight < 0 || pc.weight > 100) return InvalidArgumentError(path + ".weight: must be between 0 and 100");
    if (auto* o = dynamic_cast<const JobOrderPlugin*>(plugin.get())) p.job_orders_.push_back(o);
    if (auto* f = dynamic_cast<const FilterPlugin*>(plugin.get())) p.filters_.push_back(f);
    if (auto* s = dynamic_cast<const ScorePlugin*>(plugin.get())) p.scores_.push_back({s, pc.weight});
    if (auto* r = dynamic_cast<const JobReadyPlugin*>(plugin.get())) p.job_ready_.push_back(r);
    if (auto* pl = dynamic_cast<const PlacerPlugin*>(plugin.get())) {
      if (p.placer_ != nullptr) {
        return InvalidArgumentError(path + ": a profile has exactly one placer; '" + std::string(p.placer_->name()) +
                                    "' and '" + pc.name + "' are both placers");
      }
      p.placer_ = pl;
    }
    if (auto* q = dynamic_cast<const QueueOrderPlugin*>(plugin.get())) {
      if (p.queue_order_ != nullptr) {
        return InvalidArgumentError(path + ": a profile has at most one queue order; '" +
                                    std::string(p.queue_order_->name()) + "' and '" + pc.name + "' are both");
      }
      p.queue_order_ = q;
    }
    if (auto* a = dynamic_cast<const AdmitPlugin*>(plugin.get())) p.admit_.push_back(a);
    if (auto* v = dynamic_cast<const VictimOrderPlugin*>(plugin.get())) {
      if (p.victim_order_ != nullptr) {
        return InvalidArgumentError(path + ": a profile has at most one victim order; '" +
                                    std::string(p.victim_order_->name()) + "' and '" + pc.name + "' are both");
      }
      p.victim_order_ = v;
    }
    if (dynamic_cast<const SharePlacerPlugin*>(plugin.get()) != nullptr) {
      return InvalidArgumentError(path + ": '" + pc.name + "' is a share placer; choose it with profile.share_placement");
    }
    p.owned_.push_back(std::move(plugin));
  }
  if (p.placer_ == nullptr) return InvalidArgumentError("profile.plugins: no placer enabled (e.g. topology)");
  // The points a profile need not name: their defaults.
  auto fallback = [&](const char* name) -> const Plugin* {
    std::unique_ptr<Plugin> plugin = registry.Create(name);
    if (plugin == nullptr) return nullptr;
    p.owned_.push_back(std::move(plugin));
    return p.owned_.back().get();
  };
  if (p.queue_order_ == nullptr) p.queue_order_ = dynamic_cast<const QueueOrderPlugin*>(fallback("drf"));
  if (p.admit_.empty()) {
    if (auto* a = dynamic_cast<const AdmitPlugin*>(fallback("quota"))) p.admit_.push_back(a);
  }
  if (p.victim_order_ == nullptr) p.victim_order_ = dynamic_cast<const VictimOrderPlugin*>(fallback("lost-work"));
  if (p.queue_order_ == nullptr || p.admit_.empty() || p.victim_order_ == nullptr) {
    return InvalidArgumentError("profile.plugins: the registry lacks drf, quota or lost-work for the points left unnamed");
  }
  {
    std::unique_ptr<Plugin> share = registry.Create(config.share_placement);
    auto* sp = dynamic_cast<const SharePlacerPlugin*>(share.get());
    if (sp == nullptr) {
      return InvalidArgumentError("profile.share_placement: '" + config.share_placement + "' is not fgd or bestfit");
    }
    p.share_placer_ = sp;
    p.owned_.push_back(std::move(share));
  }
  ROTA_RETURN_IF_ERROR(p.AddActions(config.actions.empty() ? DefaultActions() : config.actions, registry));
  return p;
}

}  // namespace rota::sched
