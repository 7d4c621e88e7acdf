// The attention op over KV caches of every format (kernels/kv_format.h; the CPU kernel in
// cpu/kv_attend.cc): against the scalar reference (ref_ops: the K rows scored by kv_scores_ref,
// the softmax and the value sum in double over the decoded rows), and bit for bit against itself
// whatever the block layout, the thread count and the way the rows came in (one call or many).
//
// The query and key inputs are ±1 with eps 0, so QK-norm is exact in both backends (mean square
// 1, the weights' products exact): both then encode the same rows and prepare the same queries
// (checked: the caches' bytes are equal), and what is left to differ is the softmax and the
// value sum, held to the fp32 cache's bound. Otherwise a last-bit difference of the two norms
// moves a rounding boundary of the stored type now and then, a difference of the format, not of
// the kernel.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "test_kv.h"
#include "test_matrices.h"

namespace qwen35::kernels {
namespace {

constexpr KvTypes kCompressedPairs[] = {
    {KvType::kBF16, KvType::kBF16},     {KvType::kQ8_0, KvType::kQ8_0},
    {KvType::kQ4_0, KvType::kQ4_0},     {KvType::kTurbo4, KvType::kTurbo4},
    {KvType::kTurbo3, KvType::kTurbo3}, {KvType::kQ8_0, KvType::kTurbo4},
    {KvType::kBF16, KvType::kQ4_0},     {KvType::kF32, KvType::kQ8_0},
};

void compressed_attention_checks() {
  const Ops& ref = ref_ops();
  const Ops& cpu = cpu_ops();
  core::ThreadPool pool(3);
  for (auto [nh, nkv, hd, rd] : {std::tuple{4, 2, 64, 32}, std::tuple{3, 1, 256, 64}}) {
    auto qn = randn(size_t(hd), 1, 0.1f), kn = randn(size_t(hd), 2, 0.1f);
    for (auto& v : qn) v += 1;
    for (auto& v : kn) v += 1;
    const Ops::AttentionParams p{nh, nkv, hd, rd, 1e4f, 0.0f, qn.data(), kn.data()};
    const auto signs = [](std::vector<float> x) {
      for (auto& e : x) e = e < 0 ? -1.0f : 1.0f;
      return x;
    };
    for (const KvTypes t : kCompressedPairs) {
      SCOPED_TRACE(kv_types_name(t) + " head_dim " + std::to_string(hd));
      const int64_t cap = 140, row = nkv * hd;
      TestKv c_ref(cap, row, false, t, hd), c_cpu(cap, row, false, t, hd),
          c_scattered(cap, row, true, t, hd), c_one(cap, row, false, t, hd),
          c_whole(cap, row, false, t, hd);
      std::vector<float> all_qg, all_k, all_v, all_o;
      int64_t pos = 0;
      for (int64_t n : {5, 1, 70, 1, 60}) {
        auto qg = signs(randn(size_t(n * nh * 2 * hd), uint32_t(10 + pos))),
             k = signs(randn(size_t(n * row), uint32_t(20 + pos))),
             v = randn(size_t(n * row), uint32_t(30 + pos));
        std::vector<float> o1(size_t(n * nh * hd)), o2(o1.size()), o3(o1.size()), o4(o1.size());
        ref.attention({}, p, qg.data(), k.data(), v.data(), n, pos, c_ref.view(), o1.data());
        cpu.attention({&pool}, p, qg.data(), k.data(), v.data(), n, pos, c_cpu.view(), o2.data());
        cpu.attention({&pool}, p, qg.data(), k.data(), v.data(), n, pos, c_scattered.view(), o3.data());
        cpu.attention({}, p, qg.data(), k.data(), v.data(), n, pos, c_one.view(), o4.data());
        ASSERT_EQ(c_ref.bytes(pos + n), c_cpu.bytes(pos + n));
        expect_close(o1.data(), o2.data(), o1.size(), 2e-5f, "attention");
        EXPECT_EQ(o2, o3) << "scattered blocks, position " << pos;
        EXPECT_EQ(o2, o4) << "one thread, position " << pos;
        EXPECT_EQ(c_cpu.bytes(pos + n), c_scattered.bytes(pos + n));
        all_qg.insert(all_qg.end(), qg.begin(), qg.end());
        all_k.insert(all_k.end(), k.begin(), k.end());
        all_v.insert(all_v.end(), v.begin(), v.end());
        all_o.insert(all_o.end(), o2.begin(), o2.end());
        pos += n;
      }
      // The same rows in one call: every row's output and the cache, bit for bit.
      std::vector<float> o(all_o.size());
      cpu.attention({&pool}, p, all_qg.data(), all_k.data(), all_v.data(), pos, 0, c_whole.view(), o.data());
      EXPECT_EQ(o, all_o);
      EXPECT_EQ(c_whole.bytes(pos), c_cpu.bytes(pos));
    }
  }
}

TEST(Ops, AttentionOverCompressedCachesOnEveryTarget) {
  on_every_target([](const std::string&) { compressed_attention_checks(); });
}

}  // namespace
}  // namespace qwen35::kernels
