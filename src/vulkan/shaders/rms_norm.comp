// out[t, :] = x[t, :] · rsqrt(mean(x[t, :]²) + eps) · w, and with `gated` (the GDN output norm)
// · silu(z[t, :]); one workgroup per row. Rows of x (and z) lie x_stride floats apart, rows of out
// o_stride apart (the attention's per-head QK-norm reads query rows inside the query|gate rows). The sum of squares runs in the fixed order of
// common.glsl (lanes k ≡ l mod 64, then the halving tree): a row's bits depend on the row alone.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };
layout(std430, binding = 3) readonly buffer Z { float z[]; };

layout(push_constant) uniform Push {
  uint base;  // first row of this dispatch
  uint n;
  uint dim;
  float eps;
  uint gated;
  uint x_stride, o_stride;
} P;

#include "common.glsl"

shared float part[WG];

void main() {
  const uint t = P.base + gl_WorkGroupID.x;
  const uint l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // the whole workgroup: t is uniform
  const uint row = t * P.x_stride, orow = t * P.o_stride;
  precise float acc = 0.0;
  for (uint k = l; k < P.dim; k += WG) acc = fma(x[row + k], x[row + k], acc);
  part[l] = acc;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s) {
      precise float v = part[l] + part[l + s];
      part[l] = v;
    }
    barrier();
  }
  precise float mean = div_rn(part[0], float(P.dim)) + P.eps;
  const float inv = rsqrt_f(mean);
  for (uint k = l; k < P.dim; k += WG) {
    precise float v = x[row + k] * inv * w[k];
    if (P.gated != 0u) v = v * silu_f(z[row + k]);
    o[orow + k] = v;
  }
}
