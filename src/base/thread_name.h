#pragma once

#include <pthread.h>

namespace rota {

// Names the calling thread, as `top -H`, `perf` and gdb show it. Linux keeps
// at most 15 characters; a longer name is refused there and the thread keeps
// its old one.
inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

}  // namespace rota
