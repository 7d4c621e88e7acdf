// SIMD matmul over stored weights (Highway dynamic dispatch): y[n, rows] = x[n, cols] · Wᵀ.
//
// One code path for every n, so a row's bits never depend on how many rows share the call
// (DESIGN.md §6): each output is accumulated over k in a fixed lane/block order, rows are only
// tiled for reuse of the decoded weights. MLX affine 2/4/8-bit weights are decoded in registers
// (codes of one 32-bit word land in one lane; the activations are permuted to match once per
// call); 3/5/6-bit groups are decoded into a small stack buffer. Biases enter through per-group
// activation sums: Σ x(s·q + b) = s·Σ x q + b·Σ x.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

// Per-call activation preparation (permuted copies and group sums), reused across calls.
struct MatmulScratch {
  std::vector<float> xp;    // permuted activations [n, cols]
  std::vector<float> xsum;  // [n, cols / group]
  std::vector<int8_t> xq;   // fast mode: quantized, permuted activations [n, cols]
  std::vector<float> xdx;   // fast mode: per int32 lane of each block, the activation scale
};

void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w, float* y,
            MatmulScratch& scratch);

// The SIMD target the dispatcher picked (e.g. "AVX2"), for logs and tests.
std::string simd_target();

}  // namespace qwen35::kernels::cpu
