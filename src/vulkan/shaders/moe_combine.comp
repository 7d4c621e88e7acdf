// The MoE expert combine (kernels/ops.h moe_combine): y[t, i] = Σ_j weight[t, j] · e[t, j, i] for
// j = 0..k-1 in order, from zero; one product and one sum per term, the reference's operations.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer E { float eo[]; };      // [n, k, dim]
layout(std430, binding = 1) readonly buffer W { float weight[]; };  // [n, k]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };      // [n, dim]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, k, dim;
} P;

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  const uint t = e / P.dim, i = e % P.dim;
  if (t >= P.n) return;
  precise float acc = 0.0;
  for (uint j = 0u; j < P.k; ++j) {
    precise float term = weight[t * P.k + j] * eo[(t * P.k + j) * P.dim + i];
    acc = acc + term;
  }
  y[e] = acc;
}
