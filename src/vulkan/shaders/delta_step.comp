// The gated delta rule's recurrent form (kernels/ops.h gated_delta, chunked false) over the rows
// of one sequence, in order. One workgroup per (value head, 64 state columns); invocation l owns
// column j of the head's state S[d_k, d_v]: per row it decays the column, takes kv = Σ_i k_i·S_ij,
// u = β(v_j − kv), S_ij += k_i·u and o_j = Σ_i q_i·S_ij, each sum one fused multiply-add chain in
// increasing i. The L2 norms of q and k are sums over the fixed width of 64 (common.glsl), shared
// by the workgroup. Columns are independent, so no result depends on the dispatch.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };  // [n, 2·nk·dk + nv·dv]
layout(std430, binding = 1) readonly buffer A { float a[]; };      // [n, nv]
layout(std430, binding = 2) readonly buffer B { float b[]; };      // [n, nv]
layout(std430, binding = 3) readonly buffer Decay { float decay[]; };  // [nv] A = −exp(A_log)
layout(std430, binding = 4) readonly buffer Dt { float dt_bias[]; };   // [nv]
layout(std430, binding = 5) buffer S { float state[]; };           // [nv, dk, dv]
layout(std430, binding = 6) writeonly buffer O { float o[]; };     // [n, nv, dv]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, nk, nv, dk, dv;
  uint tiled;   // value head h reads key head h % nk (GGUF), else h / (nv / nk)
  float qscale;  // dk^-0.5, as the host rounds it
} P;

#include "common.glsl"

#define MAX_DK 256
shared float qs[MAX_DK], ks[MAX_DK];
shared float part[WG];

// The fixed-width sum of v² over this workgroup's lanes (all lanes call it).
float sum_squares(uint off, uint l) {
  precise float acc = 0.0;
  for (uint i = l; i < P.dk; i += WG) acc = fma(qkv[off + i], qkv[off + i], acc);
  part[l] = acc;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s) {
      precise float v = part[l] + part[l + s];
      part[l] = v;
    }
    barrier();
  }
  const float total = part[0];
  barrier();  // part is reused by the next call
  return total;
}

float softplus_f(float x) { return x > 20.0 ? x : log(1.0 + exp_f(x)); }

void main() {
  const uint blocks = (P.dv + WG - 1u) / WG;
  const uint g = P.base + gl_WorkGroupID.x;
  const uint h = g / blocks, l = gl_LocalInvocationID.x;
  if (h >= P.nv) return;  // uniform over the workgroup
  const uint j = (g % blocks) * WG + l;
  const bool live = j < P.dv;
  const uint kh = P.tiled != 0u ? h % P.nk : h / (P.nv / P.nk);
  const uint ch = 2u * P.nk * P.dk + P.nv * P.dv;
  const uint col = h * P.dk * P.dv + j;
  for (uint t = 0u; t < P.n; ++t) {
    const uint qo = t * ch + kh * P.dk, ko = t * ch + P.nk * P.dk + kh * P.dk;
    const float qinv = rsqrt_f(sum_squares(qo, l) + 1e-6);
    const float kinv = rsqrt_f(sum_squares(ko, l) + 1e-6);
    for (uint i = l; i < P.dk; i += WG) {
      precise float qv = qkv[qo + i] * qinv * P.qscale;
      precise float kv = qkv[ko + i] * kinv;
      qs[i] = qv;
      ks[i] = kv;
    }
    barrier();
    const float beta = sigmoid_f(b[t * P.nv + h]);
    precise float gg = decay[h] * softplus_f(a[t * P.nv + h] + dt_bias[h]);
    const float dec = exp_f(gg);
    if (live) {
      precise float kv = 0.0;
      for (uint i = 0u; i < P.dk; ++i) {
        precise float s = state[col + i * P.dv] * dec;
        state[col + i * P.dv] = s;
        kv = fma(ks[i], s, kv);
      }
      precise float u = beta * (qkv[t * ch + 2u * P.nk * P.dk + h * P.dv + j] - kv);
      precise float acc = 0.0;
      for (uint i = 0u; i < P.dk; ++i) {
        precise float s = fma(ks[i], u, state[col + i * P.dv]);
        state[col + i * P.dv] = s;
        acc = fma(qs[i], s, acc);
      }
      o[(t * P.nv + h) * P.dv + j] = acc;
    }
    barrier();  // qs, ks are rewritten for the next row
  }
}
