// The AMX tile kernel, written once over a "tile unit": the hardware (amx_hw.cc: LDTILECFG,
// TILELOADD, TDPBUSD, TILESTORED, TILERELEASE, one intrinsic each) or a scalar model of exactly
// those instructions' documented semantics (EmuTileUnit, below). Everything else, the packed
// operands (amx_matmul.cc), the loop over tiles, the per-group integer sums and the float scaling
// (amx_scale.cc), is shared by both, so a test of the emulated unit proves all of it but the
// instructions themselves.
//
// Roles: C (tmm0) = A·B, int32 [16 output rows][16 activation rows]; A (tmm1) = 16 weight rows ×
// `step` bytes of unsigned codes (TDPBUSD's unsigned operand, as the codes are); B (tmm2) =
// step/4 rows × 64 bytes of signed int8 activations in VNNI-4 order: B row kk, bytes 4n..4n+3 are
// activation row n's values k = 4kk..4kk+3. A K-step is min(group, 64) values, so every group is a
// whole number of steps and its sum is a tile of its own: C starts from zero at each group.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/amx_matmul.h"

namespace qwen35::kernels::cpu::amx {

inline constexpr int kTileC = 0, kTileA = 1, kTileB = 2;
inline constexpr int kMaxRows = 16, kMaxColsb = 64;  // palette 1

// LDTILECFG's 64-byte operand (palette 1): per tile, rows and bytes per row (colsb).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Palette 1's limits; both units check every configuration they are given (a violation is a bug
// of this file, and on hardware a #GP).
inline void check_config(const TileConfig& c) {
  QWEN35_CHECK(c.palette == 1 && c.start_row == 0);
  for (int i = 0; i < 16; ++i) {
    QWEN35_CHECK(c.rows[i] <= kMaxRows && c.colsb[i] <= kMaxColsb);
    QWEN35_CHECK((c.rows[i] == 0) == (c.colsb[i] == 0));
  }
}

// The one configuration of the kernel, for a K-step of `step` bytes (4..64, a multiple of 4).
inline TileConfig make_config(int step) {
  QWEN35_CHECK(step >= 4 && step <= kMaxColsb && step % 4 == 0);
  TileConfig c;
  c.rows[kTileC] = kMaxRows;
  c.colsb[kTileC] = 16 * 4;  // 16 int32 sums a row
  c.rows[kTileA] = kMaxRows;
  c.colsb[kTileA] = uint16_t(step);
  c.rows[kTileB] = uint8_t(step / 4);
  c.colsb[kTileB] = 16 * 4;  // 16 activation rows × 4 bytes
  check_config(c);
  return c;
}

// A scalar model of the tile unit, from the instructions' pseudocode (Intel SDM): tiles are 16
// rows of 64 bytes; TILELOADD reads rows × colsb bytes and zeroes the rest of the tile;
// TDPBUSD adds to each int32 of C the sum of four u8 (A) × s8 (B) products per dword pair,
// wrapping; shape mismatches (#UD on hardware) fail a check here.
class EmuTileUnit {
 public:
  void configure(const TileConfig& c) {
    check_config(c);
    cfg_ = c;
    configured_ = true;
    std::memset(t_, 0, sizeof(t_));  // LDTILECFG zeroes every tile
  }
  void load_c(const void* p, int64_t stride) { load(kTileC, p, stride); }
  void load_a(const void* p, int64_t stride) { load(kTileA, p, stride); }
  void load_b(const void* p, int64_t stride) { load(kTileB, p, stride); }
  void dpbusd() {  // C += A·B
    QWEN35_CHECK(configured_);
    const int mr = cfg_.rows[kTileC], nc = cfg_.colsb[kTileC] / 4, kc = cfg_.colsb[kTileA] / 4;
    QWEN35_CHECK(cfg_.rows[kTileA] == mr && cfg_.rows[kTileB] == kc && cfg_.colsb[kTileB] == cfg_.colsb[kTileC]);
    for (int m = 0; m < mr; ++m)
      for (int n = 0; n < nc; ++n) {
        uint32_t acc = dword(kTileC, m, n);
        for (int k = 0; k < kc; ++k)
          for (int j = 0; j < 4; ++j) {
            const int32_t a = t_[kTileA][m][4 * k + j];                        // unsigned byte
            const int32_t b = int8_t(t_[kTileB][k][4 * n + j]);                // signed byte
            acc += uint32_t(a * b);
          }
        std::memcpy(&t_[kTileC][m][4 * n], &acc, 4);
      }
  }
  void store_c(void* p, int64_t stride) const {
    QWEN35_CHECK(configured_);
    for (int r = 0; r < cfg_.rows[kTileC]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, t_[kTileC][r], cfg_.colsb[kTileC]);
  }
  void release() {
    configured_ = false;
    std::memset(t_, 0, sizeof(t_));
  }

 private:
  void load(int i, const void* p, int64_t stride) {
    QWEN35_CHECK(configured_ && cfg_.rows[i] > 0);
    std::memset(t_[i], 0, sizeof(t_[i]));
    for (int r = 0; r < cfg_.rows[i]; ++r)
      std::memcpy(t_[i][r], static_cast<const uint8_t*>(p) + r * stride, cfg_.colsb[i]);
  }
  uint32_t dword(int i, int r, int n) const {
    uint32_t v;
    std::memcpy(&v, &t_[i][r][4 * n], 4);
    return v;
  }
  TileConfig cfg_;
  bool configured_ = false;
  uint8_t t_[8][kMaxRows][kMaxColsb];
};

// amx_matmul.cc: the operands in the tiles' layouts, and the scales.
// Rows o..o+nr-1 (nr ≤ 16; the others zero) as A tiles: [K-step s][row r][step bytes], the
// unsigned codes (a code book's values) in the order of the activations' bytes (QuantizeRow8).
// row: K bytes of scratch; words: affine_row's.
void pack_weights(const Matrix& m, int64_t o, int nr, int step, uint8_t* dst, uint8_t* row,
                  std::vector<uint32_t>& words);
// Activation rows t..t+nt-1 (nt ≤ 16; the others zero) of xq [rows][K] as B tiles: [K-step
// s][step/4][64], and their group scales and sums as [group][16] (the others zero).
void pack_acts(const int8_t* xq, const float* xdx, const float* xsum, int64_t K, int64_t groups, int64_t t, int nt,
               int step, uint8_t* dst, float* dx, float* xs);
// The K-step of a matrix's tiles: a group, or 64 values of a larger one.
inline int k_step(const Matrix& m) { return int(std::min<int64_t>(m.group, kMaxColsb)); }
// What amx_pack made for one block of 16 activation rows: B tiles, then dx and xsum.
inline int64_t packed_b_bytes(const Matrix& m) { return 16 * m.cols; }
inline int64_t packed_sx_floats(const Matrix& m) { return 2 * 16 * (m.cols / m.group); }
// Rows o..o+nr-1's scales and biases as f32 [group][16] (the values ConvertScales makes; the
// others zero).
void load_scales(const Matrix& m, int64_t o, int nr, float* s, float* b);
// amx_scale.cc: one group's sums c [16 rows][16 activation rows] into acc [16][16], for the
// first nr rows: acc = fma(float(c), s[l]·dx[r], acc); acc = fma(b[l], xs[r], acc).
void scale_group(const int32_t* c, const float* s, const float* b, const float* dx, const float* xs, int nr,
                 float* acc);

// A zero C tile to start each group from (TILELOADD of zeros: the unit's four operations only).
alignas(64) inline constexpr int32_t kZeroTile[kMaxRows * 16] = {};

// The kernel: output rows [o0, o1) against activation rows [t0, t1), on `u`. For each output row o
// and activation row t, over the groups g in order (RowScalar8's operations, in its order):
//   isum = Σ_{k∈g} q[o,k]·xq[t,k]  (C, an exact int32)
//   acc = fma(float(isum), s[o,g]·dx[t,g], acc);  acc = fma(b[o,g], xsum[t,g], acc)
// The activations come packed (amx_pack), a weight tile is packed once for all activation rows.
template <class Unit>
void tile_range(Unit& u, const Matrix& m, const MatmulScratch& sc, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                float* y, MatmulScratch::Share& share) {
  QWEN35_CHECK(t0 % 16 == 0);
  const int64_t K = m.cols, M = m.rows, G = m.group, groups = K / G;
  const int step = k_step(m), per_group = int(G / step);
  const int64_t a_bytes = 16 * K, b_bytes = packed_b_bytes(m), sx_floats = packed_sx_floats(m);
  const int64_t blocks = (t1 - t0 + 15) / 16;
  QWEN35_CHECK(int64_t(sc.amx_b.size()) >= (t0 / 16 + blocks) * b_bytes);
  QWEN35_CHECK(int64_t(sc.amx_sx.size()) >= (t0 / 16 + blocks) * sx_floats);
  const uint8_t* B = sc.amx_b.data() + t0 / 16 * b_bytes;
  const float* SX = sc.amx_sx.data() + t0 / 16 * sx_floats;
  share.amx_a.resize(size_t(a_bytes + K));  // the tile, then one row's bytes
  share.amx_sb.resize(size_t(2 * 16 * groups));
  uint8_t* A = share.amx_a.data();
  float* s = share.amx_sb.data();  // [group][16] each
  float* b = s + 16 * groups;
  alignas(64) int32_t c[kMaxRows * 16];  // [output row][activation row]
  alignas(64) float acc[kMaxRows * 16];  // the same
  u.configure(make_config(step));
  for (int64_t o = o0; o < o1; o += 16) {
    const int nr = int(std::min<int64_t>(16, o1 - o));
    pack_weights(m, o, nr, step, A, A + a_bytes, share.row_words);
    load_scales(m, o, nr, s, b);
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t t = t0 + 16 * blk;
      const int nt = int(std::min<int64_t>(16, t1 - t));
      const uint8_t* Bb = B + blk * b_bytes;
      const float* dxb = SX + blk * sx_floats;
      const float* xsb = dxb + 16 * groups;
      std::fill(acc, acc + kMaxRows * 16, 0.0f);
      for (int64_t g = 0; g < groups; ++g) {
        u.load_c(kZeroTile, 64);
        for (int64_t st = g * per_group; st < (g + 1) * per_group; ++st) {
          u.load_a(A + st * 16 * step, step);
          u.load_b(Bb + st * step * 16, 64);
          u.dpbusd();
        }
        u.store_c(c, 64);
        scale_group(c, s + g * 16, b + g * 16, dxb + g * 16, xsb + g * 16, nr, acc);
      }
      for (int r = 0; r < nt; ++r)
        for (int l = 0; l < nr; ++l) y[(t + r) * M + o + l] = acc[l * 16 + r];
    }
  }
  u.release();
}

// amx_hw.cc: tile_range on the hardware unit (call only where amx_status().in_use).
void tile_range_hw(const Matrix& m, const MatmulScratch& sc, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                   float* y, MatmulScratch::Share& share);

}  // namespace qwen35::kernels::cpu::amx
