// Bicubic resize of RGB8 images exactly as PIL's Image.resize(size, BICUBIC) computes it on an
// 8-bit image (libImaging/Resample.c): separable, horizontal pass first, each pass rounded to
// 8 bits; the bicubic kernel (a = −0.5) with its support widened by the scale factor when
// shrinking (so a downscale averages, antialiased); per-output-pixel weights normalized to sum
// to 1, then fixed-point with 22 fractional bits.
#pragma once

#include <cstdint>

#include "core/thread_pool.h"
#include "image/image.h"

namespace qwen35::image {

// `in` resized to out_width × out_height (both >= 1). The same size returns a copy, as PIL does.
// With a pool, output rows are split between its threads; each value is computed the same way
// by whichever thread, so the result is the same bits.
Image resize_bicubic(const Image& in, int64_t out_width, int64_t out_height,
                     core::ThreadPool* pool = nullptr);

// Calls f(begin, end) over [0, n): on the pool's threads if there is one, else on this thread.
template <typename F>
void for_ranges(core::ThreadPool* pool, int64_t n, const F& f) {
  if (pool == nullptr || pool->size() <= 1) {
    f(int64_t{0}, n);
    return;
  }
  pool->parallel_for(static_cast<size_t>(n), [&](size_t b, size_t e, int) {
    f(static_cast<int64_t>(b), static_cast<int64_t>(e));
  });
}

}  // namespace qwen35::image
