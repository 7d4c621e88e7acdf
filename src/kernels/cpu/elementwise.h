// SIMD elementwise kernels (Highway dynamic dispatch).
#pragma once

#include <cstdint>

namespace qwen35::kernels::cpu {

// Elementwise SiLU gates in SIMD (Highway's Exp, a few ulp from std::exp):
// out[i] = silu(g[i])·u[i] (SwiGLU), and x[i] *= silu(z[i]) (the GDN output gate).
void silu_mul(const float* g, const float* u, int64_t n, float* out);
void mul_silu(float* x, const float* z, int64_t n);
// In place on x[n]: GELU, the tanh form (gelu_pytorch_tanh) or the erf form, to a few ulp of the
// float64 formula (cpu/math-inl.h states the bounds); the same arithmetic for every element.
void gelu(float* x, int64_t n, bool tanh_form);
// y[i] += b[i] (bit for bit the scalar sum).
void add(float* y, const float* b, int64_t n);

}  // namespace qwen35::kernels::cpu
