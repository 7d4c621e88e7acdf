// The vision tower's ops on the device (model/vision.h), recorded onto a Recorder like the
// text model's (vulkan/ops.h, whose exactness rules they keep: every output's arithmetic fixed by
// its own indices, reductions in a fixed order; within the CPU op tests' tolerances of the scalar
// reference). Shapes and math: kernels/ops.h layer_norm, add_bias, gelu, vision_kv_rows and
// vision_attend_rows.
#pragma once

#include <cstdint>

#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// out[n, dim] = (x − mean)/sqrt(var + eps)·w + b per row (population variance); out is not x.
void record_layer_norm(Recorder& rec, const Binding& x, int64_t n, int64_t dim, const Binding& w,
                       const Binding& b, float eps, const Binding& out);
// y[t, :] += bias over y[n, dim].
void record_add_bias(Recorder& rec, const Binding& y, int64_t n, int64_t dim, const Binding& bias);
// In place on x[n, dim]: GELU, the tanh form or the exact erf form.
void record_gelu(Recorder& rec, const Binding& x, int64_t n, int64_t dim, bool tanh_form);

// The bidirectional attention of one image in its two parts. head_dim: even, at most 256.
struct VisionShape {
  int64_t n_heads, head_dim;
};
// The keys of `rows` rows, rotated: qkv [rows, 3, nh, hd] (the fused projection with its bias),
// cos/sin [rows, hd/2] to kv [rows, nh, hd]. A caller covers an image's n rows in any ranges.
void record_vision_kv(Recorder& rec, const VisionShape& s, const Binding& qkv, int64_t rows,
                      const Binding& cos, const Binding& sin, const Binding& kv);
// Query rows [q0, q1) of the image's n rows: qkv [n, 3, nh, hd], cos/sin [n, hd/2], kv [n, nh,
// hd] (record_vision_kv's, all n rows) to out [q1 − q0, nh·hd] = softmax(q·kᵀ/√hd)·v.
void record_vision_attend(Recorder& rec, const VisionShape& s, const Binding& qkv, int64_t n,
                          const Binding& cos, const Binding& sin, const Binding& kv, int64_t q0,
                          int64_t q1, const Binding& out);

}  // namespace qwen35::vulkan
