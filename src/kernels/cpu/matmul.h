// SIMD matmul over stored weights (Highway dynamic dispatch): y[n, rows] = x[n, cols] · Wᵀ.
//
// One code path for every n, so a row's bits never depend on how many rows share the call
// (docs/design.md §6): each output is accumulated over k in a fixed order, rows are only tiled for reuse
// of the decoded weights. MLX affine 2/4/8-bit weights take tile kernels: 16 (AVX-512) or 8 (AVX2)
// output rows, one per lane, their 32-bit words transposed in registers, so the per-group scale and
// bias are applied once per group for all lanes and no horizontal sums remain; the exact mode
// multiplies decoded codes by fp32 activations, the fast mode int8 activations with integer dot
// products (vpdpbusd / vpmaddubsw). Tail rows and other targets run a scalar loop performing the
// same float operations. In the exact mode 3/5/6-bit groups are decoded into a small stack buffer;
// in the fast mode they take int8 tiles too (four codes per lane funnel-shifted out of the bit
// stream) when a row is whole blocks of lcm(16, bits) words. Biases enter through per-group
// activation sums: Σ x(s·q + b) = s·Σ x q + b·Σ x.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

// Whether an affine matrix takes the tile kernels (exact or fast): 2/4/8-bit codes, groups of
// whole 32-bit words.
inline bool tiled_affine(const Matrix& m) {
  return m.type == WeightType::kAffine && (m.bits == 2 || m.bits == 4 || m.bits == 8) &&
         m.group % (32 / m.bits) == 0 && m.cols % m.group == 0;
}

// Whether a 3/5/6-bit affine matrix takes the int8 kernels in fast mode (otherwise it runs exact
// in both modes): groups of whole 8-code runs, rows of whole blocks of the odd-width tile
// (lcm(16, bits) words). Decided from the shape alone, so every target makes the same choice and
// fast mode keeps its bits.
inline bool fast_odd_affine(const Matrix& m) {
  return m.type == WeightType::kAffine && (m.bits == 3 || m.bits == 5 || m.bits == 6) && m.group % 8 == 0 &&
         m.cols % m.group == 0 && (m.cols * m.bits) % 32 == 0 &&
         (m.cols * m.bits / 32) % std::lcm(16, m.bits) == 0;
}

// Per-call activation preparation (group sums, quantized copies), reused across calls.
struct MatmulScratch {
  std::vector<float> xsum;  // [n, cols / group]
  std::vector<float> xs;    // exact mode: activations pre-scaled for the tile kernels [n, cols]
  std::vector<int8_t> xq;   // fast mode: quantized activations in the kernels' byte order [n, cols]
  std::vector<float> xdx;   // fast mode: the activation scale of each group [n, cols / group]
  // Fast mode on AMX tiles (amx_matmul.h): per block of 16 activation rows, xq as B tiles
  // [16·cols] bytes, and dx and xsum as [group][16] floats each.
  std::vector<uint8_t> amx_b;
  std::vector<float> amx_sx;
  // Per share of the parallel pass (the pool's share index): share k reuses its own buffers
  // whichever thread runs it, so once every share has run at a shape, nothing allocates (a
  // thread_local buffer would grow the first time its thread happened to take a share of it).
  struct Share {
    std::vector<float> row_scales;   // per-row kernels: a block of output rows' scales and biases as f32
    std::vector<float> tile_scales;  // tile kernels: a tile's scales and biases, by row and transposed
    std::vector<uint32_t> row_words; // a row of tile-major codes gathered row-major (affine_row)
    std::vector<int8_t> quant_row;   // fast mode: a row of activations quantized, in natural order
    std::vector<float> decoded;      // GGUF block types: weight rows decoded to f32
    std::vector<uint8_t> amx_a;      // AMX: a tile of 16 weight rows as bytes, [K-step][row][bytes]
    std::vector<float> amx_sb;       // AMX: the weight tile's scales and biases, [row][group]
  };
  std::vector<Share> shares;
  // The per-share buffers for the pool of `ctx` (one without a pool). Call on the calling thread
  // before the parallel region; entry k belongs to share k inside it.
  Share* share_buffers(const Context& ctx) {
    const size_t n = ctx.pool ? size_t(ctx.pool->size()) : 1;
    if (shares.size() < n) shares.resize(n);
    return shares.data();
  }
};

void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w, float* y,
            MatmulScratch& scratch);

// Several matrices on the same activations: when they share their tile kernel (2/4/8-bit affine, or
// 3/5/6-bit in the fast mode, of one width, group, column count and scale type, rows in multiples of 16), the activations are
// prepared once and one parallel pass covers all their rows; otherwise one matmul each. The same
// bits either way.
void matmul_many(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws, float* const* ys,
                 int count, MatmulScratch& scratch);

// The SIMD target the dispatcher picked (e.g. "AVX2"), for logs and tests.
std::string simd_target();

// Restricts run-time dispatch, for the whole process, to the named target or below (e.g. "AVX2"
// on an AVX-512 machine, to measure what AVX2-only CPUs get). False (and no change) when the name
// is unknown, not compiled or not supported by this CPU.
bool limit_simd(const std::string& name);

}  // namespace qwen35::kernels::cpu
