// MoE router of one row per workgroup (kernels/ops.h router_topk): the top k experts by logit
// (ties to the lower index; the softmax keeps the order, so these are the reference's picks),
// and their softmax weights, renormalized over the k when asked. Picks are k rounds of a fixed
// argmax tree; the softmax's sum is the fixed tree of common.glsl.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer L { float logits[]; };  // [n, ne]
layout(std430, binding = 1) writeonly buffer I { int idx[]; };     // [n, k]
layout(std430, binding = 2) writeonly buffer W { float weight[]; };  // [n, k]

layout(push_constant) uniform Push {
  uint base;  // first row of this dispatch
  uint n, ne, k, renorm;
} P;

#include "common.glsl"

#define MAX_EXPERTS 1024
#define MAX_K 64
shared float row[MAX_EXPERTS];
shared uint taken[MAX_EXPERTS];
shared float best_v[WG];
shared uint best_i[WG];
shared float red[WG];
shared uint picks[MAX_K];

// a before b: the larger logit, or on a tie the lower index.
bool before(float va, uint ia, float vb, uint ib) { return va > vb || (va == vb && ia < ib); }

void main() {
  const uint t = P.base + gl_WorkGroupID.x, l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // uniform over the workgroup
  const float neg_inf = uintBitsToFloat(0xFF800000u);
  for (uint e = l; e < P.ne; e += WG) {
    row[e] = logits[t * P.ne + e];
    taken[e] = 0u;
  }
  barrier();
  for (uint j = 0u; j < P.k; ++j) {
    float bv = neg_inf;
    uint bi = 0xFFFFFFFFu;
    for (uint e = l; e < P.ne; e += WG)
      if (taken[e] == 0u && (bi == 0xFFFFFFFFu || before(row[e], e, bv, bi))) {
        bv = row[e];
        bi = e;
      }
    best_v[l] = bv;
    best_i[l] = bi;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1) {
      if (l < s && best_i[l + s] != 0xFFFFFFFFu &&
          (best_i[l] == 0xFFFFFFFFu || before(best_v[l + s], best_i[l + s], best_v[l], best_i[l]))) {
        best_v[l] = best_v[l + s];
        best_i[l] = best_i[l + s];
      }
      barrier();
    }
    if (l == 0u) {
      picks[j] = best_i[0];
      taken[best_i[0]] = 1u;
    }
    barrier();
  }
  const float mx = row[picks[0]];  // the largest logit
  precise float acc = 0.0;
  for (uint e = l; e < P.ne; e += WG) acc = acc + exp_f(row[e] - mx);
  red[l] = acc;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s) {
      precise float v = red[l] + red[l + s];
      red[l] = v;
    }
    barrier();
  }
  if (l == 0u) {
    precise float total = red[0];
    if (P.renorm != 0u) {
      total = 0.0;
      for (uint j = 0u; j < P.k; ++j) total = total + exp_f(row[picks[j]] - mx);
    }
    for (uint j = 0u; j < P.k; ++j) {
      idx[t * P.k + j] = int(picks[j]);
      weight[t * P.k + j] = div_rn(exp_f(row[picks[j]] - mx), total);
    }
  }
}
