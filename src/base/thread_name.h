#pragma once

#include <pthread.h>

#include <thread>
#include <utility>

namespace rota {

// Names the calling thread, as `top -H`, `perf` and gdb show it. Linux keeps
// at most 15 characters; a longer name is refused there and the thread keeps
// its old one.
inline void NameThisThread(const char* name) { pthread_setname_np(pthread_self(), name); }

// A thread that names itself `name` (a string literal), then runs `fn`.
template <class F>
std::thread NamedThread(const char* name, F fn) {
  return std::thread([name, fn = std::move(fn)]() mutable {
    NameThisThread(name);
    fn();
  });
}

}  // namespace rota
