// Fast mode's int8 forms of the weights (model.h: set_fast_activations). The kernels multiply
// every matrix of the ggml block types exactly, in both modes; in fast mode the backend may
// instead read an int8 form of it (an affine copy of the same codes and scales, Ops::int8_form),
// which this file puts in place of the matrix for as long as fast mode is on. The embedding table
// is not one of them (lookups read rows exactly in both modes); the head, even when tied to it, is.
#include <utility>

#include "model/model.h"
#include "model/tensor_table.h"

namespace qwen35::model {
namespace {

// Every matrix a matmul reads that fast mode may replace: the table's int8 entries, wherever
// the model has them (unbound ones are empty and have no form). The router and the shared
// expert's gate are not among them (moe_layer keeps them exact).
std::vector<kernels::Matrix*> matmul_matrices(ModelWeights& w) {
  std::vector<kernels::Matrix*> out;
  auto add = [&](const Tensor& t, LayerWeights* l) {
    const Slot s = t.slot(w, l);
    if (s.matrix != nullptr) out.push_back(s.matrix);
    if (s.experts != nullptr)
      for (MlpWeights& e : *s.experts) out.push_back(&(e.*t.expert));
  };
  for (const Tensor& t : tensor_table()) {
    if (!t.int8) continue;
    if (t.is_layer()) {
      for (LayerWeights& l : w.layers)
        if (in_layer(t, w.config, l.kind)) add(t, &l);
      if (w.mtp && in_layer(t, w.config, w.mtp->layer.kind)) add(t, &w.mtp->layer);
    } else if (t.block != Block::kMtp || w.mtp) {
      add(t, nullptr);  // the head, tied or not, and the MTP fc
    }
  }
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
}

}  // namespace qwen35::model
