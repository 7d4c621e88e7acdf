// KV cache formats on the device (vulkan/attention.h; shaders/kv_encode.comp, attention_kv.comp):
// - the encoder against the CPU's (kernels::kv_encode_row) from the same f32 rows: the same bytes
//   for f32, bf16, q8_0 and q4_0, rotated or not, on Gaussian, wide, tiny (f16-subnormal scales),
//   spiked, zero, 10³⁰ and non-finite rows, rows of 34 and 18 bytes sharing words with their
//   neighbours; turbo within its stated bound (the row norm within an ulp, a code off by one cell
//   only where y_i/s sits within 2⁻²² of the boundary), and byte-equal on nearly every row;
// - the attention against the reference (kernels/ref) for every type and asymmetric pairs, as the
//   CPU's kv_cache_attention_test does: query and key inputs ±1 with eps 0, so QK-norm and RoPE
//   give the reference's bits on the device too, both caches then hold the same bytes (checked)
//   and the scores, in kv_scores' order, the same bits; what is left is the softmax and the value
//   sum (float on the device, double in the reference), held to the fp32 cache's 2e-5;
// - the same bits for a row whatever else is in the call: one prefill, decode rows one by one,
//   chunks cut on the 64-grid, one workgroup per dispatch.
// Each attention case costs lavapipe a second or more (it runs a workgroup's lanes as a loop and
// reads the rows byte by byte): every pair at head_dim 64, three pairs at 256.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "../kernels/test_kv.h"
#include "../kernels/test_matrices.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "vk_test.h"
#include "vulkan/attention.h"
#include "vulkan/ops.h"

// A namespace of its own: the test binary compiles as one unit (tests/CMakeLists.txt).
namespace qwen35::vulkan::kv_test {
namespace {

using kernels::KvFormat;
using kernels::KvType;
using kernels::KvTypes;
using kernels::randn;

// Rows of every kind the encoder must get right, `per` rows of each, [rows, hd].
std::vector<float> rows_of_kinds(int64_t hd, int64_t per, uint32_t seed, int64_t* rows) {
  const int kinds = 9;
  *rows = kinds * per;
  std::vector<float> x = randn(size_t(*rows * hd), seed);
  for (int64_t r = 0; r < *rows; ++r) {
    float* row = x.data() + r * hd;
    switch (r % kinds) {
      case 0:  // Gaussian
        break;
      case 1:  // wide
        for (int64_t i = 0; i < hd; ++i) row[i] *= 1e3f;
        break;
      case 2:  // tiny: amax/127 below f16's normal range (its subnormal scales)
        for (int64_t i = 0; i < hd; ++i) row[i] *= 3e-7f;
        break;
      case 3:  // one spike
        row[(r * 7) % hd] = 40.0f;
        break;
      case 4:  // zero
        std::fill_n(row, hd, 0.0f);
        break;
      case 5:  // huge
        for (int64_t i = 0; i < hd; ++i) row[i] *= 1e30f;
        break;
      case 6:  // mixed scales: half the row 1e-3 of the other
        for (int64_t i = 0; i < hd / 2; ++i) row[i] *= 1e-3f;
        break;
      case 7:  // a NaN
        row[(r * 5) % hd] = NAN;
        break;
      case 8:  // an infinity
        row[(r * 3) % hd] = -INFINITY;
        break;
    }
  }
  return x;
}

// The device's bytes of rows x [n, nkv, hd] encoded at positions 0..n-1 of a paged pool (blocks
// in reverse order, the pool first filled with 0xA5 so that a byte left unwritten shows), in
// position order.
std::vector<uint8_t> encode_on_device(Device& dev, const KvFormat& f, const std::vector<float>& x,
                                      int64_t n, int64_t nkv) {
  const int64_t rb = int64_t(kernels::kv_row_bytes(f)), stride = nkv * rb;
  const int64_t blocks = (n + 63) / 64 + 1, cap = blocks * 64;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(blocks - 1 - b);
  std::vector<uint8_t> fill(size_t((cap * stride + 3) / 4 * 4), 0xA5);
  Buffer pool = put(dev, fill), src = put(dev, x), tb = put(dev, table),
         books = put(dev, kv_books(f, f));
  Recorder rec(dev);
  EXPECT_TRUE(rec.begin().ok());
  record_kv_encode(rec, f, {&src}, n, nkv, 0, {&pool}, {&tb}, {&books}, false);
  auto st = rec.submit();
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_TRUE(dev.download(pool, 0, fill.data(), fill.size()).ok());
  std::vector<uint8_t> out;
  for (int64_t p = 0; p < n; ++p) {
    const uint8_t* at = fill.data() + (table[size_t(p / 64)] * 64 + p % 64) * stride;
    out.insert(out.end(), at, at + stride);
  }
  return out;
}

float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
uint32_t turbo_code(const uint8_t* codes, int64_t i, int bits) {
  const int64_t bit = i * bits;
  uint32_t v = codes[bit / 8];
  if (bit % 8 + bits > 8) v |= uint32_t(codes[bit / 8 + 1]) << 8;
  return (v >> (bit % 8)) & ((1u << bits) - 1u);
}

// A turbo row against the CPU's: the norm within one ulp (both NaN for a non-finite row), each
// code the CPU's or, where y_i/s lies within 2⁻²² (relative) of the boundary between the two,
// its neighbour. True when the bytes are equal.
bool check_turbo_row(const KvFormat& f, const float* x, const uint8_t* got, const uint8_t* want) {
  const size_t rb = kernels::kv_row_bytes(f);
  if (std::memcmp(got, want, rb) == 0) return true;
  const float sg = f32_at(got), sw = f32_at(want);
  if (std::isnan(sw)) {
    EXPECT_TRUE(std::isnan(sg));
    return false;
  }
  uint32_t ug, uw;
  std::memcpy(&ug, &sg, 4);
  std::memcpy(&uw, &sw, 4);
  EXPECT_LE(ug > uw ? ug - uw : uw - ug, 1u) << "turbo norm " << sg << " vs " << sw;
  const int bits = f.type == KvType::kTurbo4 ? 4 : 3;
  const float* c = kernels::kv_turbo_codebook(f.type, f.head_dim);
  std::vector<float> y(size_t(f.head_dim));
  kernels::kv_rotate(x, f.head_dim, y.data());
  for (int64_t i = 0; i < f.head_dim; ++i) {
    const uint32_t a = turbo_code(got + 4, i, bits), b = turbo_code(want + 4, i, bits);
    if (a == b) continue;
    EXPECT_EQ(a > b ? a - b : b - a, 1u) << "code " << i;
    const double mid = 0.5 * (double(c[std::min(a, b)]) + double(c[std::max(a, b)]));
    const double u = double(y[size_t(i)]) / double(sw);
    EXPECT_LE(std::fabs(u - mid), std::ldexp(std::max(1.0, std::fabs(mid)), -22))
        << "code " << i << ": y/s " << u << " is not at the boundary " << mid;
  }
  return false;
}

TEST(VulkanKv, TheEncoderMakesTheCpuBytes) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  struct Case {
    KvType t;
    int64_t hd, nkv;
    bool rotated;
  };
  // hd 32 with three KV heads: q8_0's 34-byte and q4_0's 18-byte rows share words.
  const Case cases[] = {
      {KvType::kF32, 64, 2, false},    {KvType::kBF16, 64, 2, false},   {KvType::kQ8_0, 32, 3, false},
      {KvType::kQ4_0, 32, 3, false},   {KvType::kQ8_0, 64, 2, false},   {KvType::kQ4_0, 64, 2, false},
      {KvType::kF32, 64, 2, true},     {KvType::kBF16, 128, 1, true},   {KvType::kQ8_0, 32, 3, true},
      {KvType::kQ8_0, 256, 1, true},   {KvType::kQ4_0, 64, 2, true},    {KvType::kQ4_0, 256, 1, true},
      {KvType::kTurbo4, 32, 3, true},  {KvType::kTurbo4, 64, 2, true},  {KvType::kTurbo4, 256, 1, true},
      {KvType::kTurbo3, 32, 3, true},  {KvType::kTurbo3, 128, 2, true}, {KvType::kTurbo3, 256, 1, true},
  };
  for (const Case& c : cases) {
    const KvFormat f = kernels::kv_format(c.t, c.hd, c.rotated);
    SCOPED_TRACE(std::string(kernels::kv_type_name(c.t)) + (c.rotated ? " rotated" : "") +
                 " head_dim " + std::to_string(c.hd));
    int64_t rows = 0;
    const std::vector<float> x = rows_of_kinds(c.hd, 8 * c.nkv, uint32_t(c.hd + int(c.t)), &rows);
    const int64_t n = rows / c.nkv, rb = int64_t(kernels::kv_row_bytes(f));
    const std::vector<uint8_t> got = encode_on_device(*dev, f, x, n, c.nkv);
    ASSERT_EQ(got.size(), size_t(rows * rb));
    std::vector<uint8_t> want(static_cast<size_t>(rb));
    int64_t equal = 0;
    for (int64_t r = 0; r < rows; ++r) {
      kernels::kv_encode_row(f, x.data() + r * c.hd, want.data());
      const uint8_t* g = got.data() + r * rb;
      if (c.t == KvType::kTurbo4 || c.t == KvType::kTurbo3) {
        equal += check_turbo_row(f, x.data() + r * c.hd, g, want.data());
        continue;
      }
      const bool same = std::memcmp(g, want.data(), size_t(rb)) == 0;
      EXPECT_TRUE(same) << "row " << r << " (kind " << r % 9 << ")";
      equal += same;
    }
    // Turbo's bound is for the rare row: nearly all rows are the CPU's bytes.
    EXPECT_GE(double(equal), 0.95 * double(rows));
    if (equal < rows) std::printf("%lld of %lld rows byte-equal\n", (long long)equal, (long long)rows);
  }
}

// ---- Attention ----

constexpr KvTypes kPairs[] = {
    {KvType::kBF16, KvType::kBF16},     {KvType::kQ8_0, KvType::kQ8_0},
    {KvType::kQ4_0, KvType::kQ4_0},     {KvType::kTurbo4, KvType::kTurbo4},
    {KvType::kTurbo3, KvType::kTurbo3}, {KvType::kQ8_0, KvType::kTurbo4},
    {KvType::kBF16, KvType::kQ4_0},     {KvType::kF32, KvType::kQ8_0},
    {KvType::kTurbo3, KvType::kF32},
};

struct Shape {
  int64_t nh, nkv, hd, rot;
};

struct DeviceRun {
  std::vector<float> out;
  std::vector<uint8_t> bytes;  // K then V rows of each position, in order (TestKv::bytes)
};

// The rows [0, total) in calls of `chunks` rows, each its own submission, into a paged cache of
// `types` (blocks in reverse order).
DeviceRun run_device(Device& dev, const Shape& s, KvTypes types, const std::vector<float>& qg,
               const std::vector<float>& k, const std::vector<float>& v, const std::vector<float>& qn,
               const std::vector<float>& kn, const std::vector<int64_t>& chunks) {
  const KvFormat kf = kernels::kv_cache_format(types.k, s.hd), vf = kernels::kv_cache_format(types.v, s.hd);
  const int64_t kstride = s.nkv * int64_t(kernels::kv_row_bytes(kf)),
                vstride = s.nkv * int64_t(kernels::kv_row_bytes(vf));
  const int64_t cap = 128, blocks = cap / 64, row = s.nkv * s.hd, q_row = 2 * s.hd;
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(blocks - 1 - b);
  const auto words = [](int64_t bytes) { return size_t((bytes + 3) / 4 * 4); };
  Buffer kp = put(dev, std::vector<uint8_t>(words(cap * kstride), 0)),
         vp = put(dev, std::vector<uint8_t>(words(cap * vstride), 0));
  Buffer bt = put(dev, table), bqn = put(dev, qn), bkn = put(dev, kn),
         books = put(dev, kv_books(kf, vf)), rt = put(dev, rope_table(1e4, s.rot, cap));
  DeviceRun r;
  int64_t pos0 = 0;
  for (int64_t n : chunks) {
    std::vector<int32_t> pos(size_t(3 * n));
    for (int64_t t = 0; t < n; ++t)
      pos[size_t(3 * t)] = pos[size_t(3 * t + 1)] = pos[size_t(3 * t + 2)] = int32_t(pos0 + t);
    auto part = [&](const std::vector<float>& a, int64_t w) {
      return put(dev, std::vector<float>(a.begin() + pos0 * w, a.begin() + (pos0 + n) * w));
    };
    Buffer bq = part(qg, s.nh * q_row), bk = part(k, row), bv = part(v, row), bp = put(dev, pos);
    Buffer qt = put(dev, std::vector<float>(size_t(n * s.nh * s.hd))),
           kt = put(dev, std::vector<float>(size_t(n * row))),
           out = put(dev, std::vector<float>(size_t(n * s.nh * s.hd)));
    AttentionInputs ai{{&bq}, {&bk}, {&bv}, {&bqn}, {&bkn}, {&bp}, nullptr, {&rt}, cap, {&qt}, {&kt}};
    DeviceKv kv{{&kp}, {&vp}, {&bt}, cap, kf, vf, {&books}};
    Recorder rec(dev);
    EXPECT_TRUE(rec.begin().ok());
    record_attention(rec, {s.nh, s.nkv, s.hd, s.rot, 0.0f, 0, true}, ai, n, pos0, kv, {&out});
    std::vector<float> o(size_t(n * s.nh * s.hd));
    rec.stage_out({&out}, o.size() * 4, o.data());
    auto st = rec.submit();
    EXPECT_TRUE(st.ok()) << st.message();
    r.out.insert(r.out.end(), o.begin(), o.end());
    pos0 += n;
  }
  std::vector<uint8_t> kb(words(cap * kstride)), vb(words(cap * vstride));
  EXPECT_TRUE(dev.download(kp, 0, kb.data(), kb.size()).ok());
  EXPECT_TRUE(dev.download(vp, 0, vb.data(), vb.size()).ok());
  for (int64_t p = 0; p < pos0; ++p) {
    const int64_t slot = table[size_t(p / 64)] * 64 + p % 64;
    r.bytes.insert(r.bytes.end(), kb.begin() + slot * kstride, kb.begin() + (slot + 1) * kstride);
    r.bytes.insert(r.bytes.end(), vb.begin() + slot * vstride, vb.begin() + (slot + 1) * vstride);
  }
  return r;
}

std::vector<float> signs(std::vector<float> x) {
  for (auto& e : x) e = e < 0 ? -1.0f : 1.0f;
  return x;
}

TEST(VulkanKv, AttentionMatchesTheReferenceAndIgnoresTheBatch) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  const kernels::Ops& ref = kernels::ref_ops();
  // Every pair at head_dim 64, with the batch checks; three at 256 (the largest the device takes).
  for (const Shape s : {Shape{4, 2, 64, 32}, Shape{3, 1, 256, 64}}) {
    auto qn = randn(size_t(s.hd), 1, 0.1f), kn = randn(size_t(s.hd), 2, 0.1f);
    for (auto& e : qn) e += 1;
    for (auto& e : kn) e += 1;
    const kernels::Ops::AttentionParams p{s.nh, s.nkv, s.hd, s.rot, 1e4f, 0.0f, qn.data(), kn.data()};
    const int64_t total = 70, row = s.nkv * s.hd;
    const auto qg = signs(randn(size_t(total * s.nh * 2 * s.hd), 10)),
               k = signs(randn(size_t(total * row), 20));
    const auto v = randn(size_t(total * row), 30);
    const std::vector<int64_t> calls = {5, 1, 60, 1, 3};  // decode rows alone, across blocks
    for (const KvTypes t : kPairs) {
      const bool wide = s.hd > 64;
      if (wide && !(t == KvTypes{KvType::kQ8_0, KvType::kTurbo4} ||
                    t == KvTypes{KvType::kBF16, KvType::kQ4_0} ||
                    t == KvTypes{KvType::kTurbo3, KvType::kF32}))
        continue;
      SCOPED_TRACE(kernels::kv_types_name(t) + " head_dim " + std::to_string(s.hd));
      kernels::TestKv cache(128, row, true, t, s.hd);
      std::vector<float> want(size_t(total * s.nh * s.hd));
      int64_t pos = 0;
      for (int64_t n : calls) {
        ref.attention({}, p, qg.data() + pos * s.nh * 2 * s.hd, k.data() + pos * row,
                      v.data() + pos * row, n, pos, cache.view(), want.data() + pos * s.nh * s.hd);
        pos += n;
      }
      const DeviceRun a = run_device(*dev, s, t, qg, k, v, qn, kn, calls);
      ASSERT_EQ(a.bytes, cache.bytes(total)) << "the device's cache is not the CPU's bytes";
      kernels::expect_close(a.out.data(), want.data(), want.size(), 2e-5f, "attention");
      if (wide) continue;
      // A row's bits whatever else is in the call.
      const DeviceRun whole = run_device(*dev, s, t, qg, k, v, qn, kn, {total});
      EXPECT_EQ(whole.out, a.out) << "one prefill against calls of 5, 1, 60, 1, 3 rows";
      EXPECT_EQ(whole.bytes, a.bytes);
      // The grid and the dispatch split on two pairs (their code paths are the format's alone).
      if (!(t == KvTypes{KvType::kQ8_0, KvType::kTurbo4} || t == KvTypes{KvType::kBF16, KvType::kQ4_0}))
        continue;
      EXPECT_EQ(run_device(*dev, s, t, qg, k, v, qn, kn, {64, 6}).out, a.out)
          << "cut on the 64-grid";
      EXPECT_EQ(run_device(*cut, s, t, qg, k, v, qn, kn, {total}).out, a.out)
          << "one workgroup per dispatch";
    }
  }
}

}  // namespace
}  // namespace qwen35::vulkan::kv_test
