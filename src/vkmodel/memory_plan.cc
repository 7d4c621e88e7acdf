#include "vkmodel/memory_plan.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "kernels/ops.h"
#include "model/kv_pool.h"
#include "model/state.h"
#include "vulkan/matrix.h"

namespace qwen35::vkmodel {

namespace {

using model::LayerWeights;
using model::MlpWeights;

// Sums what the executor uploads: each bound matrix as upload_matrix holds it, each float
// vector as one buffer. Unbound matrices (no data) and empty vectors cost nothing, so a layer's
// members of the other kind count zero.
struct WeightBytes {
  uint64_t part_limit = 0;
  uint64_t bytes = 0;

  void matrix(const kernels::Matrix& m) {
    if (m.data != nullptr) bytes += vulkan::planned_bytes(m, part_limit);
  }
  void floats(const std::vector<float>& v) { bytes += v.size() * sizeof(float); }
  void mlp(const MlpWeights& m) {
    matrix(m.gate_proj);
    matrix(m.up_proj);
    matrix(m.down_proj);
  }
  void layer(const LayerWeights& l) {
    floats(l.input_norm);
    floats(l.post_norm);
    const model::AttentionWeights& a = l.attn;
    for (const kernels::Matrix* m : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj}) matrix(*m);
    floats(a.q_norm);
    floats(a.k_norm);
    const model::DeltaNetWeights& g = l.gdn;
    for (const kernels::Matrix* m :
         {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a, &g.out_proj})
      matrix(*m);
    for (const std::vector<float>* v : {&g.conv, &g.decay, &g.dt_bias, &g.norm}) floats(*v);
    mlp(l.mlp);
    matrix(l.moe.router);
    for (const MlpWeights& e : l.moe.experts) mlp(e);
    if (l.moe.has_shared) mlp(l.moe.shared);
    if (l.moe.has_shared_gate) matrix(l.moe.shared_gate);
  }
};

bool shared_gate(const model::ModelWeights& w) {
  for (const LayerWeights& l : w.layers)
    if (l.moe.has_shared_gate) return true;
  return w.mtp && w.mtp->layer.moe.has_shared_gate;
}

// MiB or GiB (as `unit`) with `decimals`.
std::string in_unit(uint64_t bytes, double unit, int decimals) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, double(bytes) / unit);
  return b;
}

std::string human(uint64_t bytes) {
  const bool gib = bytes >= (uint64_t(1) << 30);
  return in_unit(bytes, gib ? 1073741824.0 : 1048576.0, 2) + (gib ? " GiB" : " MiB");
}

}  // namespace

DeviceMemoryPlan plan_device_memory(const model::ModelWeights& w, int64_t ctx, int64_t parallel,
                                    int64_t step_tokens, bool mtp, uint64_t part_limit,
                                    kernels::KvTypes kv_types) {
  const model::ModelConfig& c = w.config;
  const bool use_mtp = mtp && w.mtp != nullptr;
  const bool first = w.held_first == 0, last = w.end_held() == c.n_layers;
  DeviceMemoryPlan p;

  WeightBytes wb{part_limit};
  if (first || (last && use_mtp)) wb.matrix(w.embed);  // the MTP head reads embedding rows too
  if (last) {
    if (!w.tied && w.head.data != w.embed.data) wb.matrix(w.head);
    wb.floats(w.final_norm);
  }
  for (int64_t l = w.held_first; l < w.end_held(); ++l) wb.layer(w.layers[size_t(l)]);
  if (use_mtp && last) {
    const model::MtpWeights& m = *w.mtp;
    wb.matrix(m.fc);
    for (const std::vector<float>* v : {&m.norm_embedding, &m.norm_hidden, &m.norm}) wb.floats(*v);
    wb.layer(m.layer);
  }
  if (first && w.vision) {  // the vision tower's weights (its run buffers grow with the image)
    const model::VisionWeights& v = *w.vision;
    for (const std::vector<float>* x : {&v.patch_b, &v.merger_norm_w, &v.merger_norm_b,
                                        &v.merger_fc1_b, &v.merger_fc2_b})
      wb.floats(*x);
    for (const kernels::Matrix* x : {&v.patch, &v.merger_fc1, &v.merger_fc2}) wb.matrix(*x);
    for (const model::VisionBlockWeights& b : v.blocks) {
      for (const std::vector<float>* x : {&b.norm1_w, &b.norm1_b, &b.norm2_w, &b.norm2_b,
                                          &b.qkv_b, &b.proj_b, &b.fc1_b, &b.fc2_b})
        wb.floats(*x);
      for (const kernels::Matrix* x : {&b.qkv, &b.proj, &b.fc1, &b.fc2}) wb.matrix(*x);
    }
  }
  p.weights = wb.bytes;

  const uint64_t seqs = uint64_t(std::max<int64_t>(parallel, 0));
  const uint64_t blocks_per_seq =
      uint64_t((std::max<int64_t>(ctx, 0) + kernels::kKvBlock - 1) / kernels::kKvBlock);
  p.kv = seqs * blocks_per_seq * uint64_t(kernels::kKvBlock) *
         model::kv_bytes_per_token(c, kv_types, use_mtp);

  const uint64_t F = sizeof(float);
  const uint64_t C = uint64_t(c.conv_channels()), nv = uint64_t(c.n_v_heads);
  const uint64_t recurrent = uint64_t(c.n_linear_layers()) *
                                 (uint64_t(c.conv_kernel - 1) * C + nv * uint64_t(c.d_k * c.d_v)) *
                                 F +
                             (use_mtp ? uint64_t(c.hidden) * F : 0);
  p.state = seqs * (recurrent + (use_mtp ? model::SequenceState::verify_bytes(c, true) : 0));

  // Activations for n rows (model/activations.h), by buffer.
  const uint64_t n = uint64_t(std::max<int64_t>(step_tokens, 0));
  const uint64_t H = uint64_t(c.hidden), V = uint64_t(c.vocab);
  uint64_t words = n * 4;       // token ids and the three rotary positions of every row
  words += 3 * n * H;           // residual, normed, layer_out
  if (c.n_linear_layers() > 0)  // qkv and qkv_conv; z and delta_out; beta_raw and decay_raw
    words += 2 * n * C + 2 * n * nv * uint64_t(c.d_v) + 2 * n * nv;
  if (c.n_full_layers() > 0 || use_mtp) {
    const uint64_t nh = uint64_t(c.n_heads), nkv = uint64_t(c.n_kv_heads),
                   hd = uint64_t(c.head_dim);
    const uint64_t q_row = (c.attn_gate ? 2 : 1) * nh * hd;
    words += n * q_row + 2 * n * nkv * hd + n * nh * hd;  // q_gate, k, v, attn_out
    words += n * nh * hd + n * nkv * hd;                  // q_tmp, k_tmp (normed and turned)
  }
  const uint64_t mlp_width = uint64_t(c.moe ? c.shared_intermediate : c.intermediate);
  words += 3 * n * mlp_width;  // mlp_gate, mlp_up, mlp_act (dense, or the shared expert)
  if (c.moe) {
    const uint64_t K = uint64_t(c.top_k), E = uint64_t(c.n_experts);
    words += n * E + 2 * n * K;                         // router logits, expert idx and weight
    words += 3 * n * K * uint64_t(c.moe_intermediate);  // every slot's gate, up and SwiGLU rows
    words += n * K * H;                                 // expert_out
    if (c.shared_intermediate > 0) words += n * H;      // shared_out
    if (shared_gate(w)) words += n;                     // shared_scale
  }
  words += n * V;  // logits, a row for every row
  if (use_mtp)     // the final-normed hidden rows, the head's input rows (cat, in, out), its
                   // tokens and its drafts' logits
    words += n * H + 2 * n * H + 2 * n * H + n + n * V;
  words += uint64_t(std::max<int64_t>(ctx, 0)) * uint64_t(c.rotary_dim);  // rotary (cos, sin)
  words += uint64_t(c.rotary_dim / 2);                                    // its pair axes
  words += seqs * blocks_per_seq;  // every sequence's block table
  p.workspace = words * 4;
  return p;
}

namespace {

// The largest x in [0, hi] with fits(x), fits being monotone (true up to some x, then false);
// fits(0) is taken as true.
int64_t largest(int64_t hi, const std::function<bool(int64_t)>& fits) {
  int64_t lo = 0;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace

int64_t fit_ctx(const model::ModelWeights& w, uint64_t budget, int64_t parallel, int64_t max_ctx,
                int64_t step_tokens, bool mtp, uint64_t part_limit, kernels::KvTypes kv_types) {
  const int64_t B = kernels::kKvBlock;
  return B * largest(max_ctx / B, [&](int64_t blocks) {
           return plan_device_memory(w, blocks * B, parallel, step_tokens, mtp, part_limit, kv_types)
                      .total() <= budget;
         });
}

int64_t fit_parallel(const model::ModelWeights& w, uint64_t budget, int64_t ctx,
                     int64_t max_parallel, int64_t step_tokens, bool mtp, uint64_t part_limit,
                     kernels::KvTypes kv_types) {
  return largest(max_parallel, [&](int64_t p) {
    return plan_device_memory(w, ctx, p, step_tokens, mtp, part_limit, kv_types).total() <= budget;
  });
}

uint64_t device_local_bytes(const vulkan::DeviceInfo& info) {
  uint64_t best = 0;
  for (const vulkan::MemoryHeap& h : info.heaps)
    if (h.device_local) best = std::max(best, h.bytes);
  return best;
}

core::Status check_fits(const DeviceMemoryPlan& plan, const vulkan::DeviceInfo& info) {
  const uint64_t have = device_local_bytes(info), need = plan.total();
  if (need <= have) return core::ok_status();
  const bool gib = std::max(need, have) >= (uint64_t(1) << 30);
  const double unit = gib ? 1073741824.0 : 1048576.0;
  const char* name = gib ? " GiB" : " MiB";
  // One decimal, more where the two totals would print the same.
  int d = 1;
  while (d < 4 && in_unit(need, unit, d) == in_unit(have, unit, d)) ++d;
  const std::string has =
      have == 0 ? " has no device-local memory" : " has " + in_unit(have, unit, d) + name;
  return core::error("[vulkan] the model needs " + in_unit(need, unit, d) + name +
                     " of device memory (weights " + in_unit(plan.weights, unit, d) + ", KV " +
                     in_unit(plan.kv, unit, d) + ", state " + in_unit(plan.state, unit, d) +
                     ", workspace " + in_unit(plan.workspace, unit, d) +
                     (plan.snapshots ? ", snapshots " + in_unit(plan.snapshots, unit, d) : "") +
                     ") but " + info.name + has);
}

std::string describe(const DeviceMemoryPlan& plan) {
  return "weights " + human(plan.weights) + ", KV " + human(plan.kv) + ", state " +
         human(plan.state) + ", workspace " + human(plan.workspace) +
         (plan.snapshots ? ", snapshots " + human(plan.snapshots) : "") + "; total " +
         human(plan.total());
}

}  // namespace qwen35::vkmodel
