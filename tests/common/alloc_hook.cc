#include "alloc_hook.h"

#include <cstdlib>
#include <new>

// Compiled into a test binary's single unity unit, the compiler sees a pointer from the
// operator new below freed by free() in the delete below, which is this file's very design.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {

// Plain thread_local integers: reading them needs no initialization, so operator new may.
thread_local size_t armed_at = 0;  // 0: nothing armed
thread_local int64_t to_skip = 0;
thread_local int64_t failed = 0;

}  // namespace

namespace qwen35::testing {

void fail_next_allocation(size_t min_bytes, int64_t skip) {
  to_skip = skip;
  armed_at = min_bytes == 0 ? 1 : min_bytes;
}
void allow_allocations() { armed_at = 0; }
int64_t failed_allocations() { return failed; }

}  // namespace qwen35::testing

void* operator new(std::size_t n) {
  if (armed_at != 0 && n >= armed_at && to_skip-- == 0) {
    armed_at = 0;
    ++failed;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
// The nothrow forms too (their memory is freed by the plain delete): left to a sanitizer's
// runtime, they would allocate in a way free() does not match.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept {
  return ::operator new(n, t);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
