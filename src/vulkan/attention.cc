#include "vulkan/attention.h"

#include <cmath>
#include <string>

#include "vulkan/instance.h"
#include "vulkan/ops.h"

namespace qwen35::vulkan {

namespace {
struct KvWritePush {
  uint32_t base, n, row, pos0;
};
struct AttentionPush {
  uint32_t base, n, nh, nkv, hd, pos0, first_key, q_row, gated;
  float scale;
};
}  // namespace

void record_attention(Recorder& rec, const AttentionShape& s, const AttentionInputs& in, int64_t n,
                      int64_t pos0, const DeviceKv& kv, const Binding& out) {
  const int64_t nh = s.n_heads, nkv = s.n_kv_heads, hd = s.head_dim;
  if (nkv < 1 || nh % nkv != 0 || hd < 1 || hd > 256 || s.rotary_dim > hd)
    return rec.fail(core::error("[vulkan] attention: " + std::to_string(nh) + " heads over " +
                                std::to_string(nkv) + " KV heads of " + std::to_string(hd) +
                                " (at most 256)"));
  if (pos0 < 0 || pos0 + n > kv.capacity || s.first_key < 0 || s.first_key > pos0)
    return rec.fail(core::error("[vulkan] attention: rows at " + std::to_string(pos0) + ".." +
                                std::to_string(pos0 + n) + " past a cache of " +
                                std::to_string(kv.capacity) + " (first key " +
                                std::to_string(s.first_key) + ")"));
  if (n == 0) return;
  const int64_t q_row = s.gated ? 2 * hd : hd, row = nkv * hd;
  // The reference's order: each head row RMS-normed, then rotated; keys written to the cache.
  record_rms_norm_rows(rec, in.qg, n * nh, hd, q_row, in.q_norm, s.eps, in.q_tmp, hd);
  record_rms_norm_rows(rec, in.k, n * nkv, hd, hd, in.k_norm, s.eps, in.k_tmp, hd);
  if (s.rotary_dim > 0) {
    record_rope(rec, in.q_tmp, n, nh, hd, s.rotary_dim, in.positions, in.pair_axis, in.rope_table,
                in.rope_rows);
    record_rope(rec, in.k_tmp, n, nkv, hd, s.rotary_dim, in.positions, in.pair_axis, in.rope_table,
                in.rope_rows);
  }
  const uint64_t groups = (uint64_t(n * row) + kWorkgroup - 1) / kWorkgroup;
  const KvWritePush wp{0, uint32_t(n), uint32_t(row), uint32_t(pos0)};
  rec.dispatch("kv_write", {in.k_tmp, kv.k_pool, kv.table}, &wp, sizeof wp, groups);
  rec.dispatch("kv_write", {in.v, kv.v_pool, kv.table}, &wp, sizeof wp, groups);
  // 1/√hd as the CPU kernels round it.
  const AttentionPush ap{0,
                         uint32_t(n),
                         uint32_t(nh),
                         uint32_t(nkv),
                         uint32_t(hd),
                         uint32_t(pos0),
                         uint32_t(s.first_key),
                         uint32_t(q_row),
                         s.gated ? 1u : 0u,
                         1.0f / std::sqrt(float(hd))};
  rec.dispatch("attention", {in.q_tmp, in.qg, kv.k_pool, kv.v_pool, kv.table, out}, &ap, sizeof ap,
               uint64_t(n * nh));
}

}  // namespace qwen35::vulkan
