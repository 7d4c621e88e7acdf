// The matmul dispatch: picks the kernel for a matrix (type, bits, group, shape) and splits its
// output rows over the thread pool. Highway compiles this file, with its -inl.h parts, once per
// SIMD target (foreach_target) and dispatches at run time. The affine tile loops of the exact and
// the fast mode, the bulk of the compile, are instantiated in affine_tiles_exact.cc and
// affine_tiles_int8.cc (compiled for the same targets), so the three units build side by side.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "kernels/cpu/amx_matmul.h"
#include "kernels/cpu/block_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The kernels, one concept a file, in dependency order (each builds on those above it).
#include "kernels/cpu/vec_x86-inl.h"       // lane types and arithmetic of the tile kernels
#include "kernels/cpu/mlx_codes-inl.h"     // MLX code unpacking, scales and biases as f32
#include "kernels/cpu/matmul_float-inl.h"  // f32 / f16 / bf16 weights
#include "kernels/cpu/affine_exact-inl.h"  // MLX affine, exact mode
#include "kernels/cpu/affine_int8-inl.h"   // MLX affine, fast mode (int8 activations)
#include "kernels/cpu/affine_tiles-inl.h"  // the tile loop of both modes, compiled in their own units

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

// Activation rows per pass over a block of weights: their rows stay in L1/L2 while the block's
// weights are decoded once for all of them.
constexpr int64_t kActRowBlock = 64;

// rt rows of activations against output row o, with the row count fixed at compile time so the
// accumulators stay in registers.
template <int rt>
HWY_INLINE void Rows(const Matrix& m, bool affine, const float* const* x, const float* const* xsum, int64_t o,
                     float* const* y, const float* sf, const float* bf) {
  if (!affine) FloatRows<rt>(m, x, o, y);
  else AffineGenericRows<rt>(m, x, xsum, o, y, sf, bf);
}

bool Tiled(const Matrix& m) { return tiled_affine(m); }
bool FastOdd(const Matrix& m) { return fast_odd_affine(m); }

// Prepares the activations of an affine matmul once: quantized copies (fast mode) or pre-scaled
// ones (exact tiles), and per-group sums, row by row (in parallel for prompts: this is serial work
// otherwise).
// The tile unit of a fast-mode call of n rows: AMX tiles for prefill where the process uses them
// (the same bits, so choosing by row count keeps every row's result independent of its batch).
AmxUnit AmxFor(const Matrix& m, int64_t n, bool int8) {
  return int8 && n >= kAmxMinRows && amx_fits(m) ? amx_unit() : AmxUnit::kNone;
}

void PrepAffine(const Context& ctx, const float* x, int64_t n, const Matrix& m, bool tiled, bool int8, AmxUnit amx,
                MatmulScratch& sc) {
  const int64_t K = m.cols, groups = K / m.group;
  sc.xsum.resize(size_t(n * groups));
  if (int8) {
    sc.xq.resize(size_t(n * K));
    sc.xdx.resize(size_t(n * groups));
  } else if (tiled) {
    sc.xs.resize(size_t(n * K));
  }
  MatmulScratch::Share* shares = sc.share_buffers(ctx);
  auto prep = [&](size_t t0, size_t t1, int k) {
    for (int64_t t = int64_t(t0); t < int64_t(t1); ++t) {
      if (int8) {
        QuantizeRow8(x + t * K, K, m.bits, m.group, sc.xq.data() + t * K, sc.xdx.data() + t * groups,
                     sc.xsum.data() + t * groups, shares[k].quant_row);
        continue;
      }
      GroupSums(x + t * K, K, m.group, sc.xsum.data() + t * groups);
      if (tiled) ScaleForTiles(x + t * K, K, m.bits, sc.xs.data() + t * K);
    }
  };
  if (ctx.pool != nullptr && n >= 4) ctx.pool->parallel_for(size_t(n), prep, 1);
  else prep(0, size_t(n), 0);
  if (amx != AmxUnit::kNone) amx_pack(ctx, m, n, sc);
}

// Output rows [o0, o1) of a tiled affine matrix (prepared by PrepAffine) against all n rows.
void TiledRows(const Matrix& m, const float* x, int64_t n, bool int8, AmxUnit amx, const MatmulScratch& sc,
               int64_t o0, int64_t o1, float* y, MatmulScratch::Share& share) {
  const AffineActs acts{x, sc.xs.data(), sc.xq.data(), sc.xdx.data(), sc.xsum.data()};
  if (amx != AmxUnit::kNone) {
    for (int64_t tb = 0; tb < n; tb += kAmxRowBlock)
      amx_range(amx, m, sc, tb, std::min(n, tb + kAmxRowBlock), o0, o1, y, share);
    return;
  }
  for (int64_t tb = 0; tb < n; tb += kActRowBlock) {
    const int64_t te = std::min(n, tb + kActRowBlock);
    if (int8) TiledRangeInt8(m, acts, tb, te, o0, o1, y, share);
    else TiledRangeExact(m, acts, tb, te, o0, o1, y, share);
  }
}

void MatmulImpl(const Context& ctx, const float* x, int64_t n, const Matrix& m, float* y,
                MatmulScratch& sc) {
  const int64_t K = m.cols, M = m.rows;
  if (is_block_type(m.type)) {  // GGUF block types: their own kernels, exact in both modes
    MatmulScratch::Share* shares = sc.share_buffers(ctx);
    auto rows = [&](size_t o0, size_t o1, int k) {
      block_matmul_rows(m, x, n, int64_t(o0), int64_t(o1), y, shares[k].decoded);
    };
    if (ctx.pool == nullptr) rows(0, size_t(M), 0);
    else ctx.pool->parallel_for(size_t(M), rows, 16);
    return;
  }
  const bool affine = m.type == WeightType::kAffine;
  // 2/4/8-bit affine matrices take the tile kernels (exact, or fast with int8 activations), and so
  // do 3/5/6-bit ones in the fast mode (FastOdd); other widths, the exact mode of 3/5/6/7-bit and
  // float weights the per-row kernels below.
  const bool tiled = Tiled(m);
  const bool int8 = ctx.int8_activations && (tiled || FastOdd(m));
  // The int8 forms' code book and tile-major codes exist for the int8 kernels alone.
  QWEN35_CHECK(!(m.book || m.codes_tiled) || int8);
  const AmxUnit amx = AmxFor(m, n, int8);
  if (affine) PrepAffine(ctx, x, n, m, tiled, int8, amx, sc);
  const bool bf16_tiled = m.type == WeightType::kBF16 && K % 2 == 0;
  MatmulScratch::Share* shares = sc.share_buffers(ctx);
  auto body = [&](size_t o0, size_t o1, int k) {
    if (bf16_tiled) {
      for (int64_t tb = 0; tb < n; tb += kActRowBlock)
        RangeBF16(m, x, tb, std::min(n, tb + kActRowBlock), int64_t(o0), int64_t(o1), y);
      return;
    }
    if (tiled || int8) {
      TiledRows(m, x, n, int8, amx, sc, int64_t(o0), int64_t(o1), y, shares[k]);
      return;
    }
    const int64_t groups = affine ? K / m.group : 0;
    // Output rows go in blocks of kOutRowBlock, each block against all row tiles of the activations:
    // the block's weights stay in cache while a tile of activations is reused across the block.
    // Row scales/biases as f32, padded so a full-vector load from any group stays in bounds.
    constexpr int64_t kOutRowBlock = 64;
    const int64_t stride = groups + 16;
    std::vector<float>& sb_buf = shares[k].row_scales;
    if (sb_buf.size() < size_t(2 * kOutRowBlock * stride)) sb_buf.assign(size_t(2 * kOutRowBlock * stride), 0.0f);
    for (int64_t tb = 0; tb < n; tb += kActRowBlock)
    for (int64_t ob = int64_t(o0); ob < int64_t(o1); ob += kOutRowBlock) {
      const int64_t oe = std::min(int64_t(o1), ob + kOutRowBlock);
      if (affine)
        for (int64_t o = ob; o < oe; ++o) {
          float* sf = sb_buf.data() + (o - ob) * 2 * stride;
          ConvertScales(m, o, groups, sf, sf + stride);
        }
      for (int64_t t0 = tb; t0 < std::min(n, tb + kActRowBlock); t0 += kRowKernelActRows) {
        const int64_t rt = std::min(kRowKernelActRows, std::min(n, tb + kActRowBlock) - t0);
        const float* xr[kRowKernelActRows];
        const float* xsr[kRowKernelActRows];
        float* yr[kRowKernelActRows];
        for (int r = 0; r < rt; ++r) {
          xr[r] = x + (t0 + r) * K;
          xsr[r] = affine ? sc.xsum.data() + (t0 + r) * groups : nullptr;
          yr[r] = y + (t0 + r) * M;
        }
        for (int64_t o = ob; o < oe; ++o) {
          const float* sf = sb_buf.data() + (o - ob) * 2 * stride;
          const float* bf = sf + stride;
          switch (rt) {
            case 1: Rows<1>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 2: Rows<2>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 3: Rows<3>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 4: Rows<4>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 5: Rows<5>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 6: Rows<6>(m, affine, xr, xsr, o, yr, sf, bf); break;
            case 7: Rows<7>(m, affine, xr, xsr, o, yr, sf, bf); break;
            default: Rows<8>(m, affine, xr, xsr, o, yr, sf, bf); break;
          }
        }
      }
    }
  };
  if (ctx.pool == nullptr) body(0, size_t(M), 0);
  else ctx.pool->parallel_for(size_t(M), body, 16);
}

void MatmulManyImpl(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws, float* const* ys,
                    int count, MatmulScratch& sc) {
  const Matrix& m0 = *ws[0];
  const bool int8 = ctx.int8_activations;
  auto fits = [&](const Matrix& m) { return Tiled(m) || (int8 && FastOdd(m)); };
  bool shared = count > 1 && fits(m0);
  for (int i = 0; i < count && shared; ++i) {
    const Matrix& m = *ws[i];
    shared = fits(m) && m.bits == m0.bits && m.group == m0.group && m.cols == m0.cols &&
             m.sb_type == m0.sb_type && m.rows % 16 == 0;
  }
  if (!shared) {
    for (int i = 0; i < count; ++i) MatmulImpl(ctx, x, n, *ws[i], ys[i], sc);
    return;
  }
  for (int i = 0; i < count; ++i) QWEN35_CHECK(!(ws[i]->book || ws[i]->codes_tiled) || int8);
  // The matrices share bits, group and columns, so one packing of the activations serves them all.
  const AmxUnit amx = AmxFor(m0, n, int8);
  PrepAffine(ctx, x, n, m0, true, int8, amx, sc);
  // One pass over the concatenated rows; every matrix starts at a multiple of 16, so its tiles and
  // the thread split fall where they would in a call of its own.
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += ws[i]->rows;
  MatmulScratch::Share* shares = sc.share_buffers(ctx);
  auto body = [&](size_t g0, size_t g1, int k) {
    int64_t off = 0;
    for (int i = 0; i < count; ++i) {
      const int64_t M = ws[i]->rows, a = std::max(int64_t(g0), off), b = std::min(int64_t(g1), off + M);
      if (a < b) TiledRows(*ws[i], x, n, int8, amx, sc, a - off, b - off, ys[i], shares[k]);
      off += M;
    }
  };
  if (ctx.pool == nullptr) body(0, size_t(total), 0);
  else ctx.pool->parallel_for(size_t(total), body, 16);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(MatmulImpl);
HWY_EXPORT(MatmulManyImpl);
HWY_EXPORT(TargetName);

void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w, float* y,
            MatmulScratch& scratch) {
  if (n == 0 || w.rows == 0) return;
  HWY_DYNAMIC_DISPATCH(MatmulImpl)(ctx, x, n, w, y, scratch);
}

void matmul_many(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws, float* const* ys,
                 int count, MatmulScratch& scratch) {
  if (n == 0 || count <= 0) return;
  HWY_DYNAMIC_DISPATCH(MatmulManyImpl)(ctx, x, n, ws, ys, count, scratch);
}

std::string simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

bool limit_simd(const std::string& name) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    std::string t = hwy::TargetName(target);
    std::string want = name;
    for (auto& c : t) c = char(std::tolower(static_cast<unsigned char>(c)));
    for (auto& c : want) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (t != want) continue;
    // In Highway's encoding a lower bit is a better target: disabling every bit below this one
    // leaves it the best target dispatch may choose, with the lower ones as its fallbacks.
    // DisableTargets is Highway's production switch for this (it resets the chosen target, so
    // the next dispatch of every kernel re-chooses); it holds for the process, like the flag.
    hwy::DisableTargets(target - 1);
    return true;
  }
  return false;
}

}  // namespace qwen35::kernels::cpu
#endif
