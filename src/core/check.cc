#include "core/check.h"

namespace qwen35::core {
void check_failed(const char* file, int line, const char* expr, const char* msg) {
  std::fprintf(stderr, "qwen35: internal check failed at %s:%d: %s%s%s\n", file, line, expr,
               msg ? " — " : "", msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace qwen35::core
