// out[t, :] = row tokens[t] of an embedding table, dequantized (weights.glsl: the bits of
// kernels' decode_row), for the tokens whose row lies in this binding part; the other parts'
// dispatches write the rest. One invocation per output element.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer T { int tokens[]; };
layout(std430, binding = 1) writeonly buffer O { float o[]; };
layout(std430, binding = 2) readonly buffer WQ { uint wq[]; };
#if defined(W_IQ2_XXS) || defined(W_IQ2_XS) || defined(W_IQ3_XXS) || defined(W_IQ3_S)
#define W_IQ
#endif
#ifdef W_AFFINE
layout(std430, binding = 3) readonly buffer WS { uint ws[]; };
layout(std430, binding = 4) readonly buffer WB { uint wb[]; };
#elif defined(W_IQ)
layout(std430, binding = 3) readonly buffer WG { uint wgrid[]; };
#endif

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;     // tokens
  uint rows;  // rows of the part
  uint cols;
  uint row0;  // the part's first row in the table
  uint bits, group, sb_type, has_bias;
  int zero;
} P;

#include "common.glsl"
#include "weights.glsl"

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
  const uint t = e / P.cols, c = e % P.cols;
  if (t >= P.n) return;
  const uint tok = uint(tokens[t]);
  if (tok < P.row0 || tok - P.row0 >= P.rows) return;
  o[t * P.cols + c] = weight_at(tok - P.row0, c);
}
