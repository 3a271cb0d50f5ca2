// Names the calling thread, so that `top -H`, `ps -L`, perf and gdb tell kvgate's threads apart
// (event loops, the telemetry writer, alert delivery, engines).
#pragma once

#include <pthread.h>

#include <algorithm>
#include <string>
#include <string_view>

namespace kvgate {

// Linux keeps 15 bytes of a thread's name; a longer one is cut there rather than refused.
inline void NameThisThread(std::string_view name) {
  const std::string kept(name.substr(0, std::min<size_t>(name.size(), 15)));
  pthread_setname_np(pthread_self(), kept.c_str());
}

}  // namespace kvgate
