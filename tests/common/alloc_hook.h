// An allocation failure on demand, for the tests that show one ends a request, not the process.
// alloc_hook.cc, listed in a test binary's sources (never in a library: it would be linked into
// every binary), replaces that binary's global operator new and delete: they go to malloc and
// free as usual, except where a thread armed a failure.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qwen35::testing {

// On this thread, the allocation of at least `min_bytes` bytes that comes after `skip` others
// of that size throws std::bad_alloc (once).
void fail_next_allocation(size_t min_bytes, int64_t skip = 0);
// Disarms what fail_next_allocation armed on this thread, if it has not fired.
void allow_allocations();
// Allocations failed so far on this thread by the hook.
int64_t failed_allocations();

}  // namespace qwen35::testing
