// The device's ops, recorded onto a Recorder (nothing runs until its submit()). Each is the
// math of the op of the same name in kernels/ops.h, on fp32 activations in device buffers, with
// the weights in their stored type (vulkan/matrix.h); shapes as there.
//
// Exactness (docs/design.md "Vulkan backend"): every output element's arithmetic is fixed by
// its own indices: the same on one row alone or among many, in one dispatch or several, in any
// binding part. Results need not equal the CPU's bits; they are within the CPU op tests'
// tolerances of the scalar reference.
//
// A bad shape records an error on the recorder (Recorder::status), which its submit() returns.
#pragma once

#include <cstdint>
#include <vector>

#include "vulkan/matrix.h"
#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// y[n, w.rows] = x[n, w.cols] · wᵀ (rows of x and y contiguous).
void record_matmul(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t n,
                   const Binding& y);
// The MoE experts' matmul: for the slots s < slots (slot s of token row s / topk) whose
// slot_expert[s] (int32 [slots]) is `expert`, y[s, :] = x[s / topk, :] · wᵀ, w being that
// expert's matrix; the other slots of y are left as they are (the other experts write them).
// After one dispatch per expert every slot is written, each with the bits record_matmul gives
// its row alone. (Every expert's workgroups visit every slot: a device-side grouping with
// indirect dispatches is the faster form to come.)
void record_matmul_indexed(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t slots,
                           int64_t topk, const Binding& slot_expert, int32_t expert,
                           const Binding& y);
// out[n, table.cols] = rows `tokens` (int32 [n], each in [0, table.rows)) of the table.
void record_embed(Recorder& rec, const DeviceMatrix& table, const Binding& tokens, int64_t n,
                  const Binding& out);
// out[n, dim] = x · rsqrt(mean(x²) + eps) · w
void record_rms_norm(Recorder& rec, const Binding& x, int64_t n, int64_t dim, const Binding& w,
                     float eps, const Binding& out);
// The same over rows of dim floats that lie x_stride (in x) and out_stride (in out) floats apart.
void record_rms_norm_rows(Recorder& rec, const Binding& x, int64_t n, int64_t dim, int64_t x_stride,
                          const Binding& w, float eps, const Binding& out, int64_t out_stride);
// In place on x[n, dim]: x = x · rsqrt(mean(x²) + eps) · w · silu(z)
void record_gated_rms_norm(Recorder& rec, const Binding& x, const Binding& z, int64_t n,
                           int64_t dim, const Binding& w, float eps);
// out[n, dim] = silu(gate) · up over rows in_stride floats apart.
void record_swiglu(Recorder& rec, const Binding& gate, const Binding& up, int64_t n, int64_t dim,
                   int64_t in_stride, const Binding& out);
// y[n, dim] += s[t] · x (scale: a binding of n floats, or none: y += x).
void record_add_rows(Recorder& rec, const Binding& x, const Binding* scale, int64_t n, int64_t dim,
                     const Binding& y);

// In place: x[i] = 1 / (1 + e^(−x[i])) over n values (the shared expert's gate).
void record_sigmoid(Recorder& rec, const Binding& x, int64_t n);

// MoE router: softmax over logits [n, n_experts] (at most 1024), the top k (at most 64; ties to
// the lower index), renormalized over them when asked: idx int32 [n, k], weight [n, k].
void record_router_topk(Recorder& rec, const Binding& logits, int64_t n, int64_t n_experts,
                        int64_t k, bool renormalize, const Binding& idx, const Binding& weight);
// y[n, dim] = Σ_j weight[t, j] · expert_out[t, j, :] in order from zero (expert_out [n, k, dim]).
void record_moe_combine(Recorder& rec, const Binding& expert_out, const Binding& weight, int64_t n,
                        int64_t k, int64_t dim, const Binding& y);

// Depthwise causal conv1d + SiLU of one sequence: x [n, channels], w [channels, kernel] (kernel
// 1..16), state [kernel-1, channels] read and updated, out [n, channels].
void record_conv1d_silu(Recorder& rec, const Binding& x, int64_t n, int64_t channels,
                        const Binding& w, int64_t kernel, const Binding& state, const Binding& out);

// The rotary table of positions [0, rows): [rows, rotary_dim/2] pairs (cos, sin), the floats
// kernels::apply_rope computes for each angle (in double, then rounded), for record_rope.
std::vector<float> rope_table(double theta, int64_t rotary_dim, int64_t rows);
// RoPE in place on x [n, heads] rows of `head_stride` floats (the first rotary_dim of each
// turned): positions int32 [n, 3] (temporal, height, width; each in [0, table rows)), pair_axis
// uint32 [rotary_dim/2] (null: the temporal axis for every pair), table from rope_table.
void record_rope(Recorder& rec, const Binding& x, int64_t n, int64_t heads, int64_t head_stride,
                 int64_t rotary_dim, const Binding& positions, const Binding* pair_axis,
                 const Binding& table, int64_t table_rows);

// The gated delta rule's recurrent form over the n rows of one sequence (kernels::Ops::gated_delta
// with chunked false; d_k at most 256). Bindings: qkv [n, 2·nk·dk + nv·dv] after the conv, a and
// b [n, nv], decay and dt_bias [nv], state [nv, dk, dv] (updated; with state_in, first copied
// from there, which is left as it was), out [n, nv, dv].
struct DeltaShape {
  int64_t n_k_heads, n_v_heads, d_k, d_v;
  bool tiled_v_heads = false;
};
void record_delta_step(Recorder& rec, const DeltaShape& p, const Binding& qkv, const Binding& a,
                       const Binding& b, int64_t n, const Binding& decay, const Binding& dt_bias,
                       const Binding* state_in, const Binding& state, const Binding& out);
// The chunked (UT) form over one piece of n ≤ 64 rows (chunked true; the model cuts pieces on
// the absolute 64-grid), the same bindings without state_in (shaders/delta_chunk.comp).
void record_delta_chunk(Recorder& rec, const DeltaShape& p, const Binding& qkv, const Binding& a,
                        const Binding& b, int64_t n, const Binding& decay, const Binding& dt_bias,
                        const Binding& state, const Binding& out);

}  // namespace qwen35::vulkan
