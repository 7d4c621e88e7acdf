// The vision tower's bidirectional attention (kernels/ops.h vision_attend_rows): query rows
// [q0, q1) of one image against all its n rows. One workgroup per (query row, head). The query is
// turned by its row's cos/sin (rotate-half) into shared memory; keys (kv: vision_kv.comp's rotated
// rows) go in blocks of 64 in order: lane l scores key b0 + l (one fused multiply-add chain over
// head_dim, then · 1/√hd), the block's maximum and sum of exponentials take common.glsl's fixed
// trees, and lane l accumulates the values of dims d ≡ l (mod 64) over the block's keys in
// order, rescaled by the online softmax. A row's arithmetic is fixed by its own index: the same
// bits whatever rows share the call or the dispatch.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };  // [n, 3, nh, hd]
layout(std430, binding = 1) readonly buffer C { float cs[]; };     // [n, hd/2]
layout(std430, binding = 2) readonly buffer S { float sn[]; };     // [n, hd/2]
layout(std430, binding = 3) readonly buffer KV { float kv[]; };    // [n, nh, hd] rotated keys
layout(std430, binding = 4) writeonly buffer O { float o[]; };     // [q1 − q0, nh·hd]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, nh, hd, q0, rows;
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
  const uint r = g / P.nh, h = g % P.nh, l = gl_LocalInvocationID.x;
  if (r >= P.rows) return;  // uniform over the workgroup
  const uint t = P.q0 + r, width = P.nh * P.hd, half_ = P.hd / 2u;
  const uint q = t * 3u * width + h * P.hd;
  for (uint i = l; i < P.hd; i += WG) {
    const uint j = i % half_;
    const float co = cs[t * half_ + j], si = sn[t * half_ + j];
    if (i < half_) {
      precise float v = qkv[q + i] * co - qkv[q + i + half_] * si;
      qv[i] = v;
    } else {
      precise float v = qkv[q + i] * co + qkv[q + j] * si;
      qv[i] = v;
    }
  }
  barrier();
  const float neg_inf = uintBitsToFloat(0xFF800000u);
  float m = neg_inf;
  precise float lsum = 0.0;
  precise float acc[PER_LANE];
  for (uint i = 0u; i < PER_LANE; ++i) acc[i] = 0.0;
  for (uint b0 = 0u; b0 < P.n; b0 += 64u) {
    const uint j = b0 + l;
    const bool valid = j < P.n;
    float s = neg_inf;
    if (valid) {
      precise float dot = 0.0;
      const uint kb = j * width + h * P.hd;
      for (uint d = 0u; d < P.hd; ++d) dot = fma(qv[d], kv[kb + d], dot);
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
    const uint keys = min(64u, P.n - b0);
    for (uint i = 0u; i < PER_LANE; ++i) {
      const uint d = l + i * WG;
      if (d >= P.hd) break;
      precise float a = acc[i] * alpha;
      for (uint jj = 0u; jj < keys; ++jj)
        a = fma(pr[jj], qkv[(b0 + jj) * 3u * width + 2u * width + h * P.hd + d], a);
      acc[i] = a;
    }
    barrier();  // pr[] is rewritten by the next block
  }
  for (uint i = 0u; i < PER_LANE; ++i) {
    const uint d = l + i * WG;
    if (d >= P.hd) break;
    precise float v = div_rn(acc[i], lsum);
    o[r * width + h * P.hd + d] = v;
  }
}
