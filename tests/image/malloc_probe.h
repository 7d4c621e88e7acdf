// The largest single C allocation (malloc, calloc, realloc) on this thread, across every library
// the test binary loads (libpng, libjpeg, libwebp and giflib allocate with malloc, out of reach
// of alloc_hook's operator new). malloc_probe.cc interposes those three functions in the test
// binary; a sanitizer build owns malloc, so there the probe is off.
#pragma once

#include <cstddef>

namespace qwen35::image::testing {

bool malloc_probe_active();
void reset_largest_allocation();
size_t largest_allocation();

}  // namespace qwen35::image::testing
