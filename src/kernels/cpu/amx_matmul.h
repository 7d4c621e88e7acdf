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
// Activation rows per call of amx_range: each weight tile is unpacked once for all of them.
inline constexpr int64_t kAmxRowBlock = 256;

// Whether a fast-mode affine matrix (tiled_affine, or fast_odd_affine) takes the tile kernel: its
// groups split into whole K-steps of the tile (group ≤ 64 bytes and a multiple of 4, or a multiple
// of 64).
bool amx_fits(const Matrix& m);

// Packs the fast mode's int8 activations of one call (MatmulScratch: xq in the int8 kernels' byte
// order, the group scales xdx and the sums xsum, n rows) for the tiles, into sc.amx_b and
// sc.amx_sx, once for all output rows and threads (blocks of 16 rows in parallel on ctx.pool).
void amx_pack(const Context& ctx, const Matrix& m, int64_t n, MatmulScratch& sc);

// Output rows [o0, o1) against activation rows [t0, t1) (t0 a multiple of 16) of an amx_fits
// matrix, from the activations amx_pack made, on the given unit (kHardware or kEmulated):
// y[t·rows + o], bit-identical to TiledRangeInt8.
void amx_range(AmxUnit unit, const Matrix& m, const MatmulScratch& sc, int64_t t0, int64_t t1, int64_t o0,
               int64_t o1, float* y, MatmulScratch::Share& share);

}  // namespace qwen35::kernels::cpu
