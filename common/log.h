// File: common/log.h
//
// Minimal leveled logging to stderr for the control side of the binaries (never the hot path):
//   HEDDLE_LOG(kInfo, "port %s: link up", name.c_str());
// journald captures stderr under systemd; the level is set once at start-up.
#pragma once

#include <atomic>
#include <cstdio>

namespace heddle::log {

enum Level : int { kError = 0, kWarning = 1, kInfo = 2, kDebug = 3 };

inline std::atomic<int>& Threshold() {
  static std::atomic<int> level{kInfo};
  return level;
}
inline void SetLevel(Level l) { Threshold().store(l, std::memory_order_relaxed); }
inline bool Enabled(Level l) { return l <= Threshold().load(std::memory_order_relaxed); }
inline const char* LevelName(Level l) {
  switch (l) {
    case kError:
      return "error";
    case kWarning:
      return "warning";
    case kInfo:
      return "info";
    default:
      return "debug";
  }
}

}  // namespace heddle::log

#define HEDDLE_LOG(level, fmt, ...)                                                                \
  do {                                                                                             \
    if (::heddle::log::Enabled(::heddle::log::level)) {                                            \
      std::fprintf(stderr, "heddle %s: " fmt "\n", ::heddle::log::LevelName(::heddle::log::level), \
                   ##__VA_ARGS__);                                                                 \
    }                                                                                              \
  } while (0)
