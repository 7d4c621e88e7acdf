// out[t, :] = (x[t, :] − mean)·rsqrt(var + eps)·w + b (population variance, two passes); one
// workgroup per row. Both sums run in the fixed order of common.glsl (lanes k ≡ l mod 64 in
// increasing k, then the halving tree): a row's bits depend on the row alone.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) readonly buffer B { float b[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
  uint base;  // first row of this dispatch
  uint n;
  uint dim;
  float eps;
} P;

#include "common.glsl"

shared float part[WG];

// The fixed tree over part[]; every lane gets the total.
float tree_sum(float v, uint l) {
  part[l] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s) {
      precise float r = part[l] + part[l + s];
      part[l] = r;
    }
    barrier();
  }
  const float total = part[0];
  barrier();
  return total;
}

void main() {
  const uint t = P.base + gl_WorkGroupID.x;
  const uint l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // the whole workgroup: t is uniform
  const uint row = t * P.dim;
  precise float acc = 0.0;
  for (uint k = l; k < P.dim; k += WG) acc += x[row + k];
  const float mean = div_rn(tree_sum(acc, l), float(P.dim));
  precise float sq = 0.0;
  for (uint k = l; k < P.dim; k += WG) {
    precise float c = x[row + k] - mean;
    sq = fma(c, c, sq);
  }
  precise float var = div_rn(tree_sum(sq, l), float(P.dim)) + P.eps;
  const float inv = rsqrt_f(var);
  for (uint k = l; k < P.dim; k += WG) {
    precise float c = x[row + k] - mean;
    precise float v = fma(c, inv * w[k], b[k]);
    o[row + k] = v;
  }
}
