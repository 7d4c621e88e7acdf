#include "vulkan/ops.h"

#include <cmath>
#include <string>

#include "vulkan/dispatch_checks.h"
#include "vulkan/instance.h"

namespace qwen35::vulkan {

namespace {

// The push-constant blocks of the shaders (src/vulkan/shaders/*.comp), member for member. Each
// begins with `base`, which Recorder::dispatch sets per dispatch.
struct MatmulPush {
  uint32_t base, n, rows, cols, y_col0, y_stride, x_stride, bits, group, sb_type, has_bias;
  int32_t zero;
  uint32_t expert, topk;  // matmul_id only
};
struct EmbedPush {
  uint32_t base, n, rows, cols, row0, bits, group, sb_type, has_bias;
  int32_t zero;
};
struct NormPush {
  uint32_t base, n, dim;
  float eps;
  uint32_t gated, x_stride, o_stride;
};
struct SwigluPush {
  uint32_t base, n, dim, in_stride;
};
struct AddRowsPush {
  uint32_t base, n, dim, has_scale;
};
struct RouterPush {
  uint32_t base, n, ne, k, renorm;
};
struct CombinePush {
  uint32_t base, n, k, dim;
};
struct ConvPush {
  uint32_t base, n, channels, kernel;
};
struct RopePush {
  uint32_t base, n, heads, head_stride, rotary_dim, table_rows, has_axis;
};
struct DeltaPush {
  uint32_t base, n, nk, nv, dk, dv, tiled;
  float qscale;
};

constexpr uint32_t kTokensPerGroup = 8;  // matmul.comp's TOK
constexpr uint32_t kRowsPerGroup = 8;    // matmul.comp's ROWS
constexpr uint32_t kRowsPerGemvGroup = 64;  // matmul.comp's ROWS with GEMV (TOK 1)

uint32_t sb_code(core::DType t) {
  switch (t) {
    case core::DType::kF16:
      return 1;
    case core::DType::kBF16:
      return 2;
    default:
      return 0;
  }
}

std::string variant(const char* op, const DeviceMatrix& w) {
  const char* t = shader_type(w.type);
  return std::string(op) + "_" + (t ? t : "?");
}

}  // namespace

namespace {
// record_matmul, and with slot_expert record_matmul_indexed (n: slots).
void matmul_parts(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t n,
                  const Binding* slot_expert, int32_t expert, int64_t topk, const Binding& y) {
  if (n == 0) return;
  if (!fits32(rec, "matmul", n, w.cols) || !fits32(rec, "matmul", n, w.rows)) return;
  // Fewer than 8 token rows: the GEMV variant, whose outputs have the same arithmetic.
  const bool gemv = !slot_expert && uint64_t(n) < kTokensPerGroup;
  const uint64_t token_groups = gemv ? uint64_t(n) : (uint64_t(n) + kTokensPerGroup - 1) / kTokensPerGroup;
  const uint64_t rows_per_group = gemv ? kRowsPerGemvGroup : kRowsPerGroup;
  const std::string shader = variant(slot_expert ? "matmul_id" : gemv ? "matmulv" : "matmul", w);
  for (const MatrixPart& p : w.parts) {
    const uint64_t row_groups = (uint64_t(p.rows) + rows_per_group - 1) / rows_per_group;
    MatmulPush pc{0,
                  uint32_t(n),
                  uint32_t(p.rows),
                  uint32_t(w.cols),
                  uint32_t(p.row0),
                  uint32_t(w.rows),
                  uint32_t(w.cols),
                  uint32_t(w.bits),
                  uint32_t(w.group),
                  sb_code(w.sb_type),
                  w.has_biases ? 1u : 0u,
                  w.zero,
                  uint32_t(expert),
                  uint32_t(topk)};
    const bool affine = w.type == kernels::WeightType::kAffine;
    const Binding biases{w.has_biases ? &p.biases : &p.scales};  // unread without biases
    if (has_grid(w.type) && slot_expert)
      rec.dispatch(shader, {x, y, {&p.data}, {&w.grid}, *slot_expert}, &pc, sizeof pc,
                   row_groups, uint32_t(token_groups));
    else if (has_grid(w.type))
      rec.dispatch(shader, {x, y, {&p.data}, {&w.grid}}, &pc, sizeof pc, row_groups,
                   uint32_t(token_groups));
    else if (affine && slot_expert)
      rec.dispatch(shader, {x, y, {&p.data}, {&p.scales}, biases, *slot_expert}, &pc, sizeof pc,
                   row_groups, uint32_t(token_groups));
    else if (affine)
      rec.dispatch(shader, {x, y, {&p.data}, {&p.scales}, biases}, &pc, sizeof pc, row_groups,
                   uint32_t(token_groups));
    else if (slot_expert)
      rec.dispatch(shader, {x, y, {&p.data}, *slot_expert}, &pc, sizeof pc, row_groups,
                   uint32_t(token_groups));
    else
      rec.dispatch(shader, {x, y, {&p.data}}, &pc, sizeof pc, row_groups,
                   uint32_t(token_groups));
  }
}
}  // namespace

void record_matmul(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t n,
                   const Binding& y) {
  matmul_parts(rec, w, x, n, nullptr, 0, 1, y);
}

void record_matmul_indexed(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t slots,
                           int64_t topk, const Binding& slot_expert, int32_t expert,
                           const Binding& y) {
  if (topk < 1 || slots % topk != 0)
    return rec.fail(core::error("[vulkan] matmul_id: " + std::to_string(slots) + " slots of top " +
                                std::to_string(topk)));
  matmul_parts(rec, w, x, slots, &slot_expert, expert, topk, y);
}

void record_embed(Recorder& rec, const DeviceMatrix& table, const Binding& tokens, int64_t n,
                  const Binding& out) {
  if (n == 0 || !fits32(rec, "embed", n, table.cols)) return;
  const std::string shader = variant("embed", table);
  const uint64_t groups = groups_for(uint64_t(n) * uint64_t(table.cols));
  for (const MatrixPart& p : table.parts) {
    EmbedPush pc{0,
                 uint32_t(n),
                 uint32_t(p.rows),
                 uint32_t(table.cols),
                 uint32_t(p.row0),
                 uint32_t(table.bits),
                 uint32_t(table.group),
                 sb_code(table.sb_type),
                 table.has_biases ? 1u : 0u,
                 table.zero};
    if (table.type == kernels::WeightType::kAffine) {
      const Binding biases{table.has_biases ? &p.biases : &p.scales};
      rec.dispatch(shader, {tokens, out, {&p.data}, {&p.scales}, biases}, &pc, sizeof pc, groups);
    } else if (has_grid(table.type)) {
      rec.dispatch(shader, {tokens, out, {&p.data}, {&table.grid}}, &pc, sizeof pc, groups);
    } else {
      rec.dispatch(shader, {tokens, out, {&p.data}}, &pc, sizeof pc, groups);
    }
  }
}

void record_rms_norm(Recorder& rec, const Binding& x, int64_t n, int64_t dim, const Binding& w,
                     float eps, const Binding& out) {
  record_rms_norm_rows(rec, x, n, dim, dim, w, eps, out, dim);
}

void record_rms_norm_rows(Recorder& rec, const Binding& x, int64_t n, int64_t dim, int64_t x_stride,
                          const Binding& w, float eps, const Binding& out, int64_t out_stride) {
  if (n == 0 || !fits32(rec, "rms_norm", n, x_stride > out_stride ? x_stride : out_stride)) return;
  if (dim < 1 || x_stride < dim || out_stride < dim)
    return rec.fail(core::error("[vulkan] rms_norm: rows of " + std::to_string(dim) +
                                " at strides " + std::to_string(x_stride) + " and " +
                                std::to_string(out_stride)));
  NormPush pc{0, uint32_t(n), uint32_t(dim), eps, 0, uint32_t(x_stride), uint32_t(out_stride)};
  rec.dispatch("rms_norm", {x, w, out, x}, &pc, sizeof pc, uint64_t(n));
}

void record_gated_rms_norm(Recorder& rec, const Binding& x, const Binding& z, int64_t n,
                           int64_t dim, const Binding& w, float eps) {
  if (n == 0 || !fits32(rec, "gated_rms_norm", n, dim)) return;
  // In place: each workgroup reads its row whole (the sum of squares) before it writes it.
  NormPush pc{0, uint32_t(n), uint32_t(dim), eps, 1, uint32_t(dim), uint32_t(dim)};
  rec.dispatch("rms_norm", {x, w, x, z}, &pc, sizeof pc, uint64_t(n));
}

void record_swiglu(Recorder& rec, const Binding& gate, const Binding& up, int64_t n, int64_t dim,
                   int64_t in_stride, const Binding& out) {
  if (n == 0 || dim == 0 || !fits32(rec, "swiglu", n, in_stride > dim ? in_stride : dim)) return;
  SwigluPush pc{0, uint32_t(n), uint32_t(dim), uint32_t(in_stride)};
  rec.dispatch("swiglu", {gate, up, out}, &pc, sizeof pc, groups_for(uint64_t(n) * uint64_t(dim)));
}

void record_add_rows(Recorder& rec, const Binding& x, const Binding* scale, int64_t n, int64_t dim,
                     const Binding& y) {
  if (n == 0 || dim == 0 || !fits32(rec, "add_rows", n, dim)) return;
  AddRowsPush pc{0, uint32_t(n), uint32_t(dim), scale ? 1u : 0u};
  rec.dispatch("add_rows", {x, scale ? *scale : x, y}, &pc, sizeof pc,
               groups_for(uint64_t(n) * uint64_t(dim)));
}

void record_sigmoid(Recorder& rec, const Binding& x, int64_t n) {
  if (n == 0 || !fits32(rec, "sigmoid", n, 1)) return;
  const uint32_t pc[2] = {0, uint32_t(n)};
  rec.dispatch("sigmoid", {x}, pc, sizeof pc, groups_for(uint64_t(n)));
}

void record_router_topk(Recorder& rec, const Binding& logits, int64_t n, int64_t n_experts,
                        int64_t k, bool renormalize, const Binding& idx, const Binding& weight) {
  if (n_experts < 1 || n_experts > 1024 || k < 1 || k > 64 || k > n_experts)
    return rec.fail(core::error("[vulkan] router: top " + std::to_string(k) + " of " +
                                std::to_string(n_experts) +
                                " experts (at most 64 of 1024 on the device)"));
  if (n == 0 || !fits32(rec, "router", n, n_experts)) return;
  RouterPush pc{0, uint32_t(n), uint32_t(n_experts), uint32_t(k), renormalize ? 1u : 0u};
  rec.dispatch("router", {logits, idx, weight}, &pc, sizeof pc, uint64_t(n));
}

void record_moe_combine(Recorder& rec, const Binding& expert_out, const Binding& weight, int64_t n,
                        int64_t k, int64_t dim, const Binding& y) {
  if (n == 0 || dim == 0 || k < 1 || !fits32(rec, "moe_combine", n * k, dim)) return;
  CombinePush pc{0, uint32_t(n), uint32_t(k), uint32_t(dim)};
  rec.dispatch("moe_combine", {expert_out, weight, y}, &pc, sizeof pc,
               groups_for(uint64_t(n) * uint64_t(dim)));
}

void record_conv1d_silu(Recorder& rec, const Binding& x, int64_t n, int64_t channels,
                        const Binding& w, int64_t kernel, const Binding& state,
                        const Binding& out) {
  if (kernel < 1 || kernel > 16)
    return rec.fail(core::error("[vulkan] conv1d: a kernel of " + std::to_string(kernel) +
                                " taps (1..16 on the device)"));
  if (n == 0 || !fits32(rec, "conv1d", n, channels) || !fits32(rec, "conv1d", kernel, channels))
    return;
  ConvPush pc{0, uint32_t(n), uint32_t(channels), uint32_t(kernel)};
  // A kernel of one tap keeps no state: its binding is never read.
  rec.dispatch("conv1d", {x, w, kernel > 1 ? state : x, out}, &pc, sizeof pc,
               groups_for(uint64_t(channels)));
}

std::vector<float> rope_table(double theta, int64_t rotary_dim, int64_t rows) {
  const int64_t half = rotary_dim / 2;
  std::vector<float> t(size_t(rows * half * 2));
  for (int64_t i = 0; i < half; ++i) {
    // kernels/rope.h's expressions, so each angle rounds to the same floats.
    const double inv_freq = std::pow(theta, -double(2 * i) / double(rotary_dim));
    for (int64_t p = 0; p < rows; ++p) {
      const double ang = double(p) * inv_freq;
      t[size_t((p * half + i) * 2)] = float(std::cos(ang));
      t[size_t((p * half + i) * 2 + 1)] = float(std::sin(ang));
    }
  }
  return t;
}

void record_rope(Recorder& rec, const Binding& x, int64_t n, int64_t heads, int64_t head_stride,
                 int64_t rotary_dim, const Binding& positions, const Binding* pair_axis,
                 const Binding& table, int64_t table_rows) {
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_stride || table_rows < 1)
    return rec.fail(core::error("[vulkan] rope: rotary_dim " + std::to_string(rotary_dim) +
                                " over rows of " + std::to_string(head_stride) +
                                " with a table of " + std::to_string(table_rows) + " positions"));
  if (n == 0 || heads == 0 || !fits32(rec, "rope", n * heads, head_stride)) return;
  RopePush pc{0,
              uint32_t(n),
              uint32_t(heads),
              uint32_t(head_stride),
              uint32_t(rotary_dim),
              uint32_t(table_rows),
              pair_axis ? 1u : 0u};
  rec.dispatch("rope", {x, positions, pair_axis ? *pair_axis : positions, table}, &pc, sizeof pc,
               groups_for(uint64_t(n * heads) * uint64_t(rotary_dim / 2)));
}

namespace {
void record_delta(Recorder& rec, const DeltaShape& p, const Binding& qkv, const Binding& a,
                  const Binding& b, int64_t n, const Binding& decay, const Binding& dt_bias,
                  const Binding* state_in, const Binding& state, const Binding& out, bool chunked) {
  const int64_t nk = p.n_k_heads, nv = p.n_v_heads, dk = p.d_k, dv = p.d_v;
  if (nk < 1 || nv < 1 || nv % nk != 0 || dk < 1 || dk > 256 || dv < 1)
    return rec.fail(core::error("[vulkan] delta rule: " + std::to_string(nk) + " key heads, " +
                                std::to_string(nv) + " value heads, d_k " + std::to_string(dk) +
                                " (at most 256), d_v " + std::to_string(dv)));
  if (chunked && n > 64)
    return rec.fail(
        core::error("[vulkan] delta rule: a chunk of " + std::to_string(n) + " rows (at most 64)"));
  if (n == 0 || !fits32(rec, "delta rule", n, 2 * nk * dk + nv * dv) ||
      !fits32(rec, "delta rule", nv * dk, dv))
    return;
  if (state_in) rec.copy(*state_in, state, uint64_t(nv * dk * dv) * 4);
  // The reference's scale: dk^-0.5 in double, rounded once.
  DeltaPush pc{0,
               uint32_t(n),
               uint32_t(nk),
               uint32_t(nv),
               uint32_t(dk),
               uint32_t(dv),
               p.tiled_v_heads ? 1u : 0u,
               float(1.0 / std::sqrt(double(dk)))};
  const uint64_t blocks = (uint64_t(dv) + kWorkgroup - 1) / kWorkgroup;
  rec.dispatch(chunked ? "delta_chunk" : "delta_step", {qkv, a, b, decay, dt_bias, state, out}, &pc,
               sizeof pc, uint64_t(nv) * blocks);
}
}  // namespace

void record_delta_step(Recorder& rec, const DeltaShape& p, const Binding& qkv, const Binding& a,
                       const Binding& b, int64_t n, const Binding& decay, const Binding& dt_bias,
                       const Binding* state_in, const Binding& state, const Binding& out) {
  record_delta(rec, p, qkv, a, b, n, decay, dt_bias, state_in, state, out, false);
}

void record_delta_chunk(Recorder& rec, const DeltaShape& p, const Binding& qkv, const Binding& a,
                        const Binding& b, int64_t n, const Binding& decay, const Binding& dt_bias,
                        const Binding& state, const Binding& out) {
  record_delta(rec, p, qkv, a, b, n, decay, dt_bias, nullptr, state, out, true);
}

}  // namespace qwen35::vulkan
