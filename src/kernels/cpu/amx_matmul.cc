// The AMX tile kernel's operands and its dispatch to a tile unit (amx_matmul.h, amx_tiles.h).
#include "kernels/cpu/amx_matmul.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/matrix.h"

namespace qwen35::kernels::cpu {

bool amx_fits(const Matrix& m) {
  if (!(tiled_affine(m) || fast_odd_affine(m))) return false;
  const int64_t g = m.group;
  return g % 4 == 0 && (g <= amx::kMaxColsb || g % amx::kMaxColsb == 0);
}

void amx_pack(const Context& ctx, const Matrix& m, int64_t n, MatmulScratch& sc) {
  QWEN35_CHECK(amx_fits(m));
  const int64_t K = m.cols, groups = K / m.group, blocks = (n + 15) / 16;
  const int64_t b_bytes = amx::packed_b_bytes(m), sx_floats = amx::packed_sx_floats(m);
  sc.amx_b.resize(size_t(blocks * b_bytes));
  sc.amx_sx.resize(size_t(blocks * sx_floats));
  auto body = [&](size_t b0, size_t b1, int) {
    for (int64_t blk = int64_t(b0); blk < int64_t(b1); ++blk) {
      const int64_t t = 16 * blk;
      float* dx = sc.amx_sx.data() + blk * sx_floats;
      amx::pack_acts(sc.xq.data(), sc.xdx.data(), sc.xsum.data(), K, groups, t, int(std::min<int64_t>(16, n - t)),
                     amx::k_step(m), sc.amx_b.data() + blk * b_bytes, dx, dx + 16 * groups);
    }
  };
  if (ctx.pool != nullptr && blocks > 1) ctx.pool->parallel_for(size_t(blocks), body, 1);
  else body(0, size_t(blocks), 0);
}

void amx_range(AmxUnit unit, const Matrix& m, const MatmulScratch& sc, int64_t t0, int64_t t1, int64_t o0,
               int64_t o1, float* y, MatmulScratch::Share& share) {
  QWEN35_CHECK(amx_fits(m));
  if (t0 >= t1 || o0 >= o1) return;
  if (unit == AmxUnit::kHardware) {
    amx::tile_range_hw(m, sc, t0, t1, o0, o1, y, share);
    return;
  }
  QWEN35_CHECK(unit == AmxUnit::kEmulated);
  amx::EmuTileUnit u;
  amx::tile_range(u, m, sc, t0, t1, o0, o1, y, share);
}

namespace amx {

// The codes of row-major words `row` in the order QuantizeRow8 lays out the activations: for 2, 4
// and 8 bits, word jj's code bits [mm·bits, (mm+1)·bits) of byte b at jj·C + mm·4 + b (C = 32/bits
// codes a word); for 3, 5 and 6 bits, the natural order. Code-book indices become their values.
static void unpack_row(const Matrix& m, const uint32_t* row, uint8_t* out) {
  const int bits = m.bits;
  const int64_t K = m.cols;
  if (bits == 3 || bits == 5 || bits == 6) {
    for (int64_t k = 0; k < K; ++k) out[k] = uint8_t(affine_value(m, affine_code(row, k, bits)));
    return;
  }
  const int per = 8 / bits, C = 32 / bits;
  const uint32_t mask = bits == 8 ? 0xFFu : (1u << bits) - 1u;
  const auto* bytes = reinterpret_cast<const uint8_t*>(row);
  for (int64_t jj = 0; jj < K / C; ++jj)
    for (int mm = 0; mm < per; ++mm)
      for (int b = 0; b < 4; ++b) {
        const uint32_t q = (uint32_t(bytes[jj * 4 + b]) >> (bits * mm)) & mask;
        out[jj * C + mm * 4 + b] = uint8_t(affine_value(m, q));
      }
}

void pack_weights(const Matrix& m, int64_t o, int nr, int step, uint8_t* dst, uint8_t* row,
                  std::vector<uint32_t>& words) {
  const int64_t K = m.cols, steps = K / step;
  std::memset(dst, 0, size_t(16 * K));
  for (int r = 0; r < nr; ++r) {
    unpack_row(m, affine_row(m, o + r, words), row);
    for (int64_t s = 0; s < steps; ++s) std::memcpy(dst + (s * 16 + r) * step, row + s * step, size_t(step));
  }
}

void pack_acts(const int8_t* xq, const float* xdx, const float* xsum, int64_t K, int64_t groups, int64_t t, int nt,
               int step, uint8_t* dst, float* dx, float* xs) {
  const int64_t steps = K / step;
  std::memset(dst, 0, size_t(16 * K));
  std::fill(dx, dx + 16 * groups, 0.0f);
  std::fill(xs, xs + 16 * groups, 0.0f);
  for (int n = 0; n < nt; ++n) {
    const int8_t* x = xq + (t + n) * K;
    for (int64_t s = 0; s < steps; ++s)
      for (int kk = 0; kk < step / 4; ++kk)
        std::memcpy(dst + s * step * 16 + kk * 64 + n * 4, x + s * step + kk * 4, 4);
    for (int64_t g = 0; g < groups; ++g) {
      dx[g * 16 + n] = xdx[(t + n) * groups + g];
      xs[g * 16 + n] = xsum[(t + n) * groups + g];
    }
  }
}

void load_scales(const Matrix& m, int64_t o, int nr, float* s, float* b) {
  const int64_t groups = m.cols / m.group;
  std::fill(s, s + 16 * groups, 0.0f);
  std::fill(b, b + 16 * groups, 0.0f);
  for (int r = 0; r < nr; ++r)
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t i = sb_index(m, o + r, g);
      const float sc = sb_at(m.scales, m.sb_type, i);
      s[g * 16 + r] = sc;
      b[g * 16 + r] = m.biases ? sb_at(m.biases, m.sb_type, i) : implicit_bias(m, sc);
    }
}

}  // namespace amx
}  // namespace qwen35::kernels::cpu
