// Fast mode's int8 forms of the weights (model.h: set_fast_activations). The kernels multiply
// every matrix of the ggml block types exactly, in both modes; in fast mode the backend may
// instead read an int8 form of it (an affine copy of the same codes and scales, Ops::int8_form),
// which this file puts in place of the matrix for as long as fast mode is on. The embedding table
// is not one of them (lookups read rows exactly in both modes); the head, even when tied to it, is.
#include <utility>

#include "model/model.h"

namespace qwen35::model {
namespace {

void add_mlp(MlpWeights& m, std::vector<kernels::Matrix*>& out) {
  for (kernels::Matrix* x : {&m.gate_proj, &m.up_proj, &m.down_proj}) out.push_back(x);
}

void add_layer(LayerWeights& l, std::vector<kernels::Matrix*>& out) {
  AttentionWeights& a = l.attn;
  DeltaNetWeights& d = l.gdn;
  for (kernels::Matrix* x : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj, &d.in_proj_qkv, &d.in_proj_z, &d.in_proj_b,
                             &d.in_proj_a, &d.out_proj})
    out.push_back(x);
  add_mlp(l.mlp, out);
  // The router and the shared expert's gate stay exact (moe_layer); the experts do not.
  for (MlpWeights& e : l.moe.experts) add_mlp(e, out);
  add_mlp(l.moe.shared, out);
}

// Every matrix a matmul reads (unbound ones are empty and have no form).
std::vector<kernels::Matrix*> matmul_matrices(ModelWeights& w) {
  std::vector<kernels::Matrix*> out;
  for (LayerWeights& l : w.layers) add_layer(l, out);
  if (w.mtp) {
    out.push_back(&w.mtp->fc);
    add_layer(w.mtp->layer, out);
  }
  out.push_back(&w.head);
  return out;
}

}  // namespace

void Model::set_fast_activations(bool on) {
  ctx_.int8_activations = on;
  const bool had = !replaced_.empty() || !int8_forms_.empty();
  if (on && int8_forms_.empty()) {
    for (kernels::Matrix* m : matmul_matrices(*w_)) {
      if (m->rows == 0 || m->data == nullptr) continue;
      std::unique_ptr<kernels::Int8Form> f = ops_.int8_form(*m, ctx_.pool);
      if (!f) continue;
      replaced_.emplace_back(m, *m);
      *m = f->m;
      int8_forms_.push_back(std::move(f));
    }
  } else if (!on && had) {
    for (auto& [m, original] : replaced_) *m = original;
    replaced_.clear();
    int8_forms_.clear();
  }
  set_draft_vocab(draft_head_.rows);  // the draft head is a slice of the head now in use
}

}  // namespace qwen35::model
