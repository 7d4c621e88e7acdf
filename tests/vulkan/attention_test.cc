// Gated full attention on the device against the reference (kernels/ref) over a paged fp32
// cache: outputs within 2e-5 and cached keys within 1e-5, as the CPU's op tests; and the same
// bits whatever the chunking of the prompt (one call, or chunks, or token by token), since a
// row's keys and their order are fixed by its position.
#include "vulkan/attention.h"

#include <gtest/gtest.h>

#include <vector>

#include "../kernels/test_kv.h"
#include "../kernels/test_matrices.h"
#include "kernels/ops.h"
#include "vk_test.h"
#include "vulkan/ops.h"

// A namespace of its own: the test binary compiles as one unit (tests/CMakeLists.txt).
namespace qwen35::vulkan::attention_test {
namespace {

using kernels::expect_close;
using kernels::randn;

constexpr int64_t kNh = 4, kNkv = 2, kHd = 32, kRot = 16, kRows = 73, kCap = 128;
constexpr double kTheta = 1e7;

struct Inputs {
  std::vector<float> qg, k, v, qn, kn;
};

Inputs make_inputs(bool gated) {
  const int64_t q_row = gated ? 2 * kHd : kHd;
  return {randn(size_t(kRows * kNh * q_row), 1), randn(size_t(kRows * kNkv * kHd), 2),
          randn(size_t(kRows * kNkv * kHd), 3), randn(size_t(kHd), 4), randn(size_t(kHd), 5)};
}

template <typename T>
std::vector<T> slice(const std::vector<T>& v, int64_t row0, int64_t rows, int64_t width) {
  return std::vector<T>(v.begin() + row0 * width, v.begin() + (row0 + rows) * width);
}

struct Result {
  std::vector<float> out, keys;  // [rows, nh·hd]; the cache's keys of positions [0, rows)
};

// The rows in chunks of the given sizes, each chunk its own submission; the cache's blocks in
// reverse physical order (paged). Keys: those of the rows' positions, in order.
Result run_device(Device& dev, const Inputs& in, bool gated, int64_t first_key,
                  const std::vector<int64_t>& chunks) {
  const int64_t q_row = gated ? 2 * kHd : kHd, row = kNkv * kHd, blocks = kCap / 64;
  auto table = std::vector<int32_t>(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(blocks - 1 - b);
  Buffer kp = put(dev, std::vector<float>(size_t(kCap * row), 0.0f)),
         vp = put(dev, std::vector<float>(size_t(kCap * row), 0.0f));
  Buffer bt = put(dev, table), qn = put(dev, in.qn), kn = put(dev, in.kn);
  Buffer rt = put(dev, rope_table(kTheta, kRot, kCap));
  Result r;
  // Row r at position first_key + r: the MTP head's cache starts at position 1 (model/state.h).
  int64_t done = 0;
  for (int64_t n : chunks) {
    const int64_t pos0 = first_key + done;
    std::vector<int32_t> pos(size_t(n * 3));
    for (int64_t t = 0; t < n; ++t)
      pos[size_t(3 * t)] = pos[size_t(3 * t + 1)] = pos[size_t(3 * t + 2)] = int32_t(pos0 + t);
    Buffer qg = put(dev, slice(in.qg, done, n, kNh * q_row)),
           k = put(dev, slice(in.k, done, n, row));
    Buffer v = put(dev, slice(in.v, done, n, row)), bp = put(dev, pos);
    Buffer qt = put(dev, std::vector<float>(size_t(n * kNh * kHd))),
           kt = put(dev, std::vector<float>(size_t(n * row)));
    Buffer out = put(dev, std::vector<float>(size_t(n * kNh * kHd)));
    AttentionShape s{kNh, kNkv, kHd, kRot, 1e-6f, first_key, gated};
    AttentionInputs ai{{&qg}, {&k}, {&v}, {&qn}, {&kn}, {&bp}, nullptr, {&rt}, kCap, {&qt}, {&kt}};
    Recorder rec(dev);
    EXPECT_TRUE(rec.begin().ok());
    record_attention(rec, s, ai, n, pos0, {{&kp}, {&vp}, {&bt}, kCap, {}, {}, {}}, {&out});
    std::vector<float> o(size_t(n * kNh * kHd));
    rec.stage_out({&out}, o.size() * 4, o.data());
    auto st = rec.submit();
    EXPECT_TRUE(st.ok()) << st.message();
    r.out.insert(r.out.end(), o.begin(), o.end());
    done += n;
  }
  std::vector<float> pool(size_t(kCap * row));
  EXPECT_TRUE(dev.download(kp, 0, pool.data(), pool.size() * 4).ok());
  for (int64_t p = first_key; p < first_key + done; ++p) {
    const float* at = pool.data() + (table[size_t(p / 64)] * 64 + p % 64) * row;
    r.keys.insert(r.keys.end(), at, at + row);
  }
  return r;
}

TEST(VulkanAttention, MatchesTheReferenceAndIgnoresTheChunking) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  QWEN35_VK_DEVICE_OR_SKIP(cut, (DeviceOptions{.max_groups = 1}));
  const kernels::Ops& ref = kernels::ref_ops();
  for (bool gated : {true, false})
    for (int64_t first_key : {0, 1}) {
      SCOPED_TRACE(std::string(gated ? "gated" : "ungated") + " first_key " +
                   std::to_string(first_key));
      const Inputs in = make_inputs(gated);
      const int64_t q_row = gated ? 2 * kHd : kHd, row = kNkv * kHd;
      // The reference: a 70-row prefill (across a block boundary), then three decode rows.
      kernels::TestKv cache(kCap, row, true);
      std::vector<float> want(size_t(kRows * kNh * kHd));
      kernels::Ops::AttentionParams ap{kNh,   kNkv,         kHd,          kRot,     float(kTheta),
                                       1e-6f, in.qn.data(), in.kn.data(), first_key};
      ap.gated = gated;
      int64_t done = 0;
      for (int64_t n : {70, 1, 1, 1}) {
        ref.attention({}, ap, in.qg.data() + done * kNh * q_row, in.k.data() + done * row,
                      in.v.data() + done * row, n, first_key + done, cache.view(),
                      want.data() + done * kNh * kHd);
        done += n;
      }
      const Result a = run_device(*dev, in, gated, first_key, {70, 1, 1, 1});
      expect_close(a.out.data(), want.data(), want.size(), 2e-5f, "attention");
      std::vector<float> keys = cache.keys(first_key + kRows);
      keys.erase(keys.begin(), keys.begin() + first_key * row);
      expect_close(a.keys.data(), keys.data(), keys.size(), 1e-5f, "k cache");
      const Result b = run_device(*dev, in, gated, first_key, {kRows});
      const Result c = run_device(*dev, in, gated, first_key, {40, 24, 9});
      EXPECT_EQ(a.out, b.out) << "chunking changed a bit";
      EXPECT_EQ(a.out, c.out) << "chunking changed a bit";
      EXPECT_EQ(a.keys, b.keys);
      EXPECT_EQ(run_device(*cut, in, gated, first_key, {kRows}).out, a.out)
          << "one workgroup per dispatch changed a bit";
    }
}

}  // namespace
}  // namespace qwen35::vulkan::attention_test

namespace qwen35::vulkan::attention_test {
namespace {

// A whole transformer layer as one submission: embed, norm, q/k/v, attention, o, residual, norm,
// gate/up, SwiGLU, down, residual; every op reading what the one before wrote (the recorder's
// barriers), against the same layer composed from the reference's ops.
TEST(VulkanAttention, ALayerIsOneSubmission) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const kernels::Ops& ref = kernels::ref_ops();
  const int64_t H = 64, I = 96, n = 7, vocab = 50, q_row = 2 * kHd;
  using kernels::WeightType;
  auto emb = kernels::make_matrix(WeightType::kQ8_0, vocab, H, 1);
  auto wq = kernels::make_matrix(WeightType::kAffine, kNh * q_row, H, 2, 4, 32);
  auto wk = kernels::make_matrix(WeightType::kBF16, kNkv * kHd, H, 3);
  auto wv = kernels::make_matrix(WeightType::kQ4_0, kNkv * kHd, H, 4);
  auto wo = kernels::make_matrix(WeightType::kF16, H, kNh * kHd, 5);
  auto wg = kernels::make_matrix(WeightType::kQ8_0, I, H, 6);
  auto wu = kernels::make_matrix(WeightType::kAffine, I, H, 7, 6, 64);
  auto wd = kernels::make_matrix(WeightType::kF32, H, I, 8);
  auto n1 = randn(size_t(H), 9), n2 = randn(size_t(H), 10), qn = randn(size_t(kHd), 11),
       kn = randn(size_t(kHd), 12);
  std::vector<int32_t> tokens = {3, 49, 0, 7, 7, 21, 30};

  // The reference.
  std::vector<float> x(size_t(n * H)), h(x.size()), q(size_t(n * kNh * q_row)),
      k(size_t(n * kNkv * kHd)), v(k.size()), a(size_t(n * kNh * kHd)), o(x.size()),
      g(size_t(n * I)), u(g.size()), s(g.size());
  ref.embed({}, emb.m, tokens.data(), n, x.data());
  ref.rms_norm({}, x.data(), n, H, n1.data(), 1e-6f, h.data());
  ref.matmul({}, h.data(), n, wq.m, q.data());
  ref.matmul({}, h.data(), n, wk.m, k.data());
  ref.matmul({}, h.data(), n, wv.m, v.data());
  kernels::TestKv cache(kCap, kNkv * kHd, true);
  kernels::Ops::AttentionParams ap{kNh,   kNkv,      kHd,       kRot, float(kTheta),
                                   1e-6f, qn.data(), kn.data(), 0};
  ref.attention({}, ap, q.data(), k.data(), v.data(), n, 0, cache.view(), a.data());
  ref.matmul({}, a.data(), n, wo.m, o.data());
  ref.add_rows({}, o.data(), nullptr, n, H, x.data());
  ref.rms_norm({}, x.data(), n, H, n2.data(), 1e-6f, h.data());
  ref.matmul({}, h.data(), n, wg.m, g.data());
  ref.matmul({}, h.data(), n, wu.m, u.data());
  ref.swiglu({}, g.data(), u.data(), n, I, I, s.data());
  ref.matmul({}, s.data(), n, wd.m, o.data());
  ref.add_rows({}, o.data(), nullptr, n, H, x.data());

  // The device: weights resident, activations in device buffers, one submission.
  std::vector<DeviceMatrix> dm;
  for (const auto* m : {&emb, &wq, &wk, &wv, &wo, &wg, &wu, &wd}) {
    auto d = upload_matrix(*dev, m->m);
    ASSERT_TRUE(d.ok()) << d.message();
    dm.push_back(std::move(*d));
  }
  auto zeros = [&](size_t floats) { return put(*dev, std::vector<float>(floats, 0.0f)); };
  Buffer bn1 = put(*dev, n1), bn2 = put(*dev, n2), bqn = put(*dev, qn), bkn = put(*dev, kn);
  Buffer bt = put(*dev, tokens), bx = zeros(x.size()), bh = zeros(x.size()), bq = zeros(q.size()),
         bk = zeros(k.size()), bv = zeros(v.size()), ba = zeros(a.size()), bo = zeros(x.size()),
         bg = zeros(g.size()), bu = zeros(g.size()), bs = zeros(g.size()),
         bqt = zeros(size_t(n * kNh * kHd)), bkt = zeros(k.size());
  Buffer kp = zeros(size_t(kCap * kNkv * kHd)), vp = zeros(size_t(kCap * kNkv * kHd));
  Buffer table = put(*dev, std::vector<int32_t>{1, 0}),
         rt = put(*dev, rope_table(kTheta, kRot, kCap));
  std::vector<int32_t> pos(size_t(3 * n));
  for (int64_t t = 0; t < n; ++t)
    pos[size_t(3 * t)] = pos[size_t(3 * t + 1)] = pos[size_t(3 * t + 2)] = int32_t(t);
  Buffer bp = put(*dev, pos);
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  record_embed(rec, dm[0], {&bt}, n, {&bx});
  record_rms_norm(rec, {&bx}, n, H, {&bn1}, 1e-6f, {&bh});
  record_matmul(rec, dm[1], {&bh}, n, {&bq});
  record_matmul(rec, dm[2], {&bh}, n, {&bk});
  record_matmul(rec, dm[3], {&bh}, n, {&bv});
  AttentionInputs ai{{&bq},   {&bk}, {&bv}, {&bqn}, {&bkn}, {&bp},
                     nullptr, {&rt}, kCap,  {&bqt}, {&bkt}};
  record_attention(rec, {kNh, kNkv, kHd, kRot, 1e-6f, 0, true}, ai, n, 0,
                   {{&kp}, {&vp}, {&table}, kCap, {}, {}, {}}, {&ba});
  record_matmul(rec, dm[4], {&ba}, n, {&bo});
  record_add_rows(rec, {&bo}, nullptr, n, H, {&bx});
  record_rms_norm(rec, {&bx}, n, H, {&bn2}, 1e-6f, {&bh});
  record_matmul(rec, dm[5], {&bh}, n, {&bg});
  record_matmul(rec, dm[6], {&bh}, n, {&bu});
  record_swiglu(rec, {&bg}, {&bu}, n, I, I, {&bs});
  record_matmul(rec, dm[7], {&bs}, n, {&bo});
  record_add_rows(rec, {&bo}, nullptr, n, H, {&bx});
  std::vector<float> got(x.size());
  rec.stage_out({&bx}, got.size() * 4, got.data());
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  EXPECT_EQ(rec.submissions(), 1u);
  EXPECT_GE(rec.commands(), 20u);
  // Each op within its own tolerance; composed, within 1e-4 of the reference's layer.
  expect_close(got.data(), x.data(), x.size(), 1e-4f, "layer");
}

}  // namespace
}  // namespace qwen35::vulkan::attention_test
