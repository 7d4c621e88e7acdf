#include "model/depth_fill.h"

#include <string>
#include <vector>

#include "core/random.h"
#include "kernels/kv_format.h"

namespace qwen35::model {

void depth_fill_row(uint64_t seed, int64_t attn, bool value, int64_t pos, int64_t head,
                    int64_t head_dim, float* out) {
  // One stream per row, keyed by its coordinates (positions < 2^40, heads and layers < 2^10).
  uint64_t key = seed;
  key = core::splitmix64_of(key ^ (uint64_t(attn) << 1) ^ uint64_t(value));
  key = core::splitmix64_of(key ^ (uint64_t(pos) << 10) ^ uint64_t(head));
  core::Xoshiro256 rng(key);
  const float half_width = 1.7320508f;  // √3: uniform with variance 1
  for (int64_t i = 0; i < head_dim; ++i) out[i] = float(rng.uniform() * 2 - 1) * half_width;
}

namespace {

// Positions [b, e) of every KV head of attention index `attn`, K and V.
void fill_rows(const ModelConfig& c, const kernels::KvView& kv, int64_t attn, uint64_t seed,
               size_t b, size_t e) {
  const int64_t hd = c.head_dim;
  const int64_t kb = int64_t(kernels::kv_row_bytes(kv.k_format));
  const int64_t vb = int64_t(kernels::kv_row_bytes(kv.v_format));
  std::vector<float> row(static_cast<size_t>(hd));
  for (size_t p = b; p < e; ++p) {
    for (int64_t h = 0; h < c.n_kv_heads; ++h) {
      depth_fill_row(seed, attn, false, int64_t(p), h, hd, row.data());
      kernels::kv_encode_row(kv.k_format, row.data(), kv.k_row(int64_t(p)) + h * kb);
      depth_fill_row(seed, attn, true, int64_t(p), h, hd, row.data());
      kernels::kv_encode_row(kv.v_format, row.data(), kv.v_row(int64_t(p)) + h * vb);
    }
  }
}

}  // namespace

core::Status fill_depth_random(const ModelConfig& c, SequenceState* state, int64_t depth,
                               uint64_t seed, core::ThreadPool* pool) {
  if (state->pos() != 0)
    return core::error("depth fill: the state must be empty (it stands at " +
                       std::to_string(state->pos()) + ")");
  if (depth < 0 || depth > state->capacity())
    return core::error("depth fill: depth " + std::to_string(depth) + " is outside the state's " +
                       "capacity of " + std::to_string(state->capacity()) + " positions");
  if (!state->reserve(depth))
    return core::error("depth fill: the KV pool has no room for " + std::to_string(depth) +
                       " positions");
  // The attention layers in layer order (their attention index is their order), then the MTP
  // head's cache, which is attention index n_layers.
  std::vector<int64_t> attn_layers;
  for (int64_t l = 0; l < int64_t(c.layers.size()); ++l)
    if (c.layers[size_t(l)] == LayerKind::kFullAttention) attn_layers.push_back(l);
  if (state->has_mtp()) attn_layers.push_back(int64_t(c.layers.size()));
  state->pool()->mirror().host_read();  // rows written on the host (model/mirror.h)
  for (size_t a = 0; a < attn_layers.size(); ++a) {
    const kernels::KvView kv = state->kv(attn_layers[a]);
    auto fn = [&](size_t b, size_t e, int) { fill_rows(c, kv, int64_t(a), seed, b, e); };
    if (pool) pool->parallel_for(size_t(depth), fn, 64);
    else fn(0, size_t(depth), 0);
  }
  state->pool()->mirror().host_wrote();
  std::vector<float> recurrent(state->recurrent_bytes() / 4);
  core::Xoshiro256 rng(core::splitmix64_of(seed ^ 0x726563757272656eull));  // "recurren"
  for (float& x : recurrent) x = float(rng.uniform() * 0.2 - 0.1);
  state->load_recurrent(recurrent.data());
  state->advance(depth, false);
  return core::Status();
}

}  // namespace qwen35::model
