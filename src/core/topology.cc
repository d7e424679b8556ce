#include "core/topology.h"

#include <algorithm>
#include <numeric>
#include <unordered_map>

namespace rota {

Status Topology::ValidateLevels(const std::vector<std::string>& levels) {
  auto node_it = std::find(levels.begin(), levels.end(), "node");
  if (node_it == levels.end()) return InvalidArgumentError("topology: must include the level 'node'");
  for (auto it = levels.begin(); it != node_it; ++it) {
    if (*it != "nvlink") {
      return InvalidArgumentError("topology: only 'nvlink' may come before 'node', got '" + *it + "'");
    }
  }
  for (size_t i = 0; i < levels.size(); ++i) {
    if (levels[i].empty()) return InvalidArgumentError("topology[" + std::to_string(i) + "]: empty level name");
    if (levels[i] == "cluster") return InvalidArgumentError("topology: 'cluster' is the implicit root; do not list it");
    for (size_t j = 0; j < i; ++j) {
      if (levels[i] == levels[j]) return InvalidArgumentError("topology: level '" + levels[i] + "' appears twice");
    }
  }
  return Status::Ok();
}

std::string Topology::DomainName(const std::vector<std::string>& domain_levels, const NodeSpec& node, size_t l) {
  auto it = node.labels.find(domain_levels[l]);
  if (it != node.labels.end()) return it->second;
  // Unlabelled: the domain of the level below alone (a rack without a
  // spine is its own spine, '~r1'), or the node alone at the first level.
  return "~" + (l == 0 ? node.name : DomainName(domain_levels, node, l - 1));
}

StatusOr<Topology> Topology::Build(const std::vector<std::string>& levels, const std::vector<NodeSpec>& nodes) {
  ROTA_RETURN_IF_ERROR(ValidateLevels(levels));
  Topology t;
  t.level_names_ = levels;
  auto node_it = std::find(levels.begin(), levels.end(), "node");
  t.has_nvlink_ = node_it != levels.begin();
  t.domain_levels_.assign(node_it + 1, levels.end());
  const size_t L = t.domain_levels_.size();
  const size_t n = nodes.size();

  // Domain name of node i at level l.
  auto name_of = [&](size_t i, size_t l) { return DomainName(t.domain_levels_, nodes[i], l); };

  // Rank each domain by first appearance, outermost level first, so that the
  // position order is the order in which the config declared things.
  std::vector<std::unordered_map<std::string, uint32_t>> rank(L);
  std::vector<std::vector<uint32_t>> key(n, std::vector<uint32_t>(L));
  for (size_t i = 0; i < n; ++i) {
    for (size_t l = 0; l < L; ++l) {
      auto [it, inserted] = rank[l].try_emplace(name_of(i, l), static_cast<uint32_t>(rank[l].size()));
      key[i][l] = it->second;
    }
  }
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    for (size_t l = L; l-- > 0;) {
      if (key[a][l] != key[b][l]) return key[a][l] < key[b][l];
    }
    return false;
  });

  t.node_at_.reserve(n);
  t.pos_of_.assign(n, 0);
  for (uint32_t pos = 0; pos < n; ++pos) {
    t.node_at_.push_back(NodeId(order[pos]));
    t.pos_of_[order[pos]] = pos;
  }

  // Domains: the root, then each level from the outermost in, as runs of equal key.
  t.by_level_.assign(L + 1, {});
  t.ancestors_.assign(n * (L + 1), -1);
  t.domains_.push_back({"cluster", static_cast<int32_t>(L), -1, 0, static_cast<uint32_t>(n)});
  t.root_ = 0;
  t.by_level_[L].push_back(0);
  for (size_t pos = 0; pos < n; ++pos) t.ancestors_[pos * (L + 1) + L] = 0;
  std::vector<std::unordered_map<std::string, int32_t>> seen(L);
  for (size_t l = L; l-- > 0;) {
    uint32_t pos = 0;
    while (pos < n) {
      uint32_t end = pos + 1;
      while (end < n && key[order[end]][l] == key[order[pos]][l] &&
             t.ancestors_[end * (L + 1) + l + 1] == t.ancestors_[pos * (L + 1) + l + 1]) {
        ++end;
      }
      std::string name = name_of(order[pos], l);
      if (seen[l].count(name)) {
        const Domain& other_parent = t.domains_[t.domains_[seen[l][name]].parent];
        return InvalidArgumentError("topology: " + t.domain_levels_[l] + " '" + name + "' lies in two " +
                                    t.LevelName(l + 1) + "s ('" + other_parent.name + "' and '" +
                                    t.domains_[t.ancestors_[pos * (L + 1) + l + 1]].name + "')");
      }
      int32_t id = static_cast<int32_t>(t.domains_.size());
      seen[l][name] = id;
      t.domains_.push_back({name, static_cast<int32_t>(l), t.ancestors_[pos * (L + 1) + l + 1], pos, end});
      t.by_level_[l].push_back(id);
      for (uint32_t p = pos; p < end; ++p) t.ancestors_[p * (L + 1) + l] = id;
      pos = end;
    }
  }
  return t;
}

int32_t Topology::DomainLevelIndex(const std::string& name) const {
  if (name == "node") return -1;
  if (name == "cluster") return static_cast<int32_t>(domain_levels_.size());
  for (size_t i = 0; i < domain_levels_.size(); ++i) {
    if (domain_levels_[i] == name) return static_cast<int32_t>(i);
  }
  return -2;
}

std::string Topology::LevelName(int32_t domain_level) const {
  if (domain_level < 0) return "node";
  if (static_cast<size_t>(domain_level) >= domain_levels_.size()) return "cluster";
  return domain_levels_[domain_level];
}

}  // namespace rota
