// Rotary embedding tables shared by the kernels (computed in double so that both backends use
// identical angles).
#pragma once

#include <cmath>
#include <cstdint>

namespace qwen35::kernels {

// Rotate-half RoPE on the first `rotary_dim` values of x[head_dim]: pairs (i, i + rotary_dim/2),
// inv_freq_i = theta^(-2i/rotary_dim), pair i turned by pos[axis_i]·inv_freq_i. `pos` holds the
// row's multimodal (M-RoPE) positions, temporal, height and width; `pair_axis[i]` is pair i's
// axis (null: the temporal one for every pair). Text has three equal positions, so its rows
// turn by the same angles, bit for bit, whatever the axes.
inline void apply_rope(float* x, int64_t rotary_dim, double theta, const int64_t* pos,
                       const uint8_t* pair_axis) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -double(2 * i) / double(rotary_dim));
    const double ang = double(pos[pair_axis ? pair_axis[i] : 0]) * inv_freq;
    const float c = float(std::cos(ang)), s = float(std::sin(ang));
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
}

// One position on every axis (text).
inline void apply_rope(float* x, int64_t rotary_dim, double theta, int64_t pos) {
  const int64_t p3[3] = {pos, pos, pos};
  apply_rope(x, rotary_dim, theta, p3, nullptr);
}

}  // namespace qwen35::kernels
