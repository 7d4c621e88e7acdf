#include "malloc_probe.h"

#include <cstdlib>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define QWEN35_MALLOC_OWNED_BY_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define QWEN35_MALLOC_OWNED_BY_SANITIZER 1
#endif

namespace {
thread_local size_t largest = 0;  // a plain integer: reading it allocates nothing
inline void note(size_t n) {
  if (n > largest) largest = n;
}
}  // namespace

namespace qwen35::image::testing {
#ifdef QWEN35_MALLOC_OWNED_BY_SANITIZER
bool malloc_probe_active() { return false; }
#else
bool malloc_probe_active() { return true; }
#endif
void reset_largest_allocation() { largest = 0; }
size_t largest_allocation() { return largest; }
}  // namespace qwen35::image::testing

#ifndef QWEN35_MALLOC_OWNED_BY_SANITIZER
// glibc's own entry points, exported for exactly this kind of wrapper.
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);

extern "C" void* malloc(size_t n) {
  note(n);
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t count, size_t size) {
  note(count * size);  // an overflowing product fails inside glibc; the note is a bound only
  return __libc_calloc(count, size);
}
extern "C" void* realloc(void* p, size_t n) {
  note(n);
  return __libc_realloc(p, n);
}
#endif
