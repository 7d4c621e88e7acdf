// SIMD kernel (Highway dynamic dispatch) of the depthwise causal conv1d + SiLU. Tested against the
// scalar reference on every target.
#pragma once

#include <cstdint>

namespace qwen35::kernels::cpu {

// Depthwise causal conv1d + SiLU on channels [c0, c1) of x [n, ch] with weights w [ch, kernel]
// and the previous inputs in state [kernel-1, ch] (oldest first, updated). out [n, ch].
// Any kernel width >= 1 (the SIMD path covers up to 8 taps; wider ones run the same operations
// one channel at a time).
void conv1d_silu_channels(const float* x, int64_t n, int64_t ch, const float* w, int64_t kernel,
                          float* state, float* out, int64_t c0, int64_t c1);

}  // namespace qwen35::kernels::cpu
