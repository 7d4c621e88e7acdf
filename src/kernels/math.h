// The activation functions, scalar: the reference kernels use them, and the SIMD kernels use them
// for tails (their vector twins are in cpu/math-inl.h).
#pragma once

#include <cmath>

namespace qwen35::kernels {

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// log(1 + e^x), returning x itself where e^x would swamp the 1 (x > 20: the same float).
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

}  // namespace qwen35::kernels
