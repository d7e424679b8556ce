// Topology: one tree from the GPU up. Level names above the GPU are
// configurable, innermost first; the default is [nvlink, node, rack, spine].
// `nvlink` (islands inside a node) may only come before `node`; every level
// after `node` groups nodes by the node label of the same name (rack, spine,
// zone, ...). Above the outermost level sits one root domain, the cluster.
//
// Nodes get a *position* such that every domain is a contiguous range of
// positions: the engine searches a rack as [begin, end) of one array.
//
// Thread-safety: immutable after Build; share freely.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "core/node.h"

namespace rota {

class Topology {
 public:
  static constexpr const char* kDefaultLevels[] = {"nvlink", "node", "rack", "spine"};

  struct Domain {
    std::string name;
    int32_t level;    // index into domain levels (0 = first level above node); root = levels()
    int32_t parent;   // domain index, -1 for the root
    uint32_t begin;   // positions [begin, end)
    uint32_t end;
  };

  Topology() = default;

  // Checks the level names: unique, `node` present, only `nvlink` below it.
  static Status ValidateLevels(const std::vector<std::string>& levels);
  // The domain `node` is in at domain level `l` (0: the first above the
  // node): its label for the level, else '~' and the domain below's name (a
  // rack without a spine is the spine '~r1'; no rack: the rack '~NODE').
  static std::string DomainName(const std::vector<std::string>& domain_levels, const NodeSpec& node, size_t l);

  // Builds the tree over `nodes` (indexed by NodeId). A node without a label
  // for a level is, at that level, the domain below it alone (DomainName).
  // Fails if one domain has two parents (a rack in two spines).
  static StatusOr<Topology> Build(const std::vector<std::string>& levels, const std::vector<NodeSpec>& nodes);

  const std::vector<std::string>& level_names() const { return level_names_; }
  // Names of the levels above `node`, innermost first (e.g. rack, spine).
  const std::vector<std::string>& domain_levels() const { return domain_levels_; }
  bool has_nvlink() const { return has_nvlink_; }

  // Index into domain_levels() of a level name; -1 for "node"; -2 if unknown.
  // "cluster" names the root (domain_levels().size()).
  int32_t DomainLevelIndex(const std::string& name) const;
  std::string LevelName(int32_t domain_level) const;

  size_t num_nodes() const { return node_at_.size(); }
  NodeId node_at(uint32_t pos) const { return node_at_[pos]; }
  uint32_t position_of(NodeId id) const { return pos_of_[id.value()]; }

  const std::vector<Domain>& domains() const { return domains_; }
  int32_t root() const { return root_; }
  // Domain indices of one level, in position order.
  const std::vector<int32_t>& domains_at(int32_t level) const { return by_level_[level]; }
  // The domain of `level` holding position `pos`.
  int32_t DomainOf(uint32_t pos, int32_t level) const {
    return ancestors_[static_cast<size_t>(pos) * (domain_levels_.size() + 1) + level];
  }

 private:
  std::vector<std::string> level_names_;
  std::vector<std::string> domain_levels_;
  bool has_nvlink_ = false;
  std::vector<NodeId> node_at_;
  std::vector<uint32_t> pos_of_;
  std::vector<Domain> domains_;
  std::vector<std::vector<int32_t>> by_level_;  // levels + root
  std::vector<int32_t> ancestors_;              // pos * (L+1) + level
  int32_t root_ = -1;
};

}  // namespace rota
