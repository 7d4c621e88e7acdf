// The Vulkan executor's vision tower ops (vkmodel/vulkan_executor.h, vulkan/vision_ops.h): each
// binds the twins of its host ranges and records the op, as the text model's ops do.
#include <algorithm>
#include <string>

#include "vkmodel/vulkan_executor.h"
#include "vulkan/vision_ops.h"

namespace qwen35::vkmodel {

using vulkan::Binding;

namespace {
// Bytes of n floats (a name of its own: the layer compiles as one unit).
uint64_t float_bytes(int64_t n) { return uint64_t(std::max<int64_t>(n, 0)) * 4; }
}  // namespace

void VulkanExecutor::layer_norm(const float* x, int64_t n, int64_t dim, const float* w,
                                const float* b, float eps, float* out) {
  if (n == 0) return;
  need({{x, float_bytes(n * dim)}, {out, float_bytes(n * dim)}});
  vulkan::record_layer_norm(rec(), in(x, float_bytes(n * dim)), n, dim, in(w, float_bytes(dim)),
                            in(b, float_bytes(dim)), eps, this->out(out, float_bytes(n * dim)));
  done();
}

void VulkanExecutor::gelu(float* x, int64_t n, int64_t dim, bool tanh_form) {
  if (n == 0) return;
  vulkan::record_gelu(rec(), inout(x, float_bytes(n * dim)), n, dim, tanh_form);
  done();
}

void VulkanExecutor::add_bias(float* y, int64_t n, int64_t dim, const float* bias) {
  if (n == 0) return;
  need({{y, float_bytes(n * dim)}});
  vulkan::record_add_bias(rec(), inout(y, float_bytes(n * dim)), n, dim,
                          in(bias, float_bytes(dim)));
  done();
}

size_t VulkanExecutor::vision_kv_floats(const kernels::Ops::VisionAttentionParams& p,
                                        int64_t n) const {
  return size_t(std::max<int64_t>(n, 0) * p.n_heads * p.head_dim);
}

void VulkanExecutor::vision_kv_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv,
                                    int64_t n, const float* cos, const float* sin, int64_t r0,
                                    int64_t r1, float* kv) {
  if (r0 < 0 || r0 > r1 || r1 > n)
    return rec().fail(core::error("[vulkan] vision keys: rows [" + std::to_string(r0) + ", " +
                                  std::to_string(r1) + ") of " + std::to_string(n)));
  if (r0 == r1) return;
  const int64_t W = p.n_heads * p.head_dim, half = p.head_dim / 2, m = r1 - r0;
  const float *q = qkv + r0 * 3 * W, *c = cos + r0 * half, *s = sin + r0 * half;
  float* k = kv + r0 * W;
  need({{q, float_bytes(m * 3 * W)},
        {c, float_bytes(m * half)},
        {s, float_bytes(m * half)},
        {k, float_bytes(m * W)}});
  vulkan::record_vision_kv(rec(), {p.n_heads, p.head_dim}, in(q, float_bytes(m * 3 * W)), m,
                           in(c, float_bytes(m * half)), in(s, float_bytes(m * half)),
                           out(k, float_bytes(m * W)));
  done();
}

void VulkanExecutor::vision_attend_rows(const kernels::Ops::VisionAttentionParams& p,
                                        const float* qkv, int64_t n, const float* cos,
                                        const float* sin, const float* kv, int64_t q0, int64_t q1,
                                        float* out) {
  if (q0 == q1 || n == 0) return;
  const int64_t W = p.n_heads * p.head_dim, half = p.head_dim / 2;
  need({{qkv, float_bytes(n * 3 * W)},
        {cos, float_bytes(n * half)},
        {sin, float_bytes(n * half)},
        {kv, float_bytes(n * W)},
        {out, float_bytes((q1 - q0) * W)}});
  vulkan::record_vision_attend(rec(), {p.n_heads, p.head_dim}, in(qkv, float_bytes(n * 3 * W)), n,
                               in(cos, float_bytes(n * half)), in(sin, float_bytes(n * half)),
                               in(kv, float_bytes(n * W)), q0, q1,
                               this->out(out, float_bytes(std::max<int64_t>(q1 - q0, 0) * W)));
  done();
}

}  // namespace qwen35::vkmodel
