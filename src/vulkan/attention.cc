#include "vulkan/attention.h"

#include <cmath>
#include <string>

#include "core/random.h"
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
// The rotation's constants as shaders/kv.glsl reads them: 1/√d as kernels/kv_format.cc rounds
// it, and the first 256 bits of the sign vector D (bit i % 64 of splitmix64(seed + i / 64)).
struct Rotation {
  float rsd;
  uint32_t signs[8];
};
Rotation rotation(int64_t hd) {
  Rotation r{float(1.0 / std::sqrt(double(hd))), {}};
  for (uint32_t w = 0; w < 8; ++w) {
    const uint64_t bits = core::splitmix64_of(kernels::kKvRotationSeed + w / 2);
    r.signs[w] = uint32_t(bits >> (32 * (w % 2)));
  }
  return r;
}
struct KvEncodePush {
  uint32_t base, n, nkv, hd, pos0, type, rotated, row_bytes, mids;
  Rotation rot;
};
struct AttentionKvPush {
  uint32_t base, n, nh, nkv, hd, pos0, first_key, q_row, gated;
  float scale;
  uint32_t kt, vt, krot, vrot, kbytes, vbytes;
  Rotation rot;
};
static_assert(sizeof(AttentionKvPush) <= 128, "the pipelines' push-constant range");

bool is_turbo(kernels::KvType t) {
  return t == kernels::KvType::kTurbo4 || t == kernels::KvType::kTurbo3;
}
}  // namespace

std::vector<float> kv_books(const kernels::KvFormat& k, const kernels::KvFormat& v) {
  std::vector<float> b(64, 0.0f);
  int slot = 0;
  for (const kernels::KvFormat* f : {&k, &v}) {
    if (is_turbo(f->type) && kernels::kv_format_valid(*f)) {
      const float* c = kernels::kv_turbo_codebook(f->type, f->head_dim);
      const int levels = f->type == kernels::KvType::kTurbo4 ? 16 : 8;
      for (int i = 0; i < levels; ++i) b[size_t(16 * slot + i)] = c[i];
      // kv_format.cc compares y/s with the midpoint in double: its float rounding here.
      for (int i = 0; i + 1 < levels; ++i)
        b[size_t(32 + 16 * slot + i)] = float(0.5 * (double(c[i]) + double(c[i + 1])));
    }
    ++slot;
  }
  return b;
}

void record_kv_encode(Recorder& rec, const kernels::KvFormat& f, const Binding& src, int64_t n,
                      int64_t nkv, int64_t pos0, const Binding& pool, const Binding& table,
                      const Binding& books, bool is_v) {
  if (!kernels::kv_format_valid(f) || f.head_dim > 256)
    return rec.fail(core::error("[vulkan] kv type " + std::string(kernels::kv_type_name(f.type)) +
                                " at head_dim " + std::to_string(f.head_dim) +
                                (f.head_dim > 256 ? " (the device takes at most 256)" : "")));
  if (n == 0) return;
  const KvEncodePush p{0,
                       uint32_t(n),
                       uint32_t(nkv),
                       uint32_t(f.head_dim),
                       uint32_t(pos0),
                       uint32_t(f.type),
                       f.rotated ? 1u : 0u,
                       uint32_t(kernels::kv_row_bytes(f)),
                       is_v ? 48u : 32u,
                       rotation(f.head_dim)};
  rec.dispatch("kv_encode", {src, pool, table, books}, &p, sizeof p, uint64_t(n * nkv));
}

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
  if (!kv.f32()) {
    if (kv.k_format.head_dim != hd || kv.v_format.head_dim != hd)
      return rec.fail(core::error("[vulkan] attention: KV formats of head_dim " +
                                  std::to_string(kv.k_format.head_dim) + " for heads of " +
                                  std::to_string(hd)));
    record_kv_encode(rec, kv.k_format, in.k_tmp, n, nkv, pos0, kv.k_pool, kv.table, kv.books,
                     false);
    record_kv_encode(rec, kv.v_format, in.v, n, nkv, pos0, kv.v_pool, kv.table, kv.books, true);
    const AttentionKvPush ap{0,
                             uint32_t(n),
                             uint32_t(nh),
                             uint32_t(nkv),
                             uint32_t(hd),
                             uint32_t(pos0),
                             uint32_t(s.first_key),
                             uint32_t(q_row),
                             s.gated ? 1u : 0u,
                             1.0f / std::sqrt(float(hd)),
                             uint32_t(kv.k_format.type),
                             uint32_t(kv.v_format.type),
                             kv.k_format.rotated ? 1u : 0u,
                             kv.v_format.rotated ? 1u : 0u,
                             uint32_t(kernels::kv_row_bytes(kv.k_format)),
                             uint32_t(kernels::kv_row_bytes(kv.v_format)),
                             rotation(hd)};
    rec.dispatch("attention_kv", {in.q_tmp, in.qg, kv.k_pool, kv.v_pool, kv.table, out, kv.books},
                 &ap, sizeof ap, uint64_t(n * nh));
    return;
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
