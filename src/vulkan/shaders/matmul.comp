// y[t, y_col0 + r] = Σ_k x[t, k] · w[r, k] for the rows r of one binding part of a weight matrix
// (vulkan/ops.h record_matmul), one workgroup per (row, 4 token rows).
//
// INDEXED (matmul_id_*, record_matmul_indexed): the rows t are MoE slots, slot s reading row
// s / topk of x, and only the slots routed to this matrix's expert (slot_expert[s] == expert)
// are computed; the others are left to the other experts' dispatches.
//
// Fixed order per output: lane l accumulates k ≡ l (mod 64) in increasing k by fused
// multiply-add, then the 64 partials meet in the halving tree of common.glsl. The same code
// computes every output, whatever the tokens, the dispatch or the part it falls in: a row's
// bits do not depend on the other rows of the call (docs/design.md "Vulkan backend").
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(std430, binding = 2) readonly buffer WQ { uint wq[]; };
#if defined(W_IQ2_XXS) || defined(W_IQ2_XS) || defined(W_IQ3_XXS) || defined(W_IQ3_S)
#define W_IQ
#endif
#ifdef W_AFFINE
layout(std430, binding = 3) readonly buffer WS { uint ws[]; };
layout(std430, binding = 4) readonly buffer WB { uint wb[]; };
#define IDX_BINDING 5
#elif defined(W_IQ)
layout(std430, binding = 3) readonly buffer WG { uint wgrid[]; };
#define IDX_BINDING 4
#else
#define IDX_BINDING 3
#endif
#ifdef INDEXED
layout(std430, binding = IDX_BINDING) readonly buffer Idx { int slot_expert[]; };
#endif

layout(push_constant) uniform Push {
  uint base;      // first row (of the part) of this dispatch
  uint n;         // token rows
  uint rows;      // rows of the part
  uint cols;
  uint y_col0;    // the part's first row: its column in y
  uint y_stride;  // floats per row of y
  uint x_stride;  // floats per row of x
  uint bits, group, sb_type, has_bias;
  int zero;
  uint expert, topk;  // INDEXED only
} P;

#include "common.glsl"
#include "weights.glsl"

#define TOK 4u
shared float part[TOK][WG];

// Whether output row t is computed here, and the row of x it reads.
bool take(uint t) {
#ifdef INDEXED
  return t < P.n && uint(slot_expert[t]) == P.expert;
#else
  return t < P.n;
#endif
}
uint x_row(uint t) {
#ifdef INDEXED
  return t / P.topk;
#else
  return t;
#endif
}

void main() {
  const uint r = P.base + gl_WorkGroupID.x;
  const uint t0 = gl_WorkGroupID.y * TOK;
  const uint l = gl_LocalInvocationID.x;
  bool any = false;
  for (uint j = 0u; j < TOK; ++j) any = any || take(t0 + j);
  if (!any) return;  // uniform over the workgroup
  precise float acc[TOK];
  for (uint j = 0u; j < TOK; ++j) acc[j] = 0.0;
  if (r < P.rows) {
    for (uint k = l; k < P.cols; k += WG) {
      const float w = weight_at(r, k);
      for (uint j = 0u; j < TOK; ++j)
        if (take(t0 + j)) acc[j] = fma(x[x_row(t0 + j) * P.x_stride + k], w, acc[j]);
    }
  }
  for (uint j = 0u; j < TOK; ++j) part[j][l] = acc[j];
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s)
      for (uint j = 0u; j < TOK; ++j) {
        precise float v = part[j][l] + part[j][l + s];
        part[j][l] = v;
      }
    barrier();
  }
  if (l == 0u && r < P.rows)
    for (uint j = 0u; j < TOK; ++j)
      if (take(t0 + j)) y[(t0 + j) * P.y_stride + P.y_col0 + r] = part[j][0];
}
