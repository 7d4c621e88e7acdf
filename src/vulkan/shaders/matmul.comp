// y[t, y_col0 + r] = Σ_k x[t, k] · w[r, k] for the rows r of one binding part of a weight matrix
// (vulkan/ops.h record_matmul), one workgroup per (ROWS weight rows, TOK token rows): rows
// (base + gl_WorkGroupID.x) · ROWS + i, tokens gl_WorkGroupID.y · TOK + j.
//
// INDEXED (matmul_id_*, record_matmul_indexed): the rows t are MoE slots, slot s reading row
// s / topk of x, and only the slots routed to this matrix's expert (slot_expert[s] == expert)
// are computed; the others are left to the other experts' dispatches.
//
// Fixed order per output: lane l accumulates k ≡ l (mod 64) in increasing k by fused
// multiply-add, then the 64 partials meet in the halving tree of common.glsl (32, 16, ..., 1).
// Each lane decodes a weight once and uses it for the TOK tokens, and reads x once for the ROWS
// rows. The tree of output o = i·TOK + j is then added up by lane o alone, in the same order, so
// the workgroup meets at one barrier instead of one per level (on CPU drivers, which run a
// workgroup's lanes as a loop, each barrier is a pass over all of them). The same code computes
// every output, whatever the tokens, the dispatch or the part it falls in: a row's bits do not
// depend on the other rows of the call (docs/design.md "Vulkan backend").
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
  uint base;      // first group of ROWS rows (of the part) of this dispatch
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

#ifdef GEMV
// matmulv_*: 64 weight rows × 1 token row a workgroup, for calls of fewer than 8 token rows
// (decode): every output of the workgroup is used, with the same per-output arithmetic.
#define ROWS 64u
#define TOK 1u
#else
#define ROWS 8u
#define TOK 8u
#endif
// The partial of lane l for output o at part[l · WG + (o ^ l)]: the swizzle spreads both the
// writes (o fixed, l varying) and the tree's reads (l fixed, o varying) over the memory banks.
// ROWS · TOK · WG floats = 16 KiB (64 outputs either way), within what a device must offer.
shared float part[ROWS * TOK * WG];

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
  const uint r0 = (P.base + gl_WorkGroupID.x) * ROWS;
  const uint t0 = gl_WorkGroupID.y * TOK;
  const uint l = gl_LocalInvocationID.x;
  bool tk[TOK];
  bool any = false;
  for (uint j = 0u; j < TOK; ++j) {
    tk[j] = take(t0 + j);
    any = any || tk[j];
  }
  if (!any) return;  // uniform over the workgroup
  precise float acc[ROWS][TOK];
  for (uint i = 0u; i < ROWS; ++i)
    for (uint j = 0u; j < TOK; ++j) acc[i][j] = 0.0;
  for (uint k = l; k < P.cols; k += WG) {
    float xv[TOK];
    for (uint j = 0u; j < TOK; ++j) xv[j] = tk[j] ? x[x_row(t0 + j) * P.x_stride + k] : 0.0;
    for (uint i = 0u; i < ROWS; ++i) {
      if (r0 + i >= P.rows) break;
      const float w = weight_at(r0 + i, k);
      for (uint j = 0u; j < TOK; ++j)
        if (tk[j]) acc[i][j] = fma(xv[j], w, acc[i][j]);
    }
  }
  for (uint i = 0u; i < ROWS; ++i)
    for (uint j = 0u; j < TOK; ++j) {
      const uint o = i * TOK + j;
      part[l * WG + (o ^ l)] = acc[i][j];
    }
  barrier();
  // Lane o adds up output o's 64 partials by the halving tree.
  const uint o = l, r = r0 + o / TOK, t = t0 + o % TOK;
  if (o >= ROWS * TOK || r >= P.rows || !take(t)) return;
  precise float v[WG];
  for (uint i = 0u; i < WG; ++i) v[i] = part[i * WG + (o ^ i)];
  for (uint s = WG / 2u; s > 0u; s >>= 1)
    for (uint i = 0u; i < s; ++i) v[i] = v[i] + v[i + s];
  y[t * P.y_stride + P.y_col0 + r] = v[0];
}
