// Always-on invariant checks. For broken invariants of our own code only: untrusted input
// (files, requests) goes through Result<T> and never reaches a check.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace qwen35::core {
[[noreturn]] void check_failed(const char* file, int line, const char* expr, const char* msg);
}

#define QWEN35_CHECK(cond)                                                         \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      ::qwen35::core::check_failed(__FILE__, __LINE__, #cond, nullptr);            \
  } while (0)

#define QWEN35_CHECK_MSG(cond, msg)                                                \
  do {                                                                             \
    if (!(cond)) [[unlikely]]                                                      \
      ::qwen35::core::check_failed(__FILE__, __LINE__, #cond, (msg));              \
  } while (0)
