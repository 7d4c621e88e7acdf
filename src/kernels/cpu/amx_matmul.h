// The fast mode's prefill matmuls on AMX tiles (docs/design.md "AMX"): the same bits as the
// VNNI/AVX2 int8 tile kernels (affine_int8-inl.h), for calls of kAmxMinRows activation rows or
// more. matmul.cc's dispatch calls amx_range with the activations PrepAffine made.
#pragma once

#include <cstdint>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

// Activation rows a call needs before it takes the tiles: a tile holds 16 of them, and one row
// (decode) is memory-bound, where the tiles do not help.
inline constexpr int64_t kAmxMinRows = 16;
// Activation rows per call of amx_range: each weight tile is unpacked once for all of them (their
// packed tiles take 16·cols bytes per 16 rows of the share's scratch).
inline constexpr int64_t kAmxRowBlock = 256;

// Whether a fast-mode affine matrix (tiled_affine, or fast_odd_affine) takes the tile kernel: its
// groups split into whole K-steps of the tile (group ≤ 64 bytes and a multiple of 4, or a multiple
// of 64).
bool amx_fits(const Matrix& m);

// The fast mode's int8 activations of one matmul call (MatmulScratch: xq in the int8 kernels'
// byte order, the group scales dx and the sums xsum).
struct AmxActs {
  const int8_t* xq;
  const float* dx;
  const float* xsum;
};

// Output rows [o0, o1) against activation rows [t0, t1) of an amx_fits matrix, on the given unit
// (kHardware or kEmulated): y[t·rows + o], bit-identical to TiledRangeInt8.
void amx_range(AmxUnit unit, const Matrix& m, const AmxActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
               float* y, MatmulScratch::Share& share);

}  // namespace qwen35::kernels::cpu
