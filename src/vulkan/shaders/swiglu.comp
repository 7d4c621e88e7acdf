// out[t, i] = silu(gate[t, i]) · up[t, i] over rows of width dim (input rows `in_stride` apart).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer G { float g[]; };
layout(std430, binding = 1) readonly buffer U { float u[]; };
layout(std430, binding = 2) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
  uint dim;
  uint in_stride;
} P;

#include "common.glsl"

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
  const uint t = e / P.dim, i = e % P.dim;
  if (t >= P.n) return;
  const uint at = t * P.in_stride + i;
  precise float v = silu_f(g[at]) * u[at];
  o[t * P.dim + i] = v;
}
