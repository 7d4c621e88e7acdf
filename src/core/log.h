// Leveled logging to stderr. The level is process-wide configuration set once at start-up by the
// binary (QWEN35_LOG=debug|info|warn|error, or --verbose); logging itself is thread-safe.
#pragma once

#include <cstdarg>

namespace qwen35::core {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
// Parses "debug", "info", "warn", "error", "off"; returns false when unknown.
bool parse_log_level(const char* s, LogLevel* out);
void log(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace qwen35::core

#define QWEN35_LOG_DEBUG(...) ::qwen35::core::log(::qwen35::core::LogLevel::kDebug, __VA_ARGS__)
#define QWEN35_LOG_INFO(...) ::qwen35::core::log(::qwen35::core::LogLevel::kInfo, __VA_ARGS__)
#define QWEN35_LOG_WARN(...) ::qwen35::core::log(::qwen35::core::LogLevel::kWarn, __VA_ARGS__)
#define QWEN35_LOG_ERROR(...) ::qwen35::core::log(::qwen35::core::LogLevel::kError, __VA_ARGS__)
