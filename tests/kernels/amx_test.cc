// The AMX tile kernel (kernels/cpu/amx_tiles.h) against the fast mode's VNNI/AVX2 int8 kernels:
// the scalar model of the tile instructions everywhere, the hardware where this machine has AMX.
// Every case must be bit-identical, for every code width and group size of MLX exports and every
// GGUF type's int8 form, at several activation row counts and thread counts.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/amx.h"
#include "kernels/cpu/amx_matmul.h"
#include "kernels/cpu/amx_tiles.h"
#include "kernels/int8_form.h"
#include "test_matrices.h"

namespace qwen35::kernels {
namespace {

using cpu::AmxUnit;

// Restores the process's tile unit when a test ends.
struct UnitGuard {
  AmxUnit saved = cpu::amx_unit();
  ~UnitGuard() { cpu::amx_use_for_tests(saved); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A fast-mode matrix and the storage it views: an MLX affine matrix, or a GGUF block matrix's
// int8 form.
struct Case {
  std::string name;
  TestMatrix w;
  std::unique_ptr<Int8Form> form;
  const Matrix& m() const { return form ? form->m : w.m; }
};

std::vector<Case> fast_cases(core::ThreadPool* pool) {
  std::vector<Case> cases;
  uint32_t seed = 5000;
  // 40 output rows: two whole tiles and a part of one. 512 columns: whole blocks of the odd widths'
  // tiles (lcm(16, bits) words) and of the K-quants' 256-element blocks.
  constexpr int64_t kRows = 40, kCols = 512;
  for (int bits : {2, 3, 4, 5, 6, 8})
    for (int group : {32, 64, 128}) {
      Case c;
      c.name = "mlx " + std::to_string(bits) + "-bit g" + std::to_string(group);
      c.w = make_matrix(WeightType::kAffine, kRows, kCols, seed++, bits, group);
      cases.push_back(std::move(c));
    }
  for (WeightType t : kBlockTypes) {
    Case c;
    c.name = "int8 form of block type " + std::to_string(int(t));
    // 48 rows: the forms' tile-major codes and scales (rows in whole tiles of 16).
    c.w = make_matrix(t, 48, kCols, seed++);
    c.form = cpu_ops().int8_form(c.w.m, pool);
    cases.push_back(std::move(c));
  }
  return cases;
}

// y = x·Wᵀ in fast mode on the given tile unit, with a pool of two threads or none.
std::vector<float> fast_matmul(AmxUnit unit, const Matrix& m, const std::vector<float>& x, int64_t n,
                               core::ThreadPool* pool) {
  EXPECT_TRUE(cpu::amx_use_for_tests(unit));
  std::vector<float> y(size_t(n * m.rows));
  cpu_ops().matmul({pool, true}, x.data(), n, m, y.data());
  return y;
}

// The emulated tile unit under the real dispatch (matmul.cc takes it for calls of 16 rows or
// more) gives the VNNI/AVX2 kernels' bits: every group's integer sum, the float scaling's order,
// the packed layouts, partial tiles of output and activation rows, and the thread split.
TEST(Amx, EmulatedTilesGiveTheFastModeBits) {
  UnitGuard guard;
  core::ThreadPool pool(2);
  const std::vector<Case> cases = fast_cases(&pool);
  uint32_t seed = 9000;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Matrix& m = c.m();
    ASSERT_TRUE(cpu::amx_fits(m)) << "every fast-mode matrix of these shapes takes the tiles";
    for (int64_t n : {16, 17, 64, 100}) {
      const std::vector<float> x = randn(size_t(n * m.cols), seed++);
      const std::vector<float> vnni = fast_matmul(AmxUnit::kNone, m, x, n, &pool);
      for (core::ThreadPool* p : {static_cast<core::ThreadPool*>(nullptr), &pool}) {
        const std::vector<float> tiles = fast_matmul(AmxUnit::kEmulated, m, x, n, p);
        EXPECT_TRUE(same_bits(tiles, vnni)) << n << " rows, " << (p ? 2 : 1) << " thread(s)";
      }
    }
  }
}

// The float step of the tile kernel dispatches per SIMD target (amx_scale.cc): every target this
// CPU runs gives the same bits as the VNNI/AVX2 kernels.
TEST(Amx, EmulatedTilesGiveTheFastModeBitsOnEveryTarget) {
  UnitGuard guard;
  std::vector<Case> cases;
  for (auto [bits, group] : {std::pair{4, 64}, std::pair{6, 128}, std::pair{8, 32}}) {
    Case c;
    c.w = make_matrix(WeightType::kAffine, 40, 512, uint32_t(600 + bits), bits, group);
    cases.push_back(std::move(c));
  }
  Case q6;
  q6.w = make_matrix(WeightType::kQ6_K, 48, 512, 610);  // groups of 16
  q6.form = cpu_ops().int8_form(q6.w.m, nullptr);
  cases.push_back(std::move(q6));
  const std::vector<float> x = randn(size_t(17 * 512), 611);
  for (const Case& c : cases) {
    const std::vector<float> vnni = fast_matmul(AmxUnit::kNone, c.m(), x, 17, nullptr);
    on_every_target([&](const std::string& name) {
      EXPECT_TRUE(same_bits(fast_matmul(AmxUnit::kEmulated, c.m(), x, 17, nullptr), vnni)) << name;
    });
  }
}

// Below 16 rows (decode) the tiles are not used: the emulated unit cannot change those results.
TEST(Amx, FewRowsStayOnTheVnniPath) {
  UnitGuard guard;
  Case c;
  c.w = make_matrix(WeightType::kAffine, 32, 256, 77, 4, 64);
  const std::vector<float> x = randn(size_t(15 * 256), 78);
  EXPECT_TRUE(same_bits(fast_matmul(AmxUnit::kEmulated, c.m(), x, 15, nullptr),
                        fast_matmul(AmxUnit::kNone, c.m(), x, 15, nullptr)));
  EXPECT_TRUE(same_bits(fast_matmul(AmxUnit::kEmulated, c.m(), x, 1, nullptr),
                        fast_matmul(AmxUnit::kNone, c.m(), x, 1, nullptr)));
}

// The emulated instruction on hand-made tiles: C[m][n] += Σ_k u8(A[m][k])·s8(B[k/4][4n + k%4]),
// extremes included (255 · -128), and the configuration limits of palette 1.
TEST(Amx, EmulatedDpbusdIsTheDocumentedProduct) {
  cpu::amx::EmuTileUnit u;
  const cpu::amx::TileConfig cfg = cpu::amx::make_config(64);
  u.configure(cfg);
  uint8_t a[16][64], b[16][64];
  int32_t c[16][16] = {}, out[16][16];
  for (int r = 0; r < 16; ++r)
    for (int k = 0; k < 64; ++k) {
      a[r][k] = uint8_t((r * 64 + k) * 37 % 256);
      b[r][k] = uint8_t((r * 64 + k) * 101 % 256);
    }
  a[0][0] = 255;
  b[0][0] = 0x80;  // -128
  for (int r = 0; r < 16; ++r) c[r][r] = r - 7;
  u.load_c(c, 64);
  u.load_a(a, 64);
  u.load_b(b, 64);
  u.dpbusd();
  u.store_c(out, 64);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      int64_t want = c[m][n];
      for (int k = 0; k < 64; ++k) want += int64_t(a[m][k]) * int64_t(int8_t(b[k / 4][4 * n + k % 4]));
      ASSERT_EQ(out[m][n], int32_t(want)) << m << "," << n;
    }
  u.release();
  for (int step : {4, 16, 32, 64}) {
    const cpu::amx::TileConfig s = cpu::amx::make_config(step);
    EXPECT_EQ(s.rows[cpu::amx::kTileB], step / 4);
    EXPECT_EQ(s.colsb[cpu::amx::kTileA], step);
  }
  cpu::amx::TileConfig bad = cfg;
  bad.rows[cpu::amx::kTileA] = 17;
  EXPECT_DEATH(u.configure(bad), "rows");
  bad = cfg;
  bad.colsb[cpu::amx::kTileB] = 65;
  EXPECT_DEATH(u.configure(bad), "colsb");
}

// The hardware tile unit, where this machine has AMX and the kernel grants tile data: the same
// bits as the emulation and as the VNNI path.
TEST(Amx, HardwareTilesGiveTheFastModeBits) {
  const cpu::AmxStatus st = cpu::amx_status();
  if (!st.in_use) GTEST_SKIP() << "AMX not in use here: " << st.why_not;
  UnitGuard guard;
  core::ThreadPool pool(2);
  const std::vector<Case> cases = fast_cases(&pool);
  uint32_t seed = 9500;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Matrix& m = c.m();
    for (int64_t n : {16, 17, 64, 100}) {
      const std::vector<float> x = randn(size_t(n * m.cols), seed++);
      const std::vector<float> vnni = fast_matmul(AmxUnit::kNone, m, x, n, &pool);
      EXPECT_TRUE(same_bits(fast_matmul(AmxUnit::kEmulated, m, x, n, nullptr), vnni)) << n << " rows";
      for (core::ThreadPool* p : {static_cast<core::ThreadPool*>(nullptr), &pool})
        EXPECT_TRUE(same_bits(fast_matmul(AmxUnit::kHardware, m, x, n, p), vnni))
            << n << " rows, " << (p ? 2 : 1) << " thread(s)";
    }
  }
}

TEST(Amx, StatusSaysWhyNot) {
  const cpu::AmxStatus st = cpu::amx_status();
  if (st.in_use) EXPECT_TRUE(st.why_not.empty());
  else EXPECT_FALSE(st.why_not.empty());
  std::printf("[amx] %s\n", st.in_use ? "in use" : ("not in use: " + st.why_not).c_str());
}

}  // namespace
}  // namespace qwen35::kernels
