#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include <cmath>

namespace qwen35::model {
namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace

using core::error;
using core::Status;

Model::Model(std::unique_ptr<ModelWeights> weights, const kernels::Ops& ops, core::ThreadPool* pool)
    : w_(std::move(weights)), ops_(ops) {
  ctx_.pool = pool;
  ws_.resize(10);
}

std::unique_ptr<SequenceState> Model::new_state(int64_t capacity) const {
  return std::make_unique<SequenceState>(w_->config, capacity);
}

float* Model::buf(int i, size_t n) {
  auto& b = ws_[size_t(i)];
  if (b.size() < n) b.resize(n);
  return b.data();
}

Status Model::forward(std::span<const SequenceRows> batch, std::vector<float>* logits) {
  const ModelConfig& c = w_->config;
  // Validate everything before touching any state.
  std::vector<Span>& spans = spans_;
  spans.clear();
  int64_t n = 0, n_logits = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& r = batch[s];
    if (r.state == nullptr) return error("[forward] sequence " + std::to_string(s) + " has no state");
    if (r.tokens.empty()) return error("[forward] sequence " + std::to_string(s) + " has no tokens");
    for (size_t j = 0; j < s; ++j)
      if (batch[j].state == r.state) return error("[forward] the same sequence appears twice in one batch");
    for (int32_t t : r.tokens)
      if (t < 0 || t >= c.vocab)
        return error("[forward] token id " + std::to_string(t) + " out of range (vocabulary size " + std::to_string(c.vocab) + ")");
    const int64_t len = int64_t(r.tokens.size());
    if (r.state->pos() + len > r.state->capacity())
      return error("[forward] context full: " + std::to_string(r.state->pos()) + " + " + std::to_string(len) +
                   " tokens exceed the context size " + std::to_string(r.state->capacity()));
    spans.push_back({r.state, n, len, r.state->pos()});
    n += len;
    n_logits += r.all_logits ? len : 1;
  }
  if (n == 0) return error("[forward] empty batch");

  const int64_t H = c.hidden;
  tokens_.clear();
  for (const auto& r : batch) tokens_.insert(tokens_.end(), r.tokens.begin(), r.tokens.end());
  if (x_.size() < size_t(n * H)) x_.resize(size_t(n * H));
  float* x = x_.data();
  ops_.embed(ctx_, w_->embed, tokens_.data(), n, x);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w_->layers[size_t(l)];
    float* h = buf(0, size_t(n * H));
    ops_.rms_norm(ctx_, x, n, H, L.input_norm.data(), float(c.eps), h);
    if (L.kind == LayerKind::kFullAttention) attention_layer(l, spans, h, n);
    else deltanet_layer(l, spans, h, n);
    const float* y = buf(7, size_t(n * H));
    for (int64_t i = 0; i < n * H; ++i) x[i] += y[i];
    ops_.rms_norm(ctx_, x, n, H, L.post_norm.data(), float(c.eps), h);
    if (c.moe) moe_layer(l, h, n);
    else mlp_layer(l, h, n);
    y = buf(7, size_t(n * H));
    for (int64_t i = 0; i < n * H; ++i) x[i] += y[i];
  }
  // Final norm on the rows that need logits, then the head.
  float* hf = buf(0, size_t(n_logits * H));
  int64_t r = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const Span& sp = spans[s];
    const int64_t first = batch[s].all_logits ? sp.row0 : sp.row0 + sp.n - 1;
    const int64_t cnt = batch[s].all_logits ? sp.n : 1;
    ops_.rms_norm(ctx_, x + first * H, cnt, H, w_->final_norm.data(), float(c.eps), hf + r * H);
    r += cnt;
  }
  logits->resize(size_t(n_logits * c.vocab));
  ops_.matmul(ctx_, hf, n_logits, w_->head, logits->data());
  for (const Span& sp : spans) sp.state->pos_ += sp.n;
  return Status();
}

void Model::deltanet_layer(int64_t l, const std::vector<Span>& spans, const float* h, int64_t n) {
  const ModelConfig& c = w_->config;
  const DeltaNetWeights& g = w_->layers[size_t(l)].gdn;
  const int64_t C = c.conv_channels(), nv = c.n_v_heads, dv = c.d_v;
  float* qkv = buf(1, size_t(n * C));
  float* conv = buf(2, size_t(n * C));
  float* z = buf(3, size_t(n * nv * dv));
  float* bb = buf(4, size_t(n * nv));
  float* aa = buf(5, size_t(n * nv));
  float* o = buf(6, size_t(n * nv * dv));
  {
    const kernels::Matrix* ws[] = {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a};
    float* ys[] = {qkv, z, bb, aa};
    ops_.matmul_many(ctx_, h, n, ws, ys, 4);
  }
  const kernels::Ops::DeltaParams dp{c.n_k_heads, nv, c.d_k, dv, g.a_log.data(), g.dt_bias.data()};
  for (const Span& sp : spans) {
    ops_.conv1d_silu(ctx_, qkv + sp.row0 * C, sp.n, C, g.conv.data(), c.conv_kernel,
                     sp.state->conv_state(l), conv + sp.row0 * C);
    // Pieces on the absolute kDeltaChunk grid.
    for (int64_t p = sp.pos0; p < sp.pos0 + sp.n;) {
      const int64_t end = std::min(sp.pos0 + sp.n, (p / kDeltaChunk + 1) * kDeltaChunk);
      const int64_t r0 = sp.row0 + (p - sp.pos0), len = end - p;
      ops_.gated_delta(ctx_, dp, conv + r0 * C, aa + r0 * nv, bb + r0 * nv, len, len > 1,
                       sp.state->delta_state(l), o + r0 * nv * dv);
      p = end;
    }
  }
  ops_.gated_rms_norm(ctx_, o, z, n * nv, dv, g.norm.data(), float(c.eps));
  ops_.matmul(ctx_, o, n, g.out_proj, buf(7, size_t(n * c.hidden)));
}

void Model::attention_layer(int64_t l, const std::vector<Span>& spans, const float* h, int64_t n) {
  const ModelConfig& c = w_->config;
  const AttentionWeights& a = w_->layers[size_t(l)].attn;
  const int64_t nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim;
  float* qg = buf(1, size_t(n * 2 * nh * hd));
  float* k = buf(2, size_t(n * nkv * hd));
  float* v = buf(3, size_t(n * nkv * hd));
  float* o = buf(6, size_t(n * nh * hd));
  {
    const kernels::Matrix* ws[] = {&a.q_proj, &a.k_proj, &a.v_proj};
    float* ys[] = {qg, k, v};
    ops_.matmul_many(ctx_, h, n, ws, ys, 3);
  }
  const kernels::Ops::AttentionParams ap{nh, nkv, hd, c.rotary_dim, float(c.rope_theta), float(c.eps),
                                         a.q_norm.data(), a.k_norm.data()};
  for (const Span& sp : spans) {
    kernels::KvView kv{sp.state->k_cache(l), sp.state->v_cache(l), sp.state->capacity()};
    ops_.attention(ctx_, ap, qg + sp.row0 * 2 * nh * hd, k + sp.row0 * nkv * hd, v + sp.row0 * nkv * hd,
                   sp.n, sp.pos0, kv, o + sp.row0 * nh * hd);
  }
  ops_.matmul(ctx_, o, n, a.o_proj, buf(7, size_t(n * c.hidden)));
}

void Model::mlp_layer(int64_t l, const float* h, int64_t n) {
  const ModelConfig& c = w_->config;
  const MlpWeights& m = w_->layers[size_t(l)].mlp;
  const int64_t I = c.intermediate;
  float* g = buf(1, size_t(n * I));
  float* u = buf(2, size_t(n * I));
  float* act = buf(3, size_t(n * I));
  {
    const kernels::Matrix* ws[] = {&m.gate_proj, &m.up_proj};
    float* ys[] = {g, u};
    ops_.matmul_many(ctx_, h, n, ws, ys, 2);
  }
  ops_.swiglu(ctx_, g, u, n, I, I, act);
  ops_.matmul(ctx_, act, n, m.down_proj, buf(7, size_t(n * c.hidden)));
}

void Model::moe_layer(int64_t l, const float* h, int64_t n) {
  const ModelConfig& c = w_->config;
  const MoeWeights& m = w_->layers[size_t(l)].moe;
  const int64_t H = c.hidden, E = c.n_experts, K = c.top_k, I = c.moe_intermediate;
  float* logits = buf(1, size_t(n * E));
  // The router always runs exact: top-k is discontinuous, so activation rounding there would flip
  // expert choices (it is a small matrix; the experts are where the bytes are).
  kernels::Context exact = ctx_;
  exact.int8_activations = false;
  ops_.matmul(exact, h, n, m.router, logits);
  idx_.resize(size_t(n * K));
  probs_.resize(size_t(n * K));
  ops_.router_topk(logits, n, E, K, c.norm_topk, idx_.data(), probs_.data());
  // Expert outputs per (row, slot): [n, K, H]. Rows are grouped by expert; each row's result is
  // the same whatever else is in its group.
  float* eo = buf(8, size_t(n * K * H));
  float* gathered = buf(2, size_t(n * K * H));
  float* eg = buf(3, size_t(n * K * I));
  float* eu = buf(4, size_t(n * K * I));
  float* act = buf(5, size_t(n * K * I));
  float* dn = buf(9, size_t(n * K * H));
  std::vector<int64_t>& slots = slots_;
  for (int64_t e = 0; e < E; ++e) {
    slots.clear();
    for (int64_t s = 0; s < n * K; ++s)
      if (idx_[size_t(s)] == e) slots.push_back(s);
    if (slots.empty()) continue;
    const int64_t cnt = int64_t(slots.size());
    for (int64_t i = 0; i < cnt; ++i) std::memcpy(gathered + i * H, h + (slots[i] / K) * H, size_t(H) * 4);
    const MlpWeights& ex = m.experts[size_t(e)];
    ops_.matmul(ctx_, gathered, cnt, ex.gate_proj, eg);
    ops_.matmul(ctx_, gathered, cnt, ex.up_proj, eu);
    ops_.swiglu(ctx_, eg, eu, cnt, I, I, act);
    ops_.matmul(ctx_, act, cnt, ex.down_proj, dn);
    for (int64_t i = 0; i < cnt; ++i) std::memcpy(eo + slots[i] * H, dn + i * H, size_t(H) * 4);
  }
  float* y = buf(7, size_t(n * H));
  for (int64_t t = 0; t < n; ++t) {
    float* yr = y + t * H;
    std::fill_n(yr, H, 0.0f);
    for (int64_t j = 0; j < K; ++j) {
      const float w = probs_[size_t(t * K + j)];
      const float* er = eo + (t * K + j) * H;
      for (int64_t i = 0; i < H; ++i) yr[i] += w * er[i];
    }
  }
  if (m.has_shared) {
    const int64_t Is = c.shared_intermediate;
    float* sg = buf(3, size_t(n * Is));
    float* su = buf(4, size_t(n * Is));
    float* sa = buf(5, size_t(n * Is));
    float* so = buf(9, size_t(n * H));
    {
      const kernels::Matrix* ws[] = {&m.shared.gate_proj, &m.shared.up_proj};
      float* ys[] = {sg, su};
      ops_.matmul_many(ctx_, h, n, ws, ys, 2);
    }
    ops_.swiglu(ctx_, sg, su, n, Is, Is, sa);
    ops_.matmul(ctx_, sa, n, m.shared.down_proj, so);
    float* gate = buf(2, size_t(n));
    if (m.has_shared_gate) ops_.matmul(exact, h, n, m.shared_gate, gate);
    for (int64_t t = 0; t < n; ++t) {
      const float s = m.has_shared_gate ? sigmoid(gate[t]) : 1.0f;
      for (int64_t i = 0; i < H; ++i) y[t * H + i] += s * so[t * H + i];
    }
  }
}

}  // namespace qwen35::model
