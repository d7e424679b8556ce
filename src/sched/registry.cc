#include "sched/registry.h"

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
      std::string known;
      for (const auto& n : registry.Names()) known += (known.empty() ? "" : ", ") + n;
      return InvalidArgumentError(path + ": unknown plugin '" + pc.name + "' (known: " + known + ")");
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
    p.owned_.push_back(std::move(plugin));
  }
  if (p.placer_ == nullptr) return InvalidArgumentError("profile.plugins: no placer enabled (e.g. topology)");
  return p;
}

}  // namespace rota::sched
