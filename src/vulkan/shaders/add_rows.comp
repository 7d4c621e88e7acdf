// y[t, :] += s[t] · x[t, :] (has_scale), else y += x: the reference's float operations, one
// product and one sum per element, so the bits are the reference's.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer S { float s[]; };
layout(std430, binding = 2) buffer Y { float y[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
  uint dim;
  uint has_scale;
} P;

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  const uint t = e / P.dim;
  if (t >= P.n) return;
  precise float a = P.has_scale != 0u ? s[t] * x[e] : x[e];
  precise float v = y[e] + a;
  y[e] = v;
}
