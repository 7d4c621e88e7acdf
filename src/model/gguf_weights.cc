// Binding of GGUF files (llama.cpp architectures `qwen35`, `qwen35moe`, `qwen3`, `qwen3moe` and
// `qwen3next`):
// the configuration
// from the metadata, through the same support gate as config.json, and the tensors under their
// ggml names, with the conversions llama.cpp's converter applied undone or mapped:
//   - RMSNorm weights hold 1+w already (ssm_norm holds w, as in HF): bound with offset 0;
//   - ssm_a holds A = -exp(A_log), which the delta rule takes as is;
//   - value heads are in tiled order when they outnumber the key heads (value head h reads key
//     head h % nk): the delta rule maps them (ModelWeights::tiled_v_heads), and since every
//     value-head tensor (qkv rows, conv channels, z, a, b, A, dt_bias, out_proj columns) is in
//     that one order, nothing is permuted;
//   - attn_q keeps HF's per-head [query | gate] interleave; ssm_conv1d is [channels, kernel].
// Qwen3 files hold every weight as HF does (norms as applied, no q/k permutation), and name the
// post-attention norm ffn_norm (the table's qwen3-family entry).
// Qwen3-Next files (qwen3next) follow the qwen35 conventions but for the value heads, which stay
// in HF's grouped order (the converter reorders them only for qwen35), and the DeltaNet input
// projections: attn_qkv + attn_gate regrouped by the converter, or ssm_in fused per key head as
// in HF (older files), and ssm_ba always fused; the fused ones are regrouped here
// (model/fused_proj.h). The converter drops the MTP head.
#include <cmath>

#include "core/log.h"
#include "formats/gguf.h"
#include "kernels/ops.h"
#include "model/gguf_binder.h"
#include "model/tensor_table.h"
#include "model/weights.h"

namespace qwen35::model {

using core::error;
using core::Result;
using core::Status;
using formats::GgmlType;
using formats::GgufModel;
using formats::GgufTensor;
using kernels::Matrix;
using kernels::WeightType;

namespace {

std::string blk(int64_t i) { return "blk." + std::to_string(i) + "."; }

// The vocabulary from the embedding table, tying from the head's absence, the end token.
Status vocab_and_head(const GgufModel& g, formats::HfConfig* h) {
  const std::string embed = table_entry(Block::kModel, Role::kEmbedding).gguf;
  const GgufTensor* emb = g.find(embed);
  if (emb == nullptr) return error("[weights] missing tensor '" + embed + "'");
  if (emb->ne.size() != 2 || emb->ne[0] != h->hidden_size)
    return error("[weights] tensor '" + embed + "': expected ggml shape [" + std::to_string(h->hidden_size) +
                 ", vocab], found " + emb->shape_str());
  h->vocab_size = emb->ne[1];
  h->tie_word_embeddings = g.find(table_entry(Block::kHead, Role::kEmbedding).gguf) == nullptr;
  if (const formats::GgufValue* eos = g.find_value("tokenizer.ggml.eos_token_id"); eos && eos->is_int())
    h->eos_token_ids.push_back(eos->i);
  return Status();
}

// llama.cpp's qwen3 and qwen3moe architectures: every block full attention, the whole head
// rotated (rope.dimension_count, when written, must be key_length), the MoE top-k weights always
// renormalised (llama.cpp's graph for qwen3moe does so whatever the source config said).
Result<formats::HfConfig> qwen3_gguf_config(const GgufModel& g, const std::string& arch) {
  const std::string a = arch + ".";
  formats::HfConfig h;
  const bool moe = arch == "qwen3moe";
  h.model_type = h.text_model_type = moe ? "qwen3_moe" : "qwen3";
  QWEN35_ASSIGN_OR_RETURN(h.num_hidden_layers, g.get_int(a + "block_count"));
  QWEN35_ASSIGN_OR_RETURN(h.hidden_size, g.get_int(a + "embedding_length"));
  QWEN35_ASSIGN_OR_RETURN(h.num_attention_heads, g.get_int(a + "attention.head_count"));
  QWEN35_ASSIGN_OR_RETURN(h.num_key_value_heads, g.get_int_or(a + "attention.head_count_kv", h.num_attention_heads));
  const int64_t default_head = h.num_attention_heads > 0 ? h.hidden_size / h.num_attention_heads : 0;
  QWEN35_ASSIGN_OR_RETURN(h.head_dim, g.get_int_or(a + "attention.key_length", default_head));
  QWEN35_ASSIGN_OR_RETURN(int64_t value_length, g.get_int_or(a + "attention.value_length", h.head_dim));
  if (value_length != h.head_dim)
    return error("[gguf] '" + a + "attention.value_length' = " + std::to_string(value_length) +
                 " differs from key_length " + std::to_string(h.head_dim));
  QWEN35_ASSIGN_OR_RETURN(h.rms_norm_eps, g.get_float(a + "attention.layer_norm_rms_epsilon"));
  QWEN35_ASSIGN_OR_RETURN(h.rope_theta, g.get_float(a + "rope.freq_base"));
  h.rope_theta_set = true;
  QWEN35_ASSIGN_OR_RETURN(int64_t rot, g.get_int_or(a + "rope.dimension_count", h.head_dim));
  if (rot != h.head_dim)
    return error("[gguf] '" + a + "rope.dimension_count' = " + std::to_string(rot) +
                 ": Qwen3 rotates the whole head (key_length " + std::to_string(h.head_dim) + ")");
  if (const formats::GgufValue* v = g.find_value(a + "rope.scaling.type"); v && v->type == formats::GgufValueType::kString && v->s != "none")
    return error("[gguf] '" + a + "rope.scaling.type' = \"" + v->s + "\": RoPE scaling (YaRN) is not supported");
  if (g.find_value(a + "attention.sliding_window") != nullptr)
    return error("[gguf] '" + a + "attention.sliding_window' is set: sliding-window attention is not supported");
  h.partial_rotary_factor = 1.0;
  h.partial_rotary_factor_set = true;
  QWEN35_ASSIGN_OR_RETURN(h.max_position_embeddings, g.get_int_or(a + "context_length", 0));
  if (moe) {
    QWEN35_ASSIGN_OR_RETURN(h.num_experts, g.get_int(a + "expert_count"));
    QWEN35_ASSIGN_OR_RETURN(h.num_experts_per_tok, g.get_int(a + "expert_used_count"));
    QWEN35_ASSIGN_OR_RETURN(h.moe_intermediate_size, g.get_int(a + "expert_feed_forward_length"));
    h.norm_topk_prob = true;
    h.keys.insert("norm_topk_prob");
  } else {
    QWEN35_ASSIGN_OR_RETURN(h.intermediate_size, g.get_int(a + "feed_forward_length"));
  }
  const std::string q = table_entry(Block::kFullAttn, Role::kInProj).gguf;
  for (int64_t i = 0; i < h.num_hidden_layers; ++i)
    if (g.find(blk(i) + q) == nullptr)
      return error("[weights] missing tensor '" + blk(i) + q + "' (every " + arch + " block is full attention)");
  h.attn_output_gate = false;
  QWEN35_RETURN_IF_ERROR(vocab_and_head(g, &h));
  return h;
}

// The metadata as the fields of a config.json, for the support gate.
Result<formats::HfConfig> gguf_config(const GgufModel& g, std::string* arch_out) {
  QWEN35_ASSIGN_OR_RETURN(std::string arch, g.get_string("general.architecture"));
  if (arch != "qwen35" && arch != "qwen35moe" && arch != "qwen3" && arch != "qwen3moe" && arch != "qwen3next")
    return error("[gguf] '" + g.path() + "': architecture '" + arch +
                 "' is not supported (supported: qwen35, qwen35moe, qwen3, qwen3moe, qwen3next)");
  *arch_out = arch;
  if (arch == "qwen3" || arch == "qwen3moe") return qwen3_gguf_config(g, arch);
  const std::string a = arch + ".";
  formats::HfConfig h;
  const bool next = arch == "qwen3next", moe = arch == "qwen35moe" || next;
  h.model_type = h.text_model_type = next ? "qwen3_next" : moe ? "qwen3_5_moe" : "qwen3_5";
  QWEN35_ASSIGN_OR_RETURN(int64_t blocks, g.get_int(a + "block_count"));
  QWEN35_ASSIGN_OR_RETURN(h.mtp_num_hidden_layers, g.get_int_or(a + "nextn_predict_layers", 0));
  h.keys.insert("mtp_num_hidden_layers");
  if (h.mtp_num_hidden_layers < 0 || h.mtp_num_hidden_layers >= blocks)
    return error("[gguf] '" + a + "nextn_predict_layers' = " + std::to_string(h.mtp_num_hidden_layers) +
                 " does not fit in block_count " + std::to_string(blocks));
  h.num_hidden_layers = blocks - h.mtp_num_hidden_layers;
  QWEN35_ASSIGN_OR_RETURN(h.hidden_size, g.get_int(a + "embedding_length"));
  QWEN35_ASSIGN_OR_RETURN(h.num_attention_heads, g.get_int(a + "attention.head_count"));
  QWEN35_ASSIGN_OR_RETURN(h.num_key_value_heads, g.get_int(a + "attention.head_count_kv"));
  QWEN35_ASSIGN_OR_RETURN(h.head_dim, g.get_int(a + "attention.key_length"));
  QWEN35_ASSIGN_OR_RETURN(int64_t value_length, g.get_int_or(a + "attention.value_length", h.head_dim));
  if (value_length != h.head_dim)
    return error("[gguf] '" + a + "attention.value_length' = " + std::to_string(value_length) +
                 " differs from key_length " + std::to_string(h.head_dim) + " (Qwen3.5 attention has one head_dim)");
  QWEN35_ASSIGN_OR_RETURN(h.rms_norm_eps, g.get_float(a + "attention.layer_norm_rms_epsilon"));
  QWEN35_ASSIGN_OR_RETURN(h.rope_theta, g.get_float(a + "rope.freq_base"));
  h.rope_theta_set = true;
  QWEN35_ASSIGN_OR_RETURN(int64_t rot, g.get_int(a + "rope.dimension_count"));
  if (rot <= 0 || h.head_dim <= 0 || rot > h.head_dim)
    return error("[gguf] '" + a + "rope.dimension_count' = " + std::to_string(rot) + " does not fit head_dim " +
                 std::to_string(h.head_dim));
  h.partial_rotary_factor = double(rot) / double(h.head_dim);
  h.rotary_dim = rot;
  // llama.cpp's converter writes mrope_section as four integers (the fourth 0).
  if (const formats::GgufValue* v = g.find_value(a + "rope.dimension_sections")) {
    if (!v->is_array() || v->ints.size() != v->array_size() || v->array_size() > 4)
      return error("[gguf] '" + a + "rope.dimension_sections' must be an array of at most 4 integers");
    for (size_t i = 0; i < v->ints.size() && i < 3; ++i) {
      if (v->ints[i] < 0 || v->ints[i] > (1 << 20))
        return error("[gguf] '" + a + "rope.dimension_sections' holds " + std::to_string(v->ints[i]));
      h.mrope_section.push_back(v->ints[i]);
    }
  }
  QWEN35_ASSIGN_OR_RETURN(h.max_position_embeddings, g.get_int_or(a + "context_length", 0));
  QWEN35_ASSIGN_OR_RETURN(h.full_attention_interval, g.get_int_or(a + "full_attention_interval", 4));
  QWEN35_ASSIGN_OR_RETURN(h.linear_conv_kernel_dim, g.get_int(a + "ssm.conv_kernel"));
  QWEN35_ASSIGN_OR_RETURN(h.linear_key_head_dim, g.get_int(a + "ssm.state_size"));
  QWEN35_ASSIGN_OR_RETURN(h.linear_num_key_heads, g.get_int(a + "ssm.group_count"));
  QWEN35_ASSIGN_OR_RETURN(h.linear_num_value_heads, g.get_int(a + "ssm.time_step_rank"));
  QWEN35_ASSIGN_OR_RETURN(int64_t inner, g.get_int(a + "ssm.inner_size"));
  if (h.linear_num_value_heads <= 0 || inner <= 0 || inner % h.linear_num_value_heads != 0)
    return error("[gguf] '" + a + "ssm.inner_size' = " + std::to_string(inner) + " is not a multiple of " +
                 a + "ssm.time_step_rank = " + std::to_string(h.linear_num_value_heads));
  h.linear_value_head_dim = inner / h.linear_num_value_heads;
  if (moe) {
    QWEN35_ASSIGN_OR_RETURN(h.num_experts, g.get_int(a + "expert_count"));
    QWEN35_ASSIGN_OR_RETURN(h.num_experts_per_tok, g.get_int(a + "expert_used_count"));
    QWEN35_ASSIGN_OR_RETURN(h.moe_intermediate_size, g.get_int(a + "expert_feed_forward_length"));
    QWEN35_ASSIGN_OR_RETURN(h.shared_expert_intermediate_size, g.get_int_or(a + "expert_shared_feed_forward_length", 0));
  } else {
    QWEN35_ASSIGN_OR_RETURN(h.intermediate_size, g.get_int(a + "feed_forward_length"));
  }
  // The layer kinds from the tensors each block has; the vocabulary from the embedding table.
  const std::string qkv = table_entry(Block::kLinearAttn, Role::kInProj).gguf;
  const std::string q = table_entry(Block::kFullAttn, Role::kInProj).gguf;
  std::string ssm_in;  // Qwen3-Next's fused form of attn_qkv, in older files
  for (const Tensor& t : tensor_table())
    if (t.fused == Fused::kQkv) ssm_in = t.gguf_fused;
  for (int64_t i = 0; i < h.num_hidden_layers; ++i) {
    const bool linear = g.find(blk(i) + qkv) != nullptr || (next && g.find(blk(i) + ssm_in) != nullptr);
    const bool full = g.find(blk(i) + q) != nullptr;
    if (linear == full)
      return error("[gguf] block " + std::to_string(i) + (linear ? " has both " : " has neither ") + "'" +
                   module_of(qkv) + "' (Gated DeltaNet) and '" + module_of(q) + "' (full attention) tensors");
    h.layer_types.push_back(linear ? "linear_attention" : "full_attention");
  }
  // llama.cpp reads the pattern from this key when it is there: a file whose key and tensors
  // disagree is broken one way or the other.
  if (const formats::GgufValue* rl = g.find_value(a + "attention.recurrent_layers")) {
    if (!rl->is_array() || rl->ints.size() < size_t(h.num_hidden_layers))
      return error("[gguf] '" + a + "attention.recurrent_layers' is not an array of one flag per block");
    for (int64_t i = 0; i < h.num_hidden_layers; ++i)
      if ((rl->ints[size_t(i)] != 0) != (h.layer_types[size_t(i)] == "linear_attention"))
        return error("[gguf] '" + a + "attention.recurrent_layers' says block " + std::to_string(i) + " is " +
                     (rl->ints[size_t(i)] ? "recurrent" : "full attention") + ", but its tensors are " +
                     (rl->ints[size_t(i)] ? "full attention" : "Gated DeltaNet"));
  }
  QWEN35_RETURN_IF_ERROR(vocab_and_head(g, &h));
  return h;
}

// A layer's routed experts, stacked ne [in, out, E]; gate and up either apart or fused (per
// expert, the gate rows then the up rows), the fused tensor bound once, at its gate half.
Status bind_experts(GgufBinder& b, const ModelConfig& c, const Tensor& t, const std::string& p, Slot s,
                    Matrix* fused) {
  const int64_t E = c.n_experts;
  const Dims d = t.dims(c);
  Matrix m;
  int64_t stride = d.out, first = 0;  // expert e's rows: [e·stride + first, +d.out)
  if (t.gguf_fused != nullptr && b.has(p + t.gguf_fused)) {
    if (t.half == Half::kGate) {
      QWEN35_ASSIGN_OR_RETURN(*fused, b.matrix(p + t.gguf_fused, 2 * d.out, d.in, E));
    }
    m = *fused;
    stride = 2 * d.out;
    first = t.half == Half::kUp ? d.out : 0;
  } else {
    QWEN35_ASSIGN_OR_RETURN(m, b.matrix(p + t.gguf, d.out, d.in, E));
  }
  s.experts->resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) (*s.experts)[size_t(e)].*t.expert = m.row_slice(e * stride + first, d.out);
  return Status();
}

// A part of a fused DeltaNet projection (Qwen3-Next): the plain tensor when the file has it,
// else cut from the fused one, bound at the layer's first part that needs it.
Status bind_fused(GgufBinder& b, const ModelConfig& c, const Tensor& t, const std::string& p, Slot s,
                  Matrix* whole, OwnedBuffers* owned) {
  const Dims d = t.dims(c);
  if (std::string(t.gguf) != t.gguf_fused && b.has(p + t.gguf)) {
    QWEN35_ASSIGN_OR_RETURN(*s.matrix, b.matrix(p + t.gguf, d.out, d.in));
    return Status();
  }
  if (t.fused == Fused::kQkv || t.fused == Fused::kB || whole->data == nullptr) {
    QWEN35_ASSIGN_OR_RETURN(*whole, b.matrix(p + t.gguf_fused, fused_rows(c, t.fused), d.in));
  }
  *s.matrix = gather_rows(*whole, fused_part_runs(c, t.fused), owned);
  return Status();
}

// Binds table entry `t` under prefix `p`: values as stored (norms hold 1+w, ssm_a holds A).
// `fused`: the layer's fused expert or DeltaNet tensor, bound at its first part.
Status bind_entry(GgufBinder& b, const ModelConfig& c, const Tensor& t, const std::string& p, Slot s,
                  Matrix* fused, OwnedBuffers* owned) {
  const std::string name = p + t.gguf;
  const Dims d = t.dims(c);
  if (t.optional && !b.has(name)) return Status();
  switch (t.form) {
    case Form::kMatrix: {
      if (t.fused != Fused::kNone) return bind_fused(b, c, t, p, s, fused, owned);
      QWEN35_ASSIGN_OR_RETURN(*s.matrix, b.matrix(name, d.out, d.in));
      break;
    }
    case Form::kExperts: return bind_experts(b, c, t, p, s, fused);
    case Form::kConv: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, b.conv(name, d.out, d.in));
      break;
    }
    case Form::kVector: {
      QWEN35_ASSIGN_OR_RETURN(*s.floats, b.vec(name, d.out));
      break;
    }
    case Form::kPatch:
    case Form::kTable: return error("[weights] tensor '" + name + "': a vision form in the text table (a table bug)");
  }
  if (s.present != nullptr) *s.present = true;
  return Status();
}

// Binds the entries of block `i` (c.n_layers: the MTP head's layer) of kind `kind`.
Status bind_layer(GgufBinder& b, ModelWeights& w, int64_t i, LayerKind kind, LayerWeights* L) {
  const ModelConfig& c = w.config;
  L->kind = kind;
  L->moe.has_shared = c.moe && c.shared_intermediate > 0;
  Matrix fused;
  for (const Tensor& t : tensor_table())
    if (in_layer(t, c, kind))
      QWEN35_RETURN_IF_ERROR(
          bind_entry(b, c, t, tensor_prefix(t, Dialect::kGguf, "", c, i), t.slot(w, L), &fused, &w.owned));
  return Status();
}

// The entries of one model-level block (the MTP head's own: at blk.{n_layers}).
Status bind_block(GgufBinder& b, ModelWeights& w, Block block) {
  Matrix unused;
  for (const Tensor& t : tensor_table())
    if (t.block == block)
      QWEN35_RETURN_IF_ERROR(bind_entry(b, w.config, t, tensor_prefix(t, Dialect::kGguf, "", w.config, -1),
                                        t.slot(w, nullptr), &unused, &w.owned));
  return Status();
}

}  // namespace

Result<std::unique_ptr<ModelWeights>> load_gguf_weights(const std::string& path, core::LoadMode mode) {
  QWEN35_ASSIGN_OR_RETURN(std::shared_ptr<GgufModel> g, GgufModel::open(path, mode));
  std::string arch;
  QWEN35_ASSIGN_OR_RETURN(formats::HfConfig hf, gguf_config(*g, &arch));
  QWEN35_ASSIGN_OR_RETURN(ModelConfig cfg, make_model_config(hf));
  auto mw = std::make_unique<ModelWeights>();
  mw->config = cfg;
  mw->dialect = Dialect::kGguf;
  mw->tiled_v_heads = cfg.n_v_heads != cfg.n_k_heads && cfg.family == Family::kQwen35;
  mw->gguf = g;
  const ModelConfig& c = mw->config;
  GgufBinder b(*g);
  QWEN35_RETURN_IF_ERROR(bind_block(b, *mw, Block::kModel));
  const Tensor& head = table_entry(Block::kHead, Role::kEmbedding);
  mw->tied = !b.has(head.gguf);
  if (mw->tied) {
    mw->head = mw->embed;
  } else {
    QWEN35_RETURN_IF_ERROR(bind_block(b, *mw, Block::kHead));
  }
  mw->layers.resize(c.layers.size());
  for (size_t i = 0; i < c.layers.size(); ++i)
    QWEN35_RETURN_IF_ERROR(bind_layer(b, *mw, int64_t(i), c.layers[i], &mw->layers[i]));
  mw->weight_bytes = b.bytes();
  mw->n_params = b.params();
  size_t expert_bytes = 0;
  for (const auto& L : mw->layers)
    for (const auto& e : L.moe.experts) expert_bytes += e.gate_proj.bytes() + e.up_proj.bytes() + e.down_proj.bytes();
  mw->stream_bytes = b.bytes() - (mw->tied ? 0 : mw->embed.bytes()) - expert_bytes;
  if (c.moe) mw->stream_bytes += size_t(double(expert_bytes) * double(c.top_k) / double(c.n_experts));
  mw->vision_problem = "no vision tower: a GGUF model file holds none (llama.cpp keeps it in an mmproj file)";
  mw->has_mtp = c.mtp_layers > 0;
  if (mw->has_mtp) {
    if (c.mtp_layers != 1) {
      mw->mtp_problem = "the MTP head has " + std::to_string(c.mtp_layers) +
                        " layers (nextn_predict_layers); drafting supports 1";
    } else {
      GgufBinder mb(*g);
      mw->mtp = std::make_unique<MtpWeights>();
      Status st = bind_block(mb, *mw, Block::kMtp);
      if (st.ok()) st = bind_layer(mb, *mw, c.n_layers, LayerKind::kFullAttention, &mw->mtp->layer);
      if (st.ok()) {
        mw->mtp_bytes = mb.bytes();
      } else {
        mw->mtp.reset();
        mw->mtp_problem = st.message();
      }
    }
    if (!mw->mtp_problem.empty())
      QWEN35_LOG_WARN("the file's MTP head is not usable for drafting: %s", mw->mtp_problem.c_str());
  }
  return mw;
}

}  // namespace qwen35::model
