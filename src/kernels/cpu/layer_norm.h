// SIMD LayerNorm of one row (Highway dynamic dispatch), for the vision tower.
#pragma once

#include <cstdint>

namespace qwen35::kernels::cpu {

// out[dim] = (x − mean)/sqrt(var + eps)·w + b, population variance, two passes over the row
// (mean, then the squared deviations: no cancellation of E[x²] − mean²). The sums run in four
// vector accumulators in a fixed order, so a row's bits depend on nothing but the row.
void layer_norm_row(const float* x, int64_t dim, const float* w, const float* b, float eps, float* out);

}  // namespace qwen35::kernels::cpu
