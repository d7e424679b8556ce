// Strong ids: a typed wrapper over an integer so a NodeIndex cannot be passed
// where a JobId is expected. Values, trivially copyable, hashable.
//
// Example:
//   using JobId = StrongId<struct JobTag, uint64_t>;
//   JobId id(42); id.value() == 42;
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace rota {

template <typename Tag, typename Rep = uint32_t>
class StrongId {
 public:
  using rep_type = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  friend constexpr auto operator<=>(StrongId, StrongId) = default;

 private:
  Rep value_ = 0;
};

}  // namespace rota

template <typename Tag, typename Rep>
struct std::hash<rota::StrongId<Tag, Rep>> {
  size_t operator()(rota::StrongId<Tag, Rep> id) const noexcept { return std::hash<Rep>()(id.value()); }
};
