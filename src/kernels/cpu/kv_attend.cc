// Causal attention over a compressed KV cache (kv_attend.h). The SIMD work is in the primitives
// (kv_attention.cc); this file orders them.
#include "kernels/cpu/kv_attend.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/kv_attention.h"
#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

void attend_kv_many(const float* const* q, const int64_t* n_pos, int nq, const KvHeadRows& kv,
                    float scale, KvAttendScratch* scratch, float* const* o) {
  constexpr int64_t kBlock = kKvBlock;
  const int64_t hd = kv.k_format.head_dim;
  if (scratch->queries.size() < size_t(nq)) scratch->queries.resize(size_t(nq));
  if (scratch->scores.size() < size_t(nq) * kBlock) scratch->scores.resize(size_t(nq) * kBlock);
  if (scratch->stats.size() < 2 * size_t(nq)) scratch->stats.resize(2 * size_t(nq));
  float* mx = scratch->stats.data();
  float* sum = mx + nq;
  int64_t most = 0;
  for (int i = 0; i < nq; ++i) {
    kv_prepare_query(kv.k_format, q[i], &scratch->queries[size_t(i)]);
    mx[i] = -INFINITY;
    sum[i] = 0;
    std::fill_n(o[i], hd, 0.0f);
    most = std::max(most, n_pos[i]);
  }
  for (int64_t j0 = kv.first / kBlock * kBlock; j0 < most; j0 += kBlock) {
    const int64_t js = std::max(j0, kv.first);  // the block's first row read
    const uint8_t* kb = kv.k_blocks[j0 / kBlock] + kv.k_offset + (js - j0) * kv.k_stride;
    const uint8_t* vb = kv.v_blocks[j0 / kBlock] + kv.v_offset + (js - j0) * kv.v_stride;
    // Scores of the queries that reach the block, four at a time, over the rows the furthest of
    // them sees (a query's scores past its own rows are computed and never used).
    const PreparedQuery* pq[4];
    float* sp[4];
    int g = 0;
    int64_t jn = 0;
    auto flush = [&] {
      if (g > 0) kv_scores_many(pq, g, kb, kv.k_stride, jn, scale, sp);
      g = 0;
      jn = 0;
    };
    for (int i = 0; i < nq; ++i) {
      if (n_pos[i] <= js) continue;
      pq[g] = &scratch->queries[size_t(i)];
      sp[g++] = scratch->scores.data() + i * kBlock;
      jn = std::max(jn, std::min(j0 + kBlock, n_pos[i]) - js);
      if (g == 4) flush();
    }
    flush();
    for (int i = 0; i < nq; ++i) {
      if (n_pos[i] <= js) continue;
      const int64_t ni = std::min(j0 + kBlock, n_pos[i]) - js;
      float* s = scratch->scores.data() + i * kBlock;
      float bmx = -INFINITY;
      for (int64_t j = 0; j < ni; ++j) bmx = std::max(bmx, s[j]);
      if (bmx > mx[i]) {
        if (sum[i] > 0) {
          const float f = std::exp(mx[i] - bmx);
          sum[i] *= f;
          for (int64_t c = 0; c < hd; ++c) o[i][c] *= f;
        }
        mx[i] = bmx;
      }
      float bsum = 0;
      for (int64_t j = 0; j < ni; ++j) bsum += (s[j] = std::exp(s[j] - mx[i]));
      sum[i] += bsum;
      kv_values(kv.v_format, s, vb, kv.v_stride, ni, o[i]);
    }
  }
  for (int i = 0; i < nq; ++i) {
    kv_values_finish(kv.v_format, o[i]);
    const float inv = 1.0f / sum[i];
    for (int64_t c = 0; c < hd; ++c) o[i][c] *= inv;
  }
}

}  // namespace qwen35::kernels::cpu
