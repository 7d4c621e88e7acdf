#include "image/pixels.h"

#include <utility>

namespace qwen35::image {
namespace {

// PIL's integer "divide by 255, rounded" of a value with 7 extra bits of precision
// (AlphaComposite.c): ((x >> 8) + x) >> 8 on x + 128·2^7, then the 7 bits dropped.
inline uint8_t pil_div255_precise(uint32_t x) {
  x += 0x80u << 7;
  return static_cast<uint8_t>((((x >> 8) + x) >> 8) >> 7);
}

// MULDIV255 of PIL's Convert.c: a·b/255 rounded.
inline int muldiv255(int a, int b) {
  const int tmp = a * b + 128;
  return ((tmp >> 8) + tmp) >> 8;
}

}  // namespace

void composite_on_white(const uint8_t* rgba, int64_t n_pixels, uint8_t* rgb) {
  for (int64_t i = 0; i < n_pixels; ++i) {
    const uint8_t* s = rgba + i * 4;
    uint8_t* d = rgb + i * 3;
    const uint32_t a = s[3];
    if (a == 0) {
      d[0] = d[1] = d[2] = 255;
      continue;
    }
    // The destination is opaque white: PIL's blend = 255·(255 − a), outa255 = 255·255, so its
    // coefficients reduce to coef1 = a·2^7 and coef2 = (255 − a)·2^7 exactly.
    const uint32_t coef1 = a << 7;
    const uint32_t coef2 = (255u - a) << 7;
    for (int c = 0; c < 3; ++c) d[c] = pil_div255_precise(s[c] * coef1 + 255u * coef2);
  }
}

void cmyk_to_rgb(const uint8_t* cmyk, int64_t n_pixels, uint8_t* rgb) {
  for (int64_t i = 0; i < n_pixels; ++i) {
    const uint8_t* s = cmyk + i * 4;
    const int nk = 255 - s[3];
    for (int c = 0; c < 3; ++c) {
      const int v = nk - muldiv255(s[c], nk);
      rgb[i * 3 + c] = static_cast<uint8_t>(v < 0 ? 0 : v);
    }
  }
}

Image apply_orientation(Image in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int64_t w = in.width, h = in.height;
  const bool swap = orientation >= 5;  // 5..8 exchange the axes
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(in.rgb.size());
  for (int64_t y = 0; y < out.height; ++y) {
    for (int64_t x = 0; x < out.width; ++x) {
      // The source pixel (sx, sy) of output pixel (x, y), for each of PIL's transposes.
      int64_t sx = x, sy = y;
      switch (orientation) {
        case 2:  // FLIP_LEFT_RIGHT
          sx = w - 1 - x;
          break;
        case 3:  // ROTATE_180
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;
        case 4:  // FLIP_TOP_BOTTOM
          sy = h - 1 - y;
          break;
        case 5:  // TRANSPOSE
          sx = y;
          sy = x;
          break;
        case 6:  // ROTATE_270: 90° clockwise
          sx = y;
          sy = h - 1 - x;
          break;
        case 7:  // TRANSVERSE
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;
        case 8:  // ROTATE_90: 90° counter-clockwise
          sx = w - 1 - y;
          sy = x;
          break;
      }
      const uint8_t* s = &in.rgb[static_cast<size_t>((sy * w + sx) * 3)];
      uint8_t* d = &out.rgb[static_cast<size_t>((y * out.width + x) * 3)];
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  return out;
}

}  // namespace qwen35::image
