// The gated delta rule's chunked (UT) form over one piece of n ≤ 64 rows of one sequence
// (kernels/ops.h gated_delta, chunked true; the model cuts pieces on the absolute 64-grid). One
// workgroup per (value head, 64 state columns); invocation l owns column e of S[d_k, d_v].
//
// With k̂, q̂ the normalized rows, c_i the running sum of g, β_i the gates and
// A_ij = β_i (k̂_i·k̂_j) e^(c_i − c_j) (j < i), the new values solve (I + A) u = r by forward
// substitution per column, r_i = β_i (v_i − e^(c_i) k̂_i·S) (the UT transform with the state
// folded into the right-hand side, so nothing but A is shared between columns); then
//   o_i = e^(c_i) q̂_i·S + Σ_{j≤i} (q̂_i·k̂_j) e^(c_i − c_j) u_j,
//   S ← e^(c_n) S + Σ_j e^(c_n − c_j) k̂_j u_jᵀ.
// Every sum runs in increasing index by fused multiply-add; the shared quantities (norms, c, A,
// q̂·k̂) are each computed once, by a fixed lane, so no result depends on the dispatch.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };  // [n, 2·nk·dk + nv·dv]
layout(std430, binding = 1) readonly buffer A { float a[]; };      // [n, nv]
layout(std430, binding = 2) readonly buffer B { float b[]; };      // [n, nv]
layout(std430, binding = 3) readonly buffer Decay { float decay[]; };  // [nv]
layout(std430, binding = 4) readonly buffer Dt { float dt_bias[]; };   // [nv]
layout(std430, binding = 5) buffer S { float state[]; };           // [nv, dk, dv]
layout(std430, binding = 6) writeonly buffer O { float o[]; };     // [n, nv, dv]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, nk, nv, dk, dv;
  uint tiled;
  float qscale;
} P;

#include "common.glsl"

#define MAXN 64
shared float qinv[MAXN], kinv[MAXN], beta[MAXN], cum[MAXN];
shared float ec[MAXN], el[MAXN];  // e^(c_i), e^(c_n − c_i)
shared float mat[MAXN * MAXN];  // A, then (q̂_i·k̂_j) e^(c_i − c_j)

float softplus_f(float x) { return x > 20.0 ? x : log(1.0 + exp_f(x)); }

void main() {
  const uint blocks = (P.dv + WG - 1u) / WG;
  const uint g = P.base + gl_WorkGroupID.x;
  const uint h = g / blocks, l = gl_LocalInvocationID.x;
  if (h >= P.nv) return;  // uniform over the workgroup
  const uint e = (g % blocks) * WG + l;
  const bool live = e < P.dv;
  const uint kh = P.tiled != 0u ? h % P.nk : h / (P.nv / P.nk);
  const uint ch = 2u * P.nk * P.dk + P.nv * P.dv, n = P.n;
  const uint qo = kh * P.dk, ko = P.nk * P.dk + kh * P.dk;
  // Row l's norms and gates (lane l, sequential sums).
  if (l < n) {
    precise float sq = 0.0, sk = 0.0;
    for (uint d = 0u; d < P.dk; ++d) {
      sq = fma(qkv[l * ch + qo + d], qkv[l * ch + qo + d], sq);
      sk = fma(qkv[l * ch + ko + d], qkv[l * ch + ko + d], sk);
    }
    qinv[l] = rsqrt_f(sq + 1e-6);
    kinv[l] = rsqrt_f(sk + 1e-6);
    beta[l] = sigmoid_f(b[l * P.nv + h]);
    precise float gg = decay[h] * softplus_f(a[l * P.nv + h] + dt_bias[h]);
    cum[l] = gg;
  }
  barrier();
  if (l == 0u)
    for (uint i = 1u; i < n; ++i) {
      precise float c = cum[i - 1u] + cum[i];
      cum[i] = c;
    }
  barrier();
  if (l < n) {
    ec[l] = exp_f(cum[l]);
    el[l] = exp_f(cum[n - 1u] - cum[l]);
  }
  // A_ij for j < i: entries spread over the lanes in a fixed assignment.
  for (uint idx = l; idx < n * n; idx += WG) {
    const uint i = idx / n, j = idx % n;
    float v = 0.0;
    if (j < i) {
      precise float dot = 0.0;
      for (uint d = 0u; d < P.dk; ++d) dot = fma(qkv[i * ch + ko + d] * kinv[i], qkv[j * ch + ko + d] * kinv[j], dot);
      precise float t = beta[i] * dot * exp_f(cum[i] - cum[j]);
      v = t;
    }
    mat[idx] = v;
  }
  barrier();
  const uint col = h * P.dk * P.dv + e;
  float u[MAXN];
  if (live) {
    for (uint i = 0u; i < n; ++i) {
      precise float ks = 0.0;
      for (uint d = 0u; d < P.dk; ++d) ks = fma(qkv[i * ch + ko + d] * kinv[i], state[col + d * P.dv], ks);
      precise float r = beta[i] * (qkv[i * ch + 2u * P.nk * P.dk + h * P.dv + e] - ec[i] * ks);
      for (uint j = 0u; j < i; ++j) r = fma(-mat[i * n + j], u[j], r);
      u[i] = r;
    }
  }
  barrier();
  for (uint idx = l; idx < n * n; idx += WG) {  // (q̂_i·k̂_j) e^(c_i − c_j) for j ≤ i
    const uint i = idx / n, j = idx % n;
    float v = 0.0;
    if (j <= i) {
      precise float dot = 0.0;
      for (uint d = 0u; d < P.dk; ++d)
        dot = fma(qkv[i * ch + qo + d] * qinv[i] * P.qscale, qkv[j * ch + ko + d] * kinv[j], dot);
      precise float t = dot * exp_f(cum[i] - cum[j]);
      v = t;
    }
    mat[idx] = v;
  }
  barrier();
  if (!live) return;  // no barrier follows
  for (uint i = 0u; i < n; ++i) {
    precise float qs = 0.0;
    for (uint d = 0u; d < P.dk; ++d) qs = fma(qkv[i * ch + qo + d] * qinv[i] * P.qscale, state[col + d * P.dv], qs);
    precise float acc = ec[i] * qs;
    for (uint j = 0u; j <= i; ++j) acc = fma(mat[i * n + j], u[j], acc);
    o[(i * P.nv + h) * P.dv + e] = acc;
  }
  const float en = ec[n - 1u];
  for (uint d = 0u; d < P.dk; ++d) {
    precise float s = en * state[col + d * P.dv];
    for (uint j = 0u; j < n; ++j) s = fma(el[j] * qkv[j * ch + ko + d] * kinv[j], u[j], s);
    state[col + d * P.dv] = s;
  }
}
