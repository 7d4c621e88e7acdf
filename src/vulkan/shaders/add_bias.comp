// y[t, i] += bias[i] over y[n, dim]: one float add per element, the reference's bits.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer Y { float y[]; };
layout(std430, binding = 1) readonly buffer B { float bias[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
  uint dim;
} P;

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  const uint t = e / P.dim;
  if (t >= P.n) return;
  precise float v = y[e] + bias[e - t * P.dim];
  y[e] = v;
}
