// The depth fill (model/depth_fill.h, bench --depth-fill random): for every KV type, the rows it
// writes are read back by the type's own decoder as the values it generated (each in its place:
// layer, position, head, K or V), the filled state holds the KV bytes a prefill of the same
// depth holds, and decoding after it runs and gives finite logits.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/kv_format.h"
#include "kernels/ops.h"
#include "model/depth_fill.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using kernels::KvType;

// Relative L2 error a row may have after its type's encode and decode, for rows of RMS 1:
// f32 exact; bf16 2^-9 per value; q8_0 and q4_0 half a step of amax/127 and amax/7 per block of
// 32 (amax ≤ 4 in the rotated space); turbo the Lloyd–Max distortion of 4 and 3 bits on a
// Gaussian coordinate (0.0095 and 0.035 of the variance), with room for sampling.
double fill_readback_bound(KvType t) {
  switch (t) {
    case KvType::kF32: return 0;
    case KvType::kBF16: return 0.004;
    case KvType::kQ8_0: return 0.01;
    case KvType::kQ4_0: return 0.2;
    case KvType::kTurbo4: return 0.15;
    case KvType::kTurbo3: return 0.25;
  }
  return 0;
}

double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0, n = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    e += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    n += double(want[i]) * want[i];
  }
  return std::sqrt(e / n);
}

TEST(DepthFill, WritesRowsEachTypeReadsBackAndDecodeRuns) {
  auto w = load_weights(qwen35::testing::fixture_models_dir() + "/dense_q4_untied/ckpt");
  ASSERT_TRUE(w.ok());
  core::ThreadPool threads(2);
  Model m(std::move(*w), kernels::cpu_ops(), &threads);
  const ModelConfig& c = m.config();
  constexpr int64_t kDepth = 128, kCap = 256;
  const uint64_t seed = 7;
  std::vector<kernels::KvTypes> pairs;
  for (KvType t : kernels::kAllKvTypes) pairs.push_back({t, t});
  pairs.push_back({KvType::kQ8_0, KvType::kTurbo4});
  std::vector<int32_t> prompt(static_cast<size_t>(kDepth));
  for (int64_t i = 0; i < kDepth; ++i) prompt[size_t(i)] = int32_t((i * 37 + 3) % c.vocab);
  for (const kernels::KvTypes& types : pairs) {
    const std::string name = kernels::kv_types_name(types);
    ASSERT_TRUE(check_kv_types(c, types).ok()) << name;  // the fixture's head_dim takes every type
    ASSERT_TRUE(m.set_kv_types(types).ok()) << name;
    auto pool = m.new_pool(2 * kCap / kernels::kKvBlock);
    auto filled = m.new_state(kCap, pool.get()), prefilled = m.new_state(kCap, pool.get());
    ASSERT_TRUE(fill_depth_random(c, filled.get(), kDepth, seed, &threads).ok()) << name;
    std::vector<float> logits;
    SequenceRows rows{prefilled.get(), prompt, false};
    ASSERT_TRUE(m.forward(std::span<const SequenceRows>(&rows, 1), &logits).ok()) << name;
    EXPECT_EQ(filled->pos(), prefilled->pos()) << name;
    EXPECT_EQ(filled->kv_bytes(), prefilled->kv_bytes()) << name;
    // Every row in its place: the attention layers in order, positions at block edges.
    int64_t attn = 0;
    std::vector<float> want(static_cast<size_t>(c.head_dim)), got(static_cast<size_t>(c.head_dim));
    for (int64_t l = 0; l < int64_t(c.layers.size()); ++l) {
      if (c.layers[size_t(l)] != LayerKind::kFullAttention) continue;
      const kernels::KvView kv = filled->kv(l);
      for (int64_t pos : {int64_t(0), int64_t(63), int64_t(64), kDepth - 1}) {
        for (int64_t h = 0; h < c.n_kv_heads; ++h) {
          for (bool value : {false, true}) {
            const kernels::KvFormat& f = value ? kv.v_format : kv.k_format;
            const uint8_t* row = (value ? kv.v_row(pos) : kv.k_row(pos)) + h * int64_t(kernels::kv_row_bytes(f));
            depth_fill_row(seed, attn, value, pos, h, c.head_dim, want.data());
            kernels::kv_decode_row(f, row, got.data());
            EXPECT_LE(rel_l2(got, want), fill_readback_bound(f.type))
                << name << " layer " << l << " pos " << pos << " head " << h << (value ? " V" : " K");
          }
        }
      }
      ++attn;
    }
    // Decoding after the fill reads every filled row: finite logits, one position more.
    const int32_t tok = 5;
    SequenceRows step{filled.get(), std::span<const int32_t>(&tok, 1), false};
    ASSERT_TRUE(m.forward(std::span<const SequenceRows>(&step, 1), &logits).ok()) << name;
    for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << name;
    EXPECT_EQ(filled->pos(), kDepth + 1) << name;
  }
}

TEST(DepthFill, RefusesAStateNotEmptyOrTooSmall) {
  ModelConfig c;
  c.n_kv_heads = 1;
  c.head_dim = 32;
  c.layers = {LayerKind::kFullAttention};
  SequenceState small(c, 64);
  EXPECT_NE(fill_depth_random(c, &small, 128, 1).message().find("capacity"), std::string::npos);
  ASSERT_TRUE(fill_depth_random(c, &small, 64, 1).ok());
  EXPECT_NE(fill_depth_random(c, &small, 64, 1).message().find("empty"), std::string::npos);
}

}  // namespace
}  // namespace qwen35::model
