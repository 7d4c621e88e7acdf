// Rotate-half RoPE in place on the first rotary_dim values of each head row (kernels/rope.h
// apply_rope): pair i of row t turned by the angle of position positions[t, axis_i], read from a
// table the host computed once in double (cos, sin of pos·θ^(−2i/rotary_dim) as floats, the
// floats apply_rope computes). The rotation is apply_rope's float operations: the CPU's bits.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Pos { int positions[]; };  // [n, 3]
layout(std430, binding = 2) readonly buffer Axis { uint pair_axis[]; };  // [rotary_dim / 2]
layout(std430, binding = 3) readonly buffer Table { float table[]; };  // [rows, rotary_dim / 2, 2]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
  uint heads;
  uint head_stride;  // floats from one head row to the next (head_dim, or 2·head_dim with a gate)
  uint rotary_dim;
  uint table_rows;
  uint has_axis;
} P;

void main() {
  const uint half_dim = P.rotary_dim / 2u;
  const uint e = (P.base + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  const uint i = e % half_dim, th = e / half_dim;
  const uint head = th % P.heads, t = th / P.heads;
  if (t >= P.n) return;
  const uint axis = P.has_axis != 0u ? min(pair_axis[i], 2u) : 0u;
  // Positions are checked by the host; the clamp keeps a bad one inside the table.
  const uint p = uint(clamp(positions[t * 3u + axis], 0, int(P.table_rows) - 1));
  const float c = table[(p * half_dim + i) * 2u], s = table[(p * half_dim + i) * 2u + 1u];
  const uint at = th * P.head_stride + i;
  const float x1 = x[at], x2 = x[at + half_dim];
  precise float r1 = x1 * c - x2 * s;
  precise float r2 = x2 * c + x1 * s;
  x[at] = r1;
  x[at + half_dim] = r2;
}
