#include "sched/fgd.h"

#include <cstddef>

namespace rota::sched {

double NodeFragmentation(const std::vector<TypicalTask>& typical, int64_t cpu_left, const int32_t* left, int32_t gpus,
                         int16_t model) {
  // The artifact's quadrants: Q1 neither GPU nor CPU fits, Q2 CPU fits but not
  // the GPUs, Q3 both fit (not fragmentation), Q4 GPUs fit but not the CPU;
  // XL/XR CPU-only tasks; NA the model is not accessible.
  enum { kQ1, kQ2, kQ3, kQ4, kXL, kXR, kNA };
  double d[7] = {0, 0, 0, 0, 0, 0, 0};
  int64_t tot = 0;
  for (int g = 0; g < gpus; ++g) tot += left[g];
  for (const TypicalTask& t : typical) {
    if (t.milli == 0) {
      d[cpu_left >= t.cpu ? kXL : kXR] += t.f * static_cast<double>(tot);
      continue;
    }
    if (model < 0 || static_cast<size_t>(model) >= t.access.size() || !t.access[model]) {
      d[kNA] += t.f * static_cast<double>(tot);
      continue;
    }
    int32_t fit = 0;
    int64_t fm = 0;
    for (int g = 0; g < gpus; ++g) {
      if (left[g] >= t.milli) {
        ++fit;
      } else {
        fm += left[g];
      }
    }
    const bool can = fit >= t.num;
    const bool cpu_ok = cpu_left >= t.cpu;
    if (can && cpu_ok) {
      d[kQ2] += t.f * static_cast<double>(fm);
      d[kQ3] += t.f * static_cast<double>(tot - fm);
    } else if (can) {
      d[kQ4] += t.f * static_cast<double>(tot);
    } else if (cpu_ok) {
      d[kQ2] += t.f * static_cast<double>(tot);
    } else {
      d[kQ1] += t.f * static_cast<double>(tot);
    }
  }
  return d[kQ1] + d[kQ2] + d[kQ4] + d[kXL] + d[kXR] + d[kNA];
}

}  // namespace rota::sched
