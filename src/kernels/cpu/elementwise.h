// SIMD elementwise kernels (Highway dynamic dispatch).
#pragma once

#include <cstdint>

namespace qwen35::kernels::cpu {

// Elementwise SiLU gates in SIMD (Highway's Exp, a few ulp from std::exp):
// out[i] = silu(g[i])·u[i] (SwiGLU), and x[i] *= silu(z[i]) (the GDN output gate).
void silu_mul(const float* g, const float* u, int64_t n, float* out);
void mul_silu(float* x, const float* z, int64_t n);

}  // namespace qwen35::kernels::cpu
