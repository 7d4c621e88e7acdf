#include "image/resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace qwen35::image {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // PIL's: 8 bits of result, 2 of headroom

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// One axis: for each output index, the first input index, the tap count and fixed-point weights
// (ksize per output, zero past the tap count).
struct Taps {
  int64_t ksize = 0;
  std::vector<int64_t> first, count;
  std::vector<int32_t> weights;
};

// The double arithmetic follows PIL's precompute_coeffs step by step, so that its truncations
// ((int) casts) and the normalization fall on the same values.
Taps make_taps(int64_t in_size, int64_t out_size) {
  const double scale =
      static_cast<double>(static_cast<float>(in_size)) / static_cast<double>(out_size);
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  Taps t;
  t.ksize = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_size);
  t.count.resize(out_size);
  t.weights.assign(static_cast<size_t>(out_size * t.ksize), 0);
  std::vector<double> k(static_cast<size_t>(t.ksize));
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int64_t xmin = static_cast<int64_t>(center - support + 0.5);  // truncates toward zero, as (int)
    if (xmin < 0) xmin = 0;
    int64_t xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w = bicubic((static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      ww += w;
    }
    for (int64_t x = 0; x < xmax; ++x) {
      double w = k[static_cast<size_t>(x)];
      if (ww != 0.0) w /= ww;
      // PIL's normalize_coeffs_8bpc: round half away from zero into 22 fractional bits.
      const double f = w * (1 << kPrecisionBits);
      t.weights[static_cast<size_t>(xx * t.ksize + x)] =
          static_cast<int32_t>(w < 0 ? -0.5 + f : 0.5 + f);
    }
    t.first[xx] = xmin;
    t.count[xx] = xmax;
  }
  return t;
}

inline uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;  // arithmetic: floor, as PIL's lookup index
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

constexpr int64_t kHalf = int64_t{1} << (kPrecisionBits - 1);

// Rows [row0, row0 + rows) of `in`, resized along x.
Image horizontal(const Image& in, int64_t row0, int64_t rows, int64_t out_w,
                 core::ThreadPool* pool) {
  const Taps t = make_taps(in.width, out_w);
  Image out{out_w, rows, std::vector<uint8_t>(static_cast<size_t>(out_w * rows * 3))};
  for_ranges(pool, rows, [&](int64_t y_begin, int64_t y_end) {
    for (int64_t y = y_begin; y < y_end; ++y) {
      const uint8_t* src = &in.rgb[static_cast<size_t>((row0 + y) * in.width * 3)];
      uint8_t* dst = &out.rgb[static_cast<size_t>(y * out_w * 3)];
      for (int64_t xx = 0; xx < out_w; ++xx) {
        const int32_t* k = &t.weights[static_cast<size_t>(xx * t.ksize)];
        const uint8_t* p = src + t.first[xx] * 3;
        int64_t s0 = kHalf, s1 = kHalf, s2 = kHalf;
        for (int64_t x = 0; x < t.count[xx]; ++x) {
          s0 += int64_t{p[x * 3]} * k[x];
          s1 += int64_t{p[x * 3 + 1]} * k[x];
          s2 += int64_t{p[x * 3 + 2]} * k[x];
        }
        dst[xx * 3] = clip8(s0);
        dst[xx * 3 + 1] = clip8(s1);
        dst[xx * 3 + 2] = clip8(s2);
      }
    }
  });
  return out;
}

// `in` resized along y; taps index rows of `in` shifted by `row0` (the rows the horizontal pass
// kept). Each output row accumulates its input rows in tap order, a whole row at a time.
Image vertical(const Image& in, const Taps& t, int64_t row0, int64_t out_h,
               core::ThreadPool* pool) {
  const int64_t n = in.width * 3;
  Image out{in.width, out_h, std::vector<uint8_t>(static_cast<size_t>(n * out_h))};
  for_ranges(pool, out_h, [&](int64_t yy_begin, int64_t yy_end) {
    std::vector<int64_t> acc(static_cast<size_t>(n));
    for (int64_t yy = yy_begin; yy < yy_end; ++yy) {
      const int32_t* k = &t.weights[static_cast<size_t>(yy * t.ksize)];
      const int64_t y0 = t.first[yy] - row0;
      std::fill(acc.begin(), acc.end(), kHalf);
      for (int64_t y = 0; y < t.count[yy]; ++y) {
        const uint8_t* src = &in.rgb[static_cast<size_t>((y0 + y) * n)];
        const int64_t w = k[y];
        for (int64_t i = 0; i < n; ++i) acc[static_cast<size_t>(i)] += int64_t{src[i]} * w;
      }
      uint8_t* dst = &out.rgb[static_cast<size_t>(yy * n)];
      for (int64_t i = 0; i < n; ++i) dst[i] = clip8(acc[static_cast<size_t>(i)]);
    }
  });
  return out;
}

}  // namespace

Image resize_bicubic(const Image& in, int64_t out_width, int64_t out_height,
                     core::ThreadPool* pool) {
  const bool need_h = out_width != in.width;
  const bool need_v = out_height != in.height;
  if (!need_h && !need_v) return in;
  // PIL computes the vertical taps first and runs the horizontal pass only over the input rows
  // they reach.
  const Taps tv = make_taps(in.height, out_height);
  const int64_t first_row = tv.first[0];
  const int64_t last_row = tv.first[out_height - 1] + tv.count[out_height - 1];
  if (!need_v) return horizontal(in, 0, in.height, out_width, pool);
  if (!need_h) return vertical(in, tv, 0, out_height, pool);
  const Image mid = horizontal(in, first_row, last_row - first_row, out_width, pool);
  return vertical(mid, tv, first_row, out_height, pool);
}

}  // namespace qwen35::image
