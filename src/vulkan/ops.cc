#include "vulkan/ops.h"

#include <string>

#include "vulkan/instance.h"

namespace qwen35::vulkan {

namespace {

// The push-constant blocks of the shaders (src/vulkan/shaders/*.comp), member for member. Each
// begins with `base`, which Recorder::dispatch sets per dispatch.
struct MatmulPush {
  uint32_t base, n, rows, cols, y_col0, y_stride, x_stride, bits, group, sb_type, has_bias;
  int32_t zero;
};
struct EmbedPush {
  uint32_t base, n, rows, cols, row0, bits, group, sb_type, has_bias;
  int32_t zero;
};
struct NormPush {
  uint32_t base, n, dim;
  float eps;
  uint32_t gated;
};
struct SwigluPush {
  uint32_t base, n, dim, in_stride;
};
struct AddRowsPush {
  uint32_t base, n, dim, has_scale;
};

constexpr uint32_t kTokensPerGroup = 4;  // matmul.comp's TOK

uint32_t sb_code(core::DType t) {
  switch (t) {
    case core::DType::kF16: return 1;
    case core::DType::kBF16: return 2;
    default: return 0;
  }
}

uint64_t groups_for(uint64_t elements) { return (elements + kWorkgroup - 1) / kWorkgroup; }

// Sizes the shaders index with 32-bit words: every extent must fit.
bool fits32(Recorder& rec, const char* op, int64_t a, int64_t b) {
  if (a < 0 || b < 0 || uint64_t(a) * uint64_t(b) >= (1ull << 32)) {
    rec.fail(core::error(std::string("[vulkan] ") + op + ": " + std::to_string(a) + " × " + std::to_string(b) +
                         " elements exceed what one dispatch indexes"));
    return false;
  }
  return true;
}

std::string variant(const char* op, const DeviceMatrix& w) {
  const char* t = shader_type(w.type);
  return std::string(op) + "_" + (t ? t : "?");
}

}  // namespace

void record_matmul(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t n, const Binding& y) {
  if (n == 0) return;
  if (!fits32(rec, "matmul", n, w.cols) || !fits32(rec, "matmul", n, w.rows)) return;
  const uint64_t token_groups = (uint64_t(n) + kTokensPerGroup - 1) / kTokensPerGroup;
  if (token_groups > 0xFFFFFFFFull) return;
  const std::string shader = variant("matmul", w);
  for (const MatrixPart& p : w.parts) {
    MatmulPush pc{0, uint32_t(n), uint32_t(p.rows), uint32_t(w.cols), uint32_t(p.row0), uint32_t(w.rows),
                  uint32_t(w.cols), uint32_t(w.bits), uint32_t(w.group), sb_code(w.sb_type),
                  w.has_biases ? 1u : 0u, w.zero};
    if (w.type == kernels::WeightType::kAffine) {
      const Binding biases{w.has_biases ? &p.biases : &p.scales};  // unread without biases
      rec.dispatch(shader, {x, y, {&p.data}, {&p.scales}, biases}, &pc, sizeof pc, uint64_t(p.rows),
                   uint32_t(token_groups));
    } else {
      rec.dispatch(shader, {x, y, {&p.data}}, &pc, sizeof pc, uint64_t(p.rows), uint32_t(token_groups));
    }
  }
}

void record_embed(Recorder& rec, const DeviceMatrix& table, const Binding& tokens, int64_t n, const Binding& out) {
  if (n == 0 || !fits32(rec, "embed", n, table.cols)) return;
  const std::string shader = variant("embed", table);
  const uint64_t groups = groups_for(uint64_t(n) * uint64_t(table.cols));
  for (const MatrixPart& p : table.parts) {
    EmbedPush pc{0, uint32_t(n), uint32_t(p.rows), uint32_t(table.cols), uint32_t(p.row0), uint32_t(table.bits),
                 uint32_t(table.group), sb_code(table.sb_type), table.has_biases ? 1u : 0u, table.zero};
    if (table.type == kernels::WeightType::kAffine) {
      const Binding biases{table.has_biases ? &p.biases : &p.scales};
      rec.dispatch(shader, {tokens, out, {&p.data}, {&p.scales}, biases}, &pc, sizeof pc, groups);
    } else {
      rec.dispatch(shader, {tokens, out, {&p.data}}, &pc, sizeof pc, groups);
    }
  }
}

void record_rms_norm(Recorder& rec, const Binding& x, int64_t n, int64_t dim, const Binding& w, float eps,
                     const Binding& out) {
  if (n == 0 || !fits32(rec, "rms_norm", n, dim)) return;
  NormPush pc{0, uint32_t(n), uint32_t(dim), eps, 0};
  rec.dispatch("rms_norm", {x, w, out, x}, &pc, sizeof pc, uint64_t(n));
}

void record_gated_rms_norm(Recorder& rec, const Binding& x, const Binding& z, int64_t n, int64_t dim,
                           const Binding& w, float eps) {
  if (n == 0 || !fits32(rec, "gated_rms_norm", n, dim)) return;
  // In place: each workgroup reads its row whole (the sum of squares) before it writes it.
  NormPush pc{0, uint32_t(n), uint32_t(dim), eps, 1};
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
  rec.dispatch("add_rows", {x, scale ? *scale : x, y}, &pc, sizeof pc, groups_for(uint64_t(n) * uint64_t(dim)));
}

}  // namespace qwen35::vulkan
