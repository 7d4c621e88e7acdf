// Matmul over ggml block-type weights (GGUF files: Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS),
// exact mode: weights decoded to fp32 by decode_block's operations (kernels/matrix.h) in SIMD,
// fp32 activations. Every output is summed in one fixed order whatever the target: 64 partial
// sums, partial l taking the elements k ≡ l (mod 64) in k order by fused multiply-add from zero,
// then added by a halving tree (p[i] += p[i+32], then +16, +8, +4, +2, and p0 + p1). Four 16-lane
// vectors (AVX-512) or eight of 8 (AVX2) hold the partials, enough independent chains to keep the
// multiply-add units busy for one row; the scalar twin (block_row_dot_scalar) keeps them in an
// array. So a row's bits depend neither on the batch, nor on the thread split, nor on the SIMD
// target.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

// Output rows [o0, o1) of y[n, m.rows] = x[n, m.cols] · mᵀ. `decoded` holds weight rows decoded to
// f32 (grown to 16 rows as needed): the buffer of the caller's share.
void block_matmul_rows(const Matrix& m, const float* x, int64_t n, int64_t o0, int64_t o1, float* y,
                       std::vector<float>& decoded);

// The scalar twin of one output: decoded weights w[k] against x[k], k < K.
float block_row_dot_scalar(const float* w, const float* x, int64_t K);

}  // namespace qwen35::kernels::cpu
