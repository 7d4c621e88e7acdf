// The forward pass's working memory, by name. Shapes are for one forward call of n_tokens rows
// (all sequences of the batch, in row order); buffers grow to the largest call seen and are then
// reused, so a decode step allocates nothing.
//
// Aliasing: none. Each buffer has one meaning; a layer reads `normed` and writes its result into
// `layer_out`, which the forward adds to `residual`. The dense MLP and the MoE shared expert share
// the mlp_* buffers (a model has one or the other).
#pragma once

#include <cstdint>
#include <vector>

namespace qwen35::model {

struct Activations {
  std::vector<int32_t> tokens;  // [n_tokens] ids of every row
  std::vector<float> residual;  // [n_tokens, hidden] the residual stream
  std::vector<float> normed;    // [n_tokens, hidden] rms_norm(residual), a layer's input; at the
                                // end the final norm of the rows that need logits
  std::vector<float> layer_out;  // [n_tokens, hidden] a mixer's or an MLP's output

  // Gated DeltaNet.
  std::vector<float> qkv;        // [n_tokens, conv_channels] in_proj_qkv: q heads | k heads | v heads
  std::vector<float> qkv_conv;   // [n_tokens, conv_channels] after the causal conv1d + SiLU
  std::vector<float> z;          // [n_tokens, n_v_heads, d_v] output gate (in_proj_z)
  std::vector<float> beta_raw;   // [n_tokens, n_v_heads] in_proj_b, before the sigmoid
  std::vector<float> decay_raw;  // [n_tokens, n_v_heads] in_proj_a, before the softplus
  std::vector<float> delta_out;  // [n_tokens, n_v_heads, d_v] the delta rule's output

  // Gated full attention.
  std::vector<float> q_gate;    // [n_tokens, n_heads, 2 * head_dim] query | gate, per head
  std::vector<float> k, v;      // [n_tokens, n_kv_heads, head_dim]
  std::vector<float> attn_out;  // [n_tokens, n_heads * head_dim] gated attention output

  // Dense MLP, and the MoE shared expert.
  std::vector<float> mlp_gate, mlp_up, mlp_act;  // [n_tokens, intermediate]
  std::vector<float> shared_out;                 // [n_tokens, hidden] shared expert output
  std::vector<float> shared_scale;               // [n_tokens] sigmoid(shared_expert_gate(x))

  // MoE experts.
  std::vector<float> router_logits;  // [n_tokens, n_experts]
  std::vector<int32_t> expert_idx;   // [n_tokens, top_k] chosen experts
  std::vector<float> expert_weight;  // [n_tokens, top_k] their (renormalised) probabilities
  std::vector<float> expert_out;      // [n_tokens, top_k, hidden] every (row, slot)'s output
                                      // (the grouping's scratch is the executor's)
};

// v with room for at least n elements (grows, never shrinks).
template <typename T>
T* sized(std::vector<T>& v, int64_t n) {
  if (v.size() < size_t(n)) v.resize(size_t(n));
  return v.data();
}

}  // namespace qwen35::model
