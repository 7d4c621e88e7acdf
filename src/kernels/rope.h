// Rotary embedding tables shared by the kernels (computed in double so that both backends use
// identical angles).
#pragma once

#include <cmath>
#include <cstdint>

namespace qwen35::kernels {

// Rotate-half RoPE on the first `rotary_dim` values of x[head_dim] at position `pos`:
// pairs (i, i + rotary_dim/2), inv_freq_i = theta^(-2i/rotary_dim).
inline void apply_rope(float* x, int64_t rotary_dim, double theta, int64_t pos) {
  const int64_t half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -double(2 * i) / double(rotary_dim));
    const double ang = double(pos) * inv_freq;
    const float c = float(std::cos(ang)), s = float(std::sin(ang));
    const float x1 = x[i], x2 = x[i + half];
    x[i] = x1 * c - x2 * s;
    x[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace qwen35::kernels
