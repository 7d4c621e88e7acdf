// The forward pass (model.h). Per layer: x += mixer(rms_norm(x)), then x += mlp(rms_norm(x)),
// where the mixer is Gated DeltaNet or gated full attention and the MLP dense or MoE. Each op's
// math is written out in kernels/ref/ref_ops.cc.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "model/cpu_executor.h"

namespace qwen35::model {
using core::error;
using core::Status;

Model::Model(std::unique_ptr<ModelWeights> weights, const kernels::Ops& ops, core::ThreadPool* pool)
    : w_(std::move(weights)), ops_(ops), workspace_(ops.new_workspace()) {
  ctx_.pool = pool;
  ctx_.workspace = workspace_.get();
  ex_ = cpu_executor();
}

Model::~Model() = default;

std::unique_ptr<Executor> Model::cpu_executor() { return std::make_unique<CpuExecutor>(ops_, ctx_); }

std::unique_ptr<Executor> Model::replace_executor(std::unique_ptr<Executor> ex) {
  QWEN35_CHECK(ex != nullptr);
  std::swap(ex, ex_);
  return ex;
}

core::Status Model::encode_image(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out) {
  if (!w_->vision)
    return core::error("[vision] " + (w_->vision_problem.empty() ? std::string("no vision tower") : w_->vision_problem));
  if (!vision_) vision_ = std::make_unique<VisionTower>(*w_->vision, ops_);
  QWEN35_RETURN_IF_ERROR(vision_->encode(*ex_, rows, grid_t, grid_h, grid_w, out));
  QWEN35_RETURN_IF_ERROR(ex_->finish());
  forget_run(vision_->own_run());
  return core::ok_status();
}

core::Status Model::begin_image(const float* rows, int64_t grid_t, int64_t grid_h, int64_t grid_w, float* out,
                                VisionRun* run) {
  if (!w_->vision)
    return core::error("[vision] " + (w_->vision_problem.empty() ? std::string("no vision tower") : w_->vision_problem));
  if (!vision_) vision_ = std::make_unique<VisionTower>(*w_->vision, ops_);
  return vision_->begin(rows, grid_t, grid_h, grid_w, out, run);
}

VisionPlan Model::plan_image(const VisionRun& run, double budget, bool at_least_one) const {
  QWEN35_CHECK(vision_ != nullptr);  // begin_image made it
  return vision_->plan(run, budget, at_least_one);
}

// The pieces are a step of their own on the executor: their output is readable when this
// returns, and a device's failure is the run's.
core::Result<bool> Model::advance_image(VisionRun* run, const VisionCursor& end) {
  QWEN35_CHECK(vision_ != nullptr);  // begin_image made it
  const bool done = vision_->advance(*ex_, run, end);
  QWEN35_RETURN_IF_ERROR(ex_->finish());
  if (done) forget_run(*run);
  return done;
}

void Model::end_image(VisionRun* run) { forget_run(*run); }

// The executor's twins of a run's memory (none on the CPU): the patch rows it sent, its
// buffers, the tables' rows, the output it received.
void Model::forget_run(const VisionRun& run) {
  if (!vision_ || run.rows == nullptr) return;
  const VisionConfig& c = w_->vision->config;
  const int64_t rows = VisionTower::rows(run.grid_t, run.grid_h, run.grid_w);
  ex_->forget(run.rows, rows * c.patch_dim());
  ex_->forget(run.out, vision_->tokens(run.grid_t, run.grid_h, run.grid_w) * c.out_hidden);
  for (const RowBuffer* b : {&run.x, &run.qkv, &run.kv, &run.pos, &run.cos, &run.sin})
    ex_->forget(b->data(), int64_t(b->size()));
}

double Model::token_flops() const {
  const ModelConfig& c = w_->config;
  const double h = double(c.hidden);
  const double attn = h * double(c.n_heads * c.head_dim) * 3 + 2 * h * double(c.n_kv_heads * c.head_dim);
  const double delta = h * double(c.conv_channels() + c.n_v_heads * c.d_v + 2 * c.n_v_heads) +
                       double(c.n_v_heads * c.d_v) * h;
  const double mlp = c.moe ? 3 * h * double(c.top_k * c.moe_intermediate + c.shared_intermediate) +
                                 h * double(c.n_experts)
                           : 3 * h * double(c.intermediate);
  return 2 * (double(c.n_full_layers()) * attn + double(c.n_linear_layers()) * delta +
              double(c.n_layers) * mlp);
}

RowCost Model::row_cost() const {
  const ModelConfig& c = w_->config;
  return {token_flops(), 4 * double(c.n_full_layers()) * double(c.n_heads * c.head_dim)};
}

void Model::set_draft_vocab(int64_t n) {
  const int64_t v = w_->config.vocab;
  draft_rows_ = n <= 0 || n >= v ? 0 : n;
}

kernels::Matrix Model::draft_head() const {
  return draft_rows_ > 0 ? w_->head.row_slice(0, draft_rows_) : w_->head;
}

std::unique_ptr<SequenceState> Model::new_state(int64_t capacity) const {
  return std::make_unique<SequenceState>(w_->config, capacity, mtp_on_, kv_types_);
}

std::unique_ptr<SequenceState> Model::new_state(int64_t capacity, KvPool* pool) const {
  QWEN35_CHECK(!pool->mtp() || mtp_on_);
  return std::make_unique<SequenceState>(w_->config, capacity, pool);
}

std::unique_ptr<KvPool> Model::new_pool(int64_t n_blocks, bool mtp) const {
  QWEN35_CHECK(!mtp || mtp_on_);
  return std::make_unique<KvPool>(w_->config, n_blocks, mtp, kv_types_);
}

core::Status Model::set_kv_types(kernels::KvTypes types) {
  QWEN35_RETURN_IF_ERROR(check_kv_types(w_->config, types));
  kv_types_ = types;
  return core::ok_status();
}

const LayerWeights& Model::layer(int64_t l) const {
  return l < w_->config.n_layers ? w_->layers[size_t(l)] : w_->mtp->layer;
}

// Checks the whole batch before any position or content of a state changes (it may take KV
// blocks for the rows); fills spans_.
Status Model::validate(std::span<const SequenceRows> batch, int64_t* n_tokens, int64_t* n_logit_rows) {
  const ModelConfig& c = w_->config;
  spans_.clear();
  int64_t n = 0, n_logits = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceRows& r = batch[s];
    if (r.state == nullptr) return error("[forward] sequence " + std::to_string(s) + " has no state");
    if (r.tokens.empty()) return error("[forward] sequence " + std::to_string(s) + " has no tokens");
    for (size_t j = 0; j < s; ++j)
      if (batch[j].state == r.state) return error("[forward] the same sequence appears twice in one batch");
    for (int32_t t : r.tokens)
      if (t < 0 || t >= c.vocab)
        return error("[forward] token id " + std::to_string(t) + " out of range (vocabulary size " +
                     std::to_string(c.vocab) + ")");
    const int64_t len = int64_t(r.tokens.size());
    if (r.state->verify_pending())
      return error("[forward] sequence " + std::to_string(s) +
                   " has a verification pending: commit it first");
    if (r.verify && len > kMaxVerifyRows)
      return error("[forward] a verification takes at most " + std::to_string(kMaxVerifyRows) +
                   " rows, got " + std::to_string(len));
    if (r.state->pos() + len > r.state->capacity())
      return error("[forward] context full: " + std::to_string(r.state->pos()) + " + " + std::to_string(len) +
                   " tokens exceed the context size " + std::to_string(r.state->capacity()));
    if (!r.state->reserve(r.state->pos() + len))
      return error("[forward] the KV pool is out of blocks: sequence " + std::to_string(s) +
                   " needs " + std::to_string(r.state->pos() + len) + " positions");
    if (!r.positions.empty() && int64_t(r.positions.size()) != 3 * len)
      return error("[forward] sequence " + std::to_string(s) + " has " +
                   std::to_string(r.positions.size()) + " rotary positions for " +
                   std::to_string(len) + " rows (3 per row)");
    if (!r.embeddings.empty() && int64_t(r.embeddings.size()) != len)
      return error("[forward] sequence " + std::to_string(s) + " has " +
                   std::to_string(r.embeddings.size()) + " input rows for " + std::to_string(len) +
                   " tokens");
    int64_t after = r.state->pos();
    if (!r.captures.empty() && after % kDeltaChunk != 0)
      return error("[forward] sequence " + std::to_string(s) +
                   " asks for state copies in rows that do not start on the grid");
    for (const StateCapture& cap : r.captures) {
      if (r.verify || cap.pos <= after || cap.pos >= r.state->pos() + len ||
          cap.pos % kDeltaChunk != 0 || !cap.out == !cap.device)
        return error("[forward] sequence " + std::to_string(s) + " asks for a state copy at " +
                     std::to_string(cap.pos) + ", not a grid line inside its prompt rows");
      if (cap.device && (!ex_->snapshot_store() || cap.device->bytes() != r.state->recurrent_bytes()))
        return error("[forward] sequence " + std::to_string(s) + " asks for a state copy at " +
                     std::to_string(cap.pos) + " into device memory that cannot hold it");
      after = cap.pos;
    }
    spans_.push_back({r.state, n, len, r.state->pos(), r.verify,
                      r.positions.empty() ? nullptr : r.positions.data(), r.captures});
    n += len;
    n_logits += r.all_logits || r.verify ? len : 1;
  }
  if (n == 0) return error("[forward] empty batch");
  for (const Span& sp : spans_)
    if (sp.verify) sp.state->prepare_verify(c);
  *n_tokens = n;
  *n_logit_rows = n_logits;
  return Status();
}

Status Model::forward(std::span<const SequenceRows> batch, std::vector<float>* logits) {
  return forward_layers(batch, 0, w_->config.n_layers, nullptr, logits);
}

Status Model::forward_layers(std::span<const SequenceRows> batch, int64_t first, int64_t end,
                             std::vector<float>* hidden, std::vector<float>* logits) {
  const ModelConfig& c = w_->config;
  if (first < w_->held_first || end > w_->end_held() || first >= end)
    return error("[forward] layers [" + std::to_string(first) + ", " + std::to_string(end) +
                 ") are not a range of the layers held [" + std::to_string(w_->held_first) + ", " +
                 std::to_string(w_->end_held()) + ")");
  const int64_t H = c.hidden;
  if (first > 0 && (hidden == nullptr || hidden->empty()))
    return error("[forward] a stage after the first needs the hidden rows of the stage before");
  int64_t n = 0, n_logits = 0;
  QWEN35_RETURN_IF_ERROR(validate(batch, &n, &n_logits));
  if (first > 0 && int64_t(hidden->size()) != n * H)
    return error("[forward] " + std::to_string(hidden->size()) + " hidden floats for " + std::to_string(n) +
                 " rows of " + std::to_string(H));
  const float eps = float(c.eps);
  Activations& a = act_;
  a.tokens.clear();
  for (const auto& r : batch) a.tokens.insert(a.tokens.end(), r.tokens.begin(), r.tokens.end());
  float* x = sized(a.residual, n * H);       // [n, H]
  float* normed = sized(a.normed, n * H);    // [n, H]
  float* out = sized(a.layer_out, n * H);    // [n, H]
  for (const Span& sp : spans_) ex_->attach(*sp.state);
  if (first == 0) {
    ex_->embed(w_->embed, a.tokens.data(), n, x);
    for (size_t s = 0; s < batch.size(); ++s)  // image rows in place of their pad tokens
      for (size_t t = 0; t < batch[s].embeddings.size(); ++t)
        if (const float* e = batch[s].embeddings[t]) {
          ex_->send(e, H);
          ex_->copy(e, H, x + (spans_[s].row0 + int64_t(t)) * H);
        }
  } else {
    ex_->send(hidden->data(), n * H);
    ex_->copy(hidden->data(), n * H, x);
  }
  for (int64_t l = first; l < end; ++l) {
    const LayerWeights& L = w_->layers[size_t(l)];
    ex_->rms_norm(x, n, H, L.input_norm.data(), eps, normed);
    if (L.kind == LayerKind::kFullAttention) attention_layer(l, normed, n, out);
    else deltanet_layer(l, normed, n, out);
    ex_->add_rows(out, nullptr, n, H, x);
    ex_->rms_norm(x, n, H, L.post_norm.data(), eps, normed);
    if (c.moe) moe_layer(l, normed, n, out);
    else mlp_layer(l, normed, n, out);
    ex_->add_rows(out, nullptr, n, H, x);
  }
  if (end == c.n_layers) {
    head_rows(batch, n, n_logits, logits);
  } else {
    hidden->resize(size_t(n * H));
    ex_->copy(x, n * H, hidden->data());
    ex_->receive(hidden->data(), n * H);
  }
  // A failed step (a device lost or out of memory) leaves its states' positions where they were;
  // their contents are the device's to say (model/mirror.h): a caller resets them.
  QWEN35_RETURN_IF_ERROR(ex_->finish());
  for (const Span& sp : spans_) sp.state->advance(sp.n, sp.verify);
  return Status();
}

// The final norm of the rows that need logits (in row order), then the head. With MTP states
// the MTP head needs every row after the final norm: all rows are normed (row by row, the same
// bits), then those with logits gathered.
void Model::head_rows(std::span<const SequenceRows> batch, int64_t n, int64_t n_logits, std::vector<float>* logits) {
  const ModelConfig& c = w_->config;
  const int64_t H = c.hidden;
  const float eps = float(c.eps);
  float* x = act_.residual.data();
  float* normed = act_.normed.data();
  bool mtp = false;
  for (const Span& sp : spans_) mtp = mtp || sp.state->has_mtp();
  float* hidden = nullptr;
  if (mtp) {
    hidden = sized(hidden_, n * H);
    ex_->rms_norm(x, n, H, w_->final_norm.data(), eps, hidden);
  }
  int64_t r = 0;
  top_k_.clear();
  for (size_t s = 0; s < batch.size(); ++s) {
    const Span& sp = spans_[s];
    const bool all = batch[s].all_logits || sp.verify;
    const int64_t first = all ? sp.row0 : sp.row0 + sp.n - 1;
    const int64_t cnt = all ? sp.n : 1;
    top_k_.insert(top_k_.end(), size_t(cnt), std::max(batch[s].logits_top_k, 0));
    if (hidden)
      ex_->copy(hidden + first * H, cnt * H, normed + r * H);
    else
      ex_->rms_norm(x + first * H, cnt, H, w_->final_norm.data(), eps, normed + r * H);
    r += cnt;
  }
  logits->resize(size_t(n_logits * c.vocab));
  ex_->matmul(normed, n_logits, w_->head, logits->data());
  ex_->receive_logits(logits->data(), n_logits, c.vocab, top_k_);
  if (mtp) mtp_after_forward(hidden);
}

void Model::commit(SequenceState* st, int64_t rows) {
  const ModelConfig& c = w_->config;
  const int64_t n = st->verify_rows();
  QWEN35_CHECK(n > 0 && rows >= 1 && rows <= n);
  const int64_t C = c.conv_channels(), nv = c.n_v_heads;
  ex_->attach(*st);
  for (int64_t l = w_->held_first; l < w_->end_held(); ++l) {  // a pipeline rank: its own layers
    if (w_->layers[size_t(l)].kind == LayerKind::kFullAttention) continue;
    if (rows == n) {  // every row kept: the state after them is the one to keep
      st->keep_verified(l);
      continue;
    }
    // Replay the kept rows from the state before them: the same kernels on the same inputs as
    // the verification (and so as plain decoding), without the weight matmuls.
    const SequenceState::VerifyRecord& v = st->verify_record(l);
    const DeltaNetWeights& g = w_->layers[size_t(l)].gdn;
    ex_->copy(v.conv0.data(), int64_t(v.conv0.size()), st->conv_state(l));
    float* conv = sized(act_.qkv_conv, rows * C);
    float* o = sized(act_.delta_out, rows * nv * c.d_v);
    ex_->conv1d_silu(v.qkv.data(), rows, C, g.conv.data(), c.conv_kernel,
                     st->conv_state(l), conv);
    const kernels::Ops::DeltaParams dp{c.n_k_heads, nv, c.d_k, c.d_v, g.decay.data(),
                                       g.dt_bias.data(), nullptr, w_->tiled_v_heads};
    ex_->gated_delta(dp, conv, v.a.data(), v.b.data(), rows, false, st->delta_state(l), o);
  }
  if (st->has_mtp())  // the MTP head's next input: the trunk's hidden state at the last row kept
    ex_->copy(st->verify_hidden() + (rows - 1) * c.hidden, c.hidden, st->mtp_hidden());
  // A failed step here (a lost device) is reported by the next forward call, which fails on the
  // same device: the state is the caller's to reset then.
  (void)ex_->finish();
  st->end_verify(rows);
}

void Model::deltanet_layer(int64_t l, const float* in, int64_t n, float* out) {
  const ModelConfig& c = w_->config;
  const DeltaNetWeights& g = w_->layers[size_t(l)].gdn;
  const int64_t C = c.conv_channels(), nv = c.n_v_heads, dv = c.d_v;
  Activations& a = act_;
  float* qkv = sized(a.qkv, n * C);            // [n, C]
  float* conv = sized(a.qkv_conv, n * C);      // [n, C]
  float* z = sized(a.z, n * nv * dv);          // [n, nv, dv]
  float* beta_raw = sized(a.beta_raw, n * nv);  // [n, nv]
  float* decay_raw = sized(a.decay_raw, n * nv);  // [n, nv]
  float* o = sized(a.delta_out, n * nv * dv);  // [n, nv, dv]
  {
    const kernels::Matrix* ws[] = {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a};
    float* ys[] = {qkv, z, beta_raw, decay_raw};
    ex_->matmul_many(in, n, ws, ys, 4);
  }
  const kernels::Ops::DeltaParams dp{c.n_k_heads, nv, c.d_k, dv, g.decay.data(), g.dt_bias.data(), nullptr,
                                     w_->tiled_v_heads};
  for (const Span& sp : spans_) {
    if (sp.verify) {  // rows as decode steps; what commit() needs is kept (state.h)
      SequenceState::VerifyRecord& v = sp.state->verify_record(l);
      const float* cs = sp.state->conv_state(l);
      ex_->copy(cs, int64_t(v.conv0.size()), v.conv0.data());
      ex_->copy(qkv + sp.row0 * C, sp.n * C, v.qkv.data());
      ex_->copy(decay_raw + sp.row0 * nv, sp.n * nv, v.a.data());
      ex_->copy(beta_raw + sp.row0 * nv, sp.n * nv, v.b.data());
      ex_->conv1d_silu(qkv + sp.row0 * C, sp.n, C, g.conv.data(), c.conv_kernel,
                       sp.state->conv_state(l), conv + sp.row0 * C);
      kernels::Ops::DeltaParams vp = dp;
      vp.state_in = sp.state->delta_state(l);
      ex_->gated_delta(vp, conv + sp.row0 * C, decay_raw + sp.row0 * nv,
                       beta_raw + sp.row0 * nv, sp.n, false, v.after.data(),
                       o + sp.row0 * nv * dv);
      continue;
    }
    ex_->conv1d_silu(qkv + sp.row0 * C, sp.n, C, g.conv.data(), c.conv_kernel,
                     sp.state->conv_state(l), conv + sp.row0 * C);
    // Pieces on the absolute kDeltaChunk grid.
    size_t next_cap = 0;
    for (int64_t p = sp.pos0; p < sp.pos0 + sp.n;) {
      const int64_t end = std::min(sp.pos0 + sp.n, (p / kDeltaChunk + 1) * kDeltaChunk);
      const int64_t r0 = sp.row0 + (p - sp.pos0), len = end - p;
      ex_->gated_delta(dp, conv + r0 * C, decay_raw + r0 * nv, beta_raw + r0 * nv, len, len > 1,
                       sp.state->delta_state(l), o + r0 * nv * dv);
      if (next_cap < sp.captures.size() && sp.captures[next_cap].pos == end)
        capture_deltanet(l, sp, sp.captures[next_cap++], qkv);
      p = end;
    }
  }
  ex_->gated_rms_norm(o, z, n * nv, dv, g.norm.data(), float(c.eps));
  ex_->matmul(o, n, g.out_proj, out);
}

// Layer l's part of a state copy at cap.pos (inside span sp, which starts on the grid): the
// recurrent state as it stands, and the conv state the conv holds there, the K-1 inputs before
// cap.pos (oldest first), all of them this chunk's rows (K-1 < kDeltaChunk).
void Model::capture_deltanet(int64_t l, const Span& sp, const StateCapture& cap, const float* qkv) {
  const ModelConfig& c = w_->config;
  const int64_t C = c.conv_channels(), K1 = c.conv_kernel - 1;
  QWEN35_CHECK(cap.pos - K1 >= sp.pos0);
  capture_part(cap, sp.state->delta_state(l), c.n_v_heads * c.d_k * c.d_v, sp.state->delta_offset(l));
  capture_part(cap, qkv + (sp.row0 + cap.pos - K1 - sp.pos0) * C, K1 * C, sp.state->conv_offset(l));
}

void Model::capture_part(const StateCapture& cap, const float* src, int64_t count, int64_t at) {
  if (cap.device) {
    ex_->copy_to_snapshot(src, count, *cap.device, at);
    return;
  }
  ex_->copy(src, count, cap.out + at);
  ex_->receive(cap.out + at, count);
}

void Model::attention_layer(int64_t l, const float* in, int64_t n, float* out) {
  const ModelConfig& c = w_->config;
  const AttentionWeights& w = layer(l).attn;
  const int64_t nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim, q_row = (c.attn_gate ? 2 : 1) * nh * hd;
  Activations& a = act_;
  float* q_gate = sized(a.q_gate, n * q_row);        // [n, nh, 2·hd] (query | gate), or [n, nh, hd]
  float* k = sized(a.k, n * nkv * hd);               // [n, nkv, hd]
  float* v = sized(a.v, n * nkv * hd);               // [n, nkv, hd]
  float* o = sized(a.attn_out, n * nh * hd);         // [n, nh·hd]
  {
    const kernels::Matrix* ws[] = {&w.q_proj, &w.k_proj, &w.v_proj};
    float* ys[] = {q_gate, k, v};
    ex_->matmul_many(in, n, ws, ys, 3);
  }
  // The MTP head's cache has no row at position 0 (state.h).
  kernels::Ops::AttentionParams ap{nh, nkv, hd, c.rotary_dim, float(c.rope_theta), float(c.eps),
                                   w.q_norm.data(), w.k_norm.data(), l == c.n_layers ? 1 : 0};
  ap.gated = c.attn_gate;
  ap.pair_axis = c.rope_pair_axis.empty() ? nullptr : c.rope_pair_axis.data();
  for (const Span& sp : spans_) {
    // The MTP head's rows rotate at their cache position (mtp.cc), whatever the trunk's rotary
    // positions: after an image those run behind the cache (rope_delta < 0), and the head's first
    // rows would fall below 0. Drafts depend on it, no verified token does.
    ap.positions = l == c.n_layers ? nullptr : rope_positions(sp);
    ex_->attention(ap, q_gate + sp.row0 * q_row, k + sp.row0 * nkv * hd, v + sp.row0 * nkv * hd,
                   sp.n, sp.pos0, sp.state->kv(l), o + sp.row0 * nh * hd);
  }
  ex_->matmul(o, n, w.o_proj, out);
}

const int64_t* Model::rope_positions(const Span& sp) {
  if (sp.positions) return sp.positions;
  const int64_t d = sp.state->rope_delta();
  if (d == 0) return nullptr;
  int64_t* p = sized(rope_pos_, 3 * sp.n);
  for (int64_t t = 0; t < sp.n; ++t) p[3 * t] = p[3 * t + 1] = p[3 * t + 2] = sp.pos0 + t + d;
  return p;
}

void Model::mlp_layer(int64_t l, const float* in, int64_t n, float* out) {
  const MlpWeights& m = layer(l).mlp;
  const int64_t I = w_->config.intermediate;
  Activations& a = act_;
  float* gate = sized(a.mlp_gate, n * I);  // [n, I]
  float* up = sized(a.mlp_up, n * I);      // [n, I]
  float* act = sized(a.mlp_act, n * I);    // [n, I]
  {
    const kernels::Matrix* ws[] = {&m.gate_proj, &m.up_proj};
    float* ys[] = {gate, up};
    ex_->matmul_many(in, n, ws, ys, 2);
  }
  ex_->swiglu(gate, up, n, I, I, act);
  ex_->matmul(act, n, m.down_proj, out);
}

void Model::moe_layer(int64_t l, const float* in, int64_t n, float* out) {
  const ModelConfig& c = w_->config;
  const MoeWeights& m = layer(l).moe;
  const int64_t H = c.hidden, E = c.n_experts, K = c.top_k, I = c.moe_intermediate;
  Activations& a = act_;
  float* router_logits = sized(a.router_logits, n * E);  // [n, E]
  int32_t* idx = sized(a.expert_idx, n * K);             // [n, K]
  float* weight = sized(a.expert_weight, n * K);         // [n, K]
  // The router always runs exact: top-k is discontinuous, so activation rounding there would flip
  // expert choices (it is a small matrix; the experts are where the bytes are).
  ex_->matmul(in, n, m.router, router_logits, /*exact=*/true);
  ex_->router_topk(router_logits, n, E, K, c.norm_topk, idx, weight);
  float* expert_out = sized(a.expert_out, n * K * H);  // [n, K, H]
  ex_->moe_experts(in, n, idx, K, std::span<const MlpWeights>(m.experts).first(size_t(E)), I, H, expert_out);
  ex_->moe_combine(expert_out, weight, n, K, H, out);
  if (!m.has_shared) return;
  const int64_t Is = c.shared_intermediate;
  float* sg = sized(a.mlp_gate, n * Is);          // [n, Is]
  float* su = sized(a.mlp_up, n * Is);            // [n, Is]
  float* sa = sized(a.mlp_act, n * Is);           // [n, Is]
  float* so = sized(a.shared_out, n * H);         // [n, H]
  {
    const kernels::Matrix* ws[] = {&m.shared.gate_proj, &m.shared.up_proj};
    float* ys[] = {sg, su};
    ex_->matmul_many(in, n, ws, ys, 2);
  }
  ex_->swiglu(sg, su, n, Is, Is, sa);
  ex_->matmul(sa, n, m.shared.down_proj, so);
  float* scale = nullptr;  // [n] sigmoid(shared_expert_gate(x)); none: the shared expert adds as is
  if (m.has_shared_gate) {
    scale = sized(a.shared_scale, n);
    ex_->matmul(in, n, m.shared_gate, scale, /*exact=*/true);
    ex_->sigmoid(scale, n);
  }
  ex_->add_rows(so, scale, n, H, out);
}

}  // namespace qwen35::model
