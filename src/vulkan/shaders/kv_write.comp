// Rows [n, row] written into a paged cache at positions pos0..pos0+n-1: position p lives in
// physical block table[p / 64], slot p % 64 (the 64-position blocks of kernels/ops.h KvView).
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) buffer Pool { float pool[]; };
layout(std430, binding = 2) readonly buffer Table { int table[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
  uint row;
  uint pos0;
} P;

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  const uint t = e / P.row, c = e % P.row;
  if (t >= P.n) return;
  const uint p = P.pos0 + t;
  const uint blk = uint(table[p / 64u]);
  pool[(blk * 64u + p % 64u) * P.row + c] = src[t * P.row + c];
}
