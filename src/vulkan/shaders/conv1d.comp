// Depthwise causal conv1d + SiLU of one sequence (kernels/ops.h conv1d_silu): one invocation per
// channel walks the sequence's rows in order with a window of the last kernel-1 inputs, starting
// from `state` and leaving the last kernel-1 inputs there. Each output is one fused multiply-add
// chain over the taps, oldest first: its bits depend on its window alone, so 4 rows then 5 with
// the carried state are 9 rows at once.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) buffer S { float state[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
  uint channels;
  uint kernel;  // 1..16 (checked by the host)
} P;

#include "common.glsl"

#define MAX_TAPS 16

void main() {
  const uint c = (P.base + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
  if (c >= P.channels) return;
  const uint C = P.channels, K1 = P.kernel - 1u;
  float win[MAX_TAPS];
  for (uint r = 0u; r < K1; ++r) win[r] = state[r * C + c];
  for (uint t = 0u; t < P.n; ++t) {
    const float xt = x[t * C + c];
    precise float acc = 0.0;
    for (uint j = 0u; j < K1; ++j) acc = fma(w[c * P.kernel + j], win[j], acc);
    acc = fma(w[c * P.kernel + K1], xt, acc);
    o[t * C + c] = silu_f(acc);
    for (uint j = 0u; j + 1u < K1; ++j) win[j] = win[j + 1u];
    if (K1 > 0u) win[K1 - 1u] = xt;
  }
  for (uint r = 0u; r < K1; ++r) state[r * C + c] = win[r];
}
