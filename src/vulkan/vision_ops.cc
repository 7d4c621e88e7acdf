#include "vulkan/vision_ops.h"

#include <cmath>
#include <string>

#include "vulkan/dispatch_checks.h"
#include "vulkan/instance.h"

namespace qwen35::vulkan {

namespace {

// The push-constant blocks of the shaders, member for member; `base` is set per dispatch.
struct LayerNormPush {
  uint32_t base, n, dim;
  float eps;
};
struct BiasPush {
  uint32_t base, n, dim;
};
struct GeluPush {
  uint32_t base, count, tanh_form;
};
struct KvPush {
  uint32_t base, rows, nh, hd;
};
struct AttendPush {
  uint32_t base, n, nh, hd, q0, rows;
  float scale;
};

bool shape_ok(Recorder& rec, const VisionShape& s) {
  if (s.n_heads < 1 || s.head_dim < 2 || s.head_dim % 2 != 0 || s.head_dim > 256) {
    rec.fail(core::error("[vulkan] vision attention: " + std::to_string(s.n_heads) + " heads of " +
                         std::to_string(s.head_dim) + " (even, at most 256, on the device)"));
    return false;
  }
  return true;
}

}  // namespace

void record_layer_norm(Recorder& rec, const Binding& x, int64_t n, int64_t dim, const Binding& w,
                       const Binding& b, float eps, const Binding& out) {
  if (dim < 1) return rec.fail(core::error("[vulkan] layer_norm: rows of " + std::to_string(dim)));
  if (n == 0 || !fits32(rec, "layer_norm", n, dim)) return;
  LayerNormPush pc{0, uint32_t(n), uint32_t(dim), eps};
  rec.dispatch("layer_norm", {x, w, b, out}, &pc, sizeof pc, uint64_t(n));
}

void record_add_bias(Recorder& rec, const Binding& y, int64_t n, int64_t dim, const Binding& bias) {
  if (n == 0 || dim == 0 || !fits32(rec, "add_bias", n, dim)) return;
  BiasPush pc{0, uint32_t(n), uint32_t(dim)};
  rec.dispatch("add_bias", {y, bias}, &pc, sizeof pc, groups_for(uint64_t(n) * uint64_t(dim)));
}

void record_gelu(Recorder& rec, const Binding& x, int64_t n, int64_t dim, bool tanh_form) {
  if (n == 0 || dim == 0 || !fits32(rec, "gelu", n, dim)) return;
  GeluPush pc{0, uint32_t(n * dim), tanh_form ? 1u : 0u};
  rec.dispatch("gelu", {x}, &pc, sizeof pc, groups_for(uint64_t(n) * uint64_t(dim)));
}

void record_vision_kv(Recorder& rec, const VisionShape& s, const Binding& qkv, int64_t rows,
                      const Binding& cos, const Binding& sin, const Binding& kv) {
  if (!shape_ok(rec, s) || rows == 0 ||
      !fits32(rec, "vision attention", rows, 3 * s.n_heads * s.head_dim))
    return;
  KvPush pc{0, uint32_t(rows), uint32_t(s.n_heads), uint32_t(s.head_dim)};
  rec.dispatch("vision_kv", {qkv, cos, sin, kv}, &pc, sizeof pc,
               groups_for(uint64_t(rows) * uint64_t(s.n_heads * s.head_dim)));
}

void record_vision_attend(Recorder& rec, const VisionShape& s, const Binding& qkv, int64_t n,
                          const Binding& cos, const Binding& sin, const Binding& kv, int64_t q0,
                          int64_t q1, const Binding& out) {
  if (!shape_ok(rec, s)) return;
  if (q0 < 0 || q0 > q1 || q1 > n)
    return rec.fail(core::error("[vulkan] vision attention: query rows [" + std::to_string(q0) +
                                ", " + std::to_string(q1) + ") of " + std::to_string(n)));
  if (q0 == q1 || !fits32(rec, "vision attention", n, 3 * s.n_heads * s.head_dim)) return;
  // The reference's scale: 1/√hd in double, rounded once.
  AttendPush pc{0,
                uint32_t(n),
                uint32_t(s.n_heads),
                uint32_t(s.head_dim),
                uint32_t(q0),
                uint32_t(q1 - q0),
                float(1.0 / std::sqrt(double(s.head_dim)))};
  rec.dispatch("vision_attend", {qkv, cos, sin, kv, out}, &pc, sizeof pc,
               uint64_t(q1 - q0) * uint64_t(s.n_heads));
}

}  // namespace qwen35::vulkan
