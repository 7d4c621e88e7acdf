#include "core/log.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace qwen35::core {
namespace {
std::atomic<int> g_level{int(LogLevel::kWarn)};
std::mutex g_mu;
}  // namespace

void set_log_level(LogLevel level) { g_level.store(int(level)); }
LogLevel log_level() { return LogLevel(g_level.load()); }

bool parse_log_level(const char* s, LogLevel* out) {
  static const struct {
    const char* name;
    LogLevel level;
  } kNames[] = {{"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo}, {"warn", LogLevel::kWarn},
                {"error", LogLevel::kError}, {"off", LogLevel::kOff}};
  for (const auto& n : kNames)
    if (std::strcmp(s, n.name) == 0) {
      *out = n.level;
      return true;
    }
  return false;
}

void log(LogLevel level, const char* fmt, ...) {
  if (int(level) < g_level.load()) return;
  static const char* kTag[] = {"debug", "info", "warn", "error", ""};
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard<std::mutex> lock(g_mu);
  std::fprintf(stderr, "qwen35 [%s] %s\n", kTag[int(level)], buf);
}

}  // namespace qwen35::core
