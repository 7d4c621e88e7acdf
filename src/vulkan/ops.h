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

#include "vulkan/matrix.h"
#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// y[n, w.rows] = x[n, w.cols] · wᵀ (rows of x and y contiguous).
void record_matmul(Recorder& rec, const DeviceMatrix& w, const Binding& x, int64_t n, const Binding& y);
// out[n, table.cols] = rows `tokens` (int32 [n], each in [0, table.rows)) of the table.
void record_embed(Recorder& rec, const DeviceMatrix& table, const Binding& tokens, int64_t n, const Binding& out);
// out[n, dim] = x · rsqrt(mean(x²) + eps) · w
void record_rms_norm(Recorder& rec, const Binding& x, int64_t n, int64_t dim, const Binding& w, float eps,
                     const Binding& out);
// In place on x[n, dim]: x = x · rsqrt(mean(x²) + eps) · w · silu(z)
void record_gated_rms_norm(Recorder& rec, const Binding& x, const Binding& z, int64_t n, int64_t dim,
                           const Binding& w, float eps);
// out[n, dim] = silu(gate) · up over rows in_stride floats apart.
void record_swiglu(Recorder& rec, const Binding& gate, const Binding& up, int64_t n, int64_t dim,
                   int64_t in_stride, const Binding& out);
// y[n, dim] += s[t] · x (scale: a binding of n floats, or none: y += x).
void record_add_rows(Recorder& rec, const Binding& x, const Binding* scale, int64_t n, int64_t dim,
                     const Binding& y);

}  // namespace qwen35::vulkan
