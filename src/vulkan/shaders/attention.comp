// Attention of one sequence's rows over its paged fp32 cache (kernels/ops.h attention, after the
// QK-norm, RoPE and the cache writes, which vulkan/attention.cc records before it). One workgroup
// per (row, query head). Keys go in blocks of 64 on the absolute position grid, in order: per
// block, lane l scores key b0 + l (one fused multiply-add chain over head_dim), the block's
// maximum and sum of exponentials take the fixed trees of common.glsl, and lane l accumulates the
// values of dims d ≡ l (mod 64) over the block's keys in order, rescaled by the online softmax.
// A row's keys and their order are fixed by its position: the same bits in any batch or chunking.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };     // [n·nh, hd] normed, rotated
layout(std430, binding = 1) readonly buffer QG { float qg[]; };   // [n, nh, q_row]: the gates
layout(std430, binding = 2) readonly buffer K { float kp[]; };    // [blocks, 64, nkv·hd]
layout(std430, binding = 3) readonly buffer V { float vp[]; };    // [blocks, 64, nkv·hd]
layout(std430, binding = 4) readonly buffer T { int table[]; };   // logical → physical block
layout(std430, binding = 5) writeonly buffer O { float o[]; };    // [n, nh·hd]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, nh, nkv, hd, pos0, first_key, q_row, gated;
  float scale;
} P;

#include "common.glsl"

#define MAX_HD 256
#define PER_LANE 4  // MAX_HD / WG
shared float qv[MAX_HD];
shared float pr[WG];
shared float red[WG];

// The fixed tree over red[]: the maximum (take_max) or the sum; every lane gets the result.
float reduce(float v, uint l, bool take_max) {
  red[l] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s) {
      precise float r = take_max ? max(red[l], red[l + s]) : red[l] + red[l + s];
      red[l] = r;
    }
    barrier();
  }
  const float total = red[0];
  barrier();
  return total;
}

void main() {
  const uint g = P.base + gl_WorkGroupID.x;
  const uint t = g / P.nh, h = g % P.nh, l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // uniform over the workgroup
  const uint kh = h / (P.nh / P.nkv), row = P.nkv * P.hd, pos = P.pos0 + t;
  for (uint d = l; d < P.hd; d += WG) qv[d] = q[g * P.hd + d];
  barrier();
  const float neg_inf = uintBitsToFloat(0xFF800000u);
  float m = neg_inf;
  precise float lsum = 0.0;
  precise float acc[PER_LANE];
  for (uint i = 0u; i < PER_LANE; ++i) acc[i] = 0.0;
  for (uint b0 = (P.first_key / 64u) * 64u; b0 <= pos; b0 += 64u) {
    const uint blk = uint(table[b0 / 64u]);
    const uint j = b0 + l;
    const bool valid = j >= P.first_key && j <= pos;
    float s = neg_inf;
    if (valid) {
      precise float dot = 0.0;
      const uint kb = (blk * 64u + l) * row + kh * P.hd;
      for (uint d = 0u; d < P.hd; ++d) dot = fma(qv[d], kp[kb + d], dot);
      precise float sd = dot * P.scale;
      s = sd;
    }
    const float m_new = max(m, reduce(s, l, true));  // the block holds a valid key: finite
    const float alpha = exp_f(m - m_new);            // 0 for the first block (m = −inf)
    const float p = valid ? exp_f(s - m_new) : 0.0;
    pr[l] = p;
    const float bsum = reduce(p, l, false);  // its barriers also publish pr[]
    lsum = fma(lsum, alpha, bsum);
    m = m_new;
    for (uint i = 0u; i < PER_LANE; ++i) {
      const uint d = l + i * WG;
      if (d >= P.hd) break;
      precise float a = acc[i] * alpha;
      for (uint jj = 0u; jj < 64u; ++jj) {
        const uint key = b0 + jj;
        if (key < P.first_key || key > pos) continue;
        a = fma(pr[jj], vp[(blk * 64u + jj) * row + kh * P.hd + d], a);
      }
      acc[i] = a;
    }
    barrier();  // pr[] is rewritten by the next block
  }
  for (uint i = 0u; i < PER_LANE; ++i) {
    const uint d = l + i * WG;
    if (d >= P.hd) break;
    precise float r = div_rn(acc[i], lsum);
    if (P.gated != 0u) r = r * sigmoid_f(qg[(t * P.nh + h) * P.q_row + P.hd + d]);
    o[(t * P.nh + h) * P.hd + d] = r;
  }
}
