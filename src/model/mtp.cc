// The multi-token-prediction head (model.h: enable_mtp, draft; state.h: its cache). Row p of the
// head reads the trunk's hidden state h_p after the final norm and the embedding of token p+1:
//   x = fc(concat(norm_embedding(E[x_{p+1}]), norm_hidden(h_p))),
// then one gated full-attention decoder layer (its own cache, causal over the rows, RoPE at the
// row's cache position p+1: attention scores depend on position differences only), its MLP,
// `norm` and the trunk's head; the logits predict token p+2. Drafting further feeds the head's
// own output (after `norm`) back as the next row's hidden state.
//
// Drafts change the speed only: verification (Model::forward with SequenceRows::verify) decides
// every token, so the head needs no batch invariance for exactness. It has it anyway (the same
// kernels), so drafts, and with them acceptance, are the same whatever else runs.
#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "model/model.h"

namespace qwen35::model {

using core::error;
using core::Status;

std::string mtp_unusable(const ModelWeights& w) {
  if (w.mtp) return "";
  return w.has_mtp ? "the checkpoint's MTP head is not usable: " + w.mtp_problem
                   : std::string("this checkpoint has no MTP head (mtp.* tensors; MLX exports drop them)");
}

Status Model::enable_mtp() {
  if (!w_->mtp) return error(mtp_unusable(*w_));
  mtp_on_ = true;
  return Status();
}

void Model::mtp_rows(int64_t m, const int32_t* tokens, const float* hidden, float* out) {
  const ModelConfig& c = w_->config;
  const MtpWeights& w = *w_->mtp;
  const int64_t H = c.hidden, L = c.n_layers;
  const float eps = float(c.eps);
  Activations& a = act_;
  float* x = sized(a.residual, m * H);
  float* normed = sized(a.normed, m * H);
  float* layer_out = sized(a.layer_out, m * H);
  float* cat = sized(mtp_cat_, m * 2 * H);  // [m, 2H]: embedding half, then hidden half
  ex_->embed(w_->embed, tokens, m, x);
  ex_->rms_norm(x, m, H, w.norm_embedding.data(), eps, normed);
  ex_->rms_norm(hidden, m, H, w.norm_hidden.data(), eps, layer_out);
  ex_->copy_rows(normed, H, cat, 2 * H, m, H);
  ex_->copy_rows(layer_out, H, cat + H, 2 * H, m, H);
  ex_->matmul(cat, m, w.fc, x);
  ex_->rms_norm(x, m, H, w.layer.input_norm.data(), eps, normed);
  attention_layer(L, normed, m, layer_out);  // writes the rows to the head's cache
  if (out == nullptr) return;
  ex_->add_rows(layer_out, nullptr, m, H, x);
  ex_->rms_norm(x, m, H, w.layer.post_norm.data(), eps, normed);
  if (c.moe) moe_layer(L, normed, m, layer_out);
  else mlp_layer(L, normed, m, layer_out);
  ex_->add_rows(layer_out, nullptr, m, H, x);
  ex_->rms_norm(x, m, H, w.norm.data(), eps, out);
}

// The rows this call completes: a sequence that fed tokens [pos0, pos0 + n) now knows token p+1
// for every row p in [pos0 - 1, pos0 + n - 2] (row -1 does not exist), with h_{pos0-1} kept in
// the state from the call before.
void Model::mtp_after_forward(const float* hidden) {
  const int64_t H = w_->config.hidden;
  trunk_spans_.swap(spans_);
  spans_.clear();
  int64_t m = 0;
  for (const Span& sp : trunk_spans_) {
    if (!sp.state->has_mtp()) continue;
    const int64_t first = std::max<int64_t>(sp.pos0 - 1, 0), last = sp.pos0 + sp.n - 2;
    if (last < first) continue;
    spans_.push_back({sp.state, m, last - first + 1, first + 1, false});
    m += last - first + 1;
  }
  // Sized before any copy into them is issued: an executor may run the copies later.
  float* in = sized(mtp_in_, m * H);
  int32_t* tokens = sized(mtp_tokens_, m);
  m = 0;
  for (const Span& sp : trunk_spans_) {
    if (!sp.state->has_mtp()) continue;
    const int64_t first = std::max<int64_t>(sp.pos0 - 1, 0), last = sp.pos0 + sp.n - 2;
    for (int64_t p = first; p <= last; ++p, ++m) {
      const float* h = p < sp.pos0 ? sp.state->mtp_hidden() : hidden + (sp.row0 + p - sp.pos0) * H;
      ex_->copy(h, H, in + m * H);
      tokens[m] = act_.tokens[size_t(sp.row0 + p + 1 - sp.pos0)];
    }
  }
  if (m > 0) mtp_rows(m, mtp_tokens_.data(), mtp_in_.data(), nullptr);
  for (const Span& sp : trunk_spans_) {
    if (!sp.state->has_mtp()) continue;
    const float* rows = hidden + sp.row0 * H;
    if (sp.verify) ex_->copy(rows, sp.n * H, sp.state->verify_hidden());
    for (const StateCapture& cap : sp.captures)  // the hidden row of the last position below
      capture_part(cap, rows + (cap.pos - 1 - sp.pos0) * H, H, sp.state->mtp_offset());
    ex_->copy(rows + (sp.n - 1) * H, H, sp.state->mtp_hidden());
  }
  spans_.swap(trunk_spans_);
}

Status Model::draft(std::span<const DraftRequest> reqs, std::vector<float>* logits) {
  if (!mtp_on_) return error("[draft] MTP drafting is off (Model::enable_mtp)");
  const ModelConfig& c = w_->config;
  const kernels::Matrix draft_head = this->draft_head();
  const int64_t H = c.hidden, V = c.vocab, DV = draft_head.rows;
  int64_t most = 0;
  for (const DraftRequest& r : reqs) {
    if (r.state == nullptr || r.out == nullptr) return error("[draft] a request without a state or output");
    if (!r.state->has_mtp()) return error("[draft] the state has no MTP cache (make it after enable_mtp)");
    if (r.state->verify_pending()) return error("[draft] the state has a verification pending");
    if (r.token < 0 || r.token >= V) return error("[draft] token id " + std::to_string(r.token) + " out of range");
    if (r.k < 0 || r.k >= kMaxVerifyRows) return error("[draft] k must be in [0, " + std::to_string(kMaxVerifyRows - 1) + "]");
    r.out->clear();
    most = std::max(most, r.k);
  }
  if (logits) logits->clear();
  std::vector<int64_t>& prev = draft_prev_;  // each request's row of the previous position
  prev.assign(reqs.size(), -1);
  // At most one row per request: sized before any copy into them is issued (an executor may
  // run the copies later).
  const int64_t rows = int64_t(reqs.size());
  float* in = sized(mtp_in_, rows * H);
  float* out = sized(mtp_out_, rows * H);
  int32_t* tokens = sized(mtp_tokens_, rows);
  for (int64_t d = 0; d < most; ++d) {
    spans_.clear();
    int64_t m = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const DraftRequest& r = reqs[i];
      SequenceState* st = r.state;
      const int64_t slot = st->pos() + d;  // MTP row pos-1+d lives at cache position pos+d
      const bool going = d == 0 ? st->pos() >= 1 : prev[i] >= 0;
      if (!going || d >= r.k || slot >= st->capacity() || !st->reserve(slot + 1)) {
        prev[i] = -1;
        continue;
      }
      const float* h = d == 0 ? st->mtp_hidden() : out + prev[i] * H;
      ex_->attach(*st);
      ex_->copy(h, H, in + m * H);
      tokens[m] = d == 0 ? r.token : r.out->back();
      spans_.push_back({st, m, 1, slot, false});
      prev[i] = m++;
    }
    if (m == 0) break;
    mtp_rows(m, tokens, in, out);
    float* lg = sized(draft_logits_, m * DV);
    ex_->matmul(out, m, draft_head, lg);
    ex_->receive(lg, m * DV);
    QWEN35_RETURN_IF_ERROR(ex_->finish());  // the drafts are chosen on the host
    for (size_t i = 0; i < reqs.size(); ++i) {
      if (prev[i] < 0) continue;
      const float* row = lg + prev[i] * DV;
      reqs[i].out->push_back(int32_t(std::max_element(row, row + DV) - row));  // ties: lower id
    }
    if (logits) logits->insert(logits->end(), lg, lg + m * DV);
  }
  spans_.clear();
  return Status();
}

}  // namespace qwen35::model
