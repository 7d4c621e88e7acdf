// Bicubic resize of RGB8 images exactly as PIL's Image.resize(size, BICUBIC) computes it on an
// 8-bit image (libImaging/Resample.c): separable, horizontal pass first, each pass rounded to
// 8 bits; the bicubic kernel (a = −0.5) with its support widened by the scale factor when
// shrinking (so a downscale averages, antialiased); per-output-pixel weights normalized to sum
// to 1, then fixed-point with 22 fractional bits.
#pragma once

#include <cstdint>

#include "image/image.h"

namespace qwen35::image {

// `in` resized to out_width × out_height (both >= 1). The same size returns a copy, as PIL does.
Image resize_bicubic(const Image& in, int64_t out_width, int64_t out_height);

}  // namespace qwen35::image
