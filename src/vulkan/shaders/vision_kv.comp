// The vision attention's keys (kernels/ops.h vision_kv_rows): rows [0, rows) of qkv
// [rows, 3, nh, hd] to kv [rows, nh, hd], each head's key turned by its row's cos/sin
// [rows, hd/2] (rotate-half: pair (i, i + hd/2)). One invocation per key element, its arithmetic
// its own.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };
layout(std430, binding = 1) readonly buffer C { float cs[]; };
layout(std430, binding = 2) readonly buffer S { float sn[]; };
layout(std430, binding = 3) writeonly buffer KV { float kv[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint rows, nh, hd;
} P;

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
  const uint width = P.nh * P.hd, half_ = P.hd / 2u;
  const uint t = e / width, c = e % width;
  if (t >= P.rows) return;
  const uint h = c / P.hd, i = c % P.hd, j = i % half_;
  const uint k = t * 3u * width + width + h * P.hd;  // the row's key of head h
  const float co = cs[t * half_ + j], si = sn[t * half_ + j];
  precise float a;
  if (i < half_) {
    precise float r = qkv[k + i] * co - qkv[k + i + half_] * si;
    a = r;
  } else {
    precise float r = qkv[k + i] * co + qkv[k + j] * si;
    a = r;
  }
  kv[e] = a;
}
