// Matmul over ggml block-type weights (GGUF files: Q8_0, Q4_0, IQ4_NL, Q4_K, Q5_K, Q6_K, IQ4_XS),
// exact mode: weights decoded to fp32 by decode_block's operations (kernels/matrix.h), fp32
// activations, and every output accumulated as one fused multiply-add per element in k order,
// from zero. So a row's bits depend neither on the batch, nor on the thread split, nor on the SIMD
// target: tiles of 16 output rows (lanes) and the scalar twin of the tail rows perform the same
// operations.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

// Output rows [o0, o1) of y[n, m.rows] = x[n, m.cols] · mᵀ. o0 a multiple of 16 (the tiles start
// on that grid; the thread split of matmul keeps it).
void block_matmul_rows(const Matrix& m, const float* x, int64_t n, int64_t o0, int64_t o1, float* y);

}  // namespace qwen35::kernels::cpu
