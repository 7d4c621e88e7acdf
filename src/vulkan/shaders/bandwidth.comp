// The bandwidth probe (vulkan/probe.h): reads every 16-byte vector of one binding and writes one
// 32-bit sum per workgroup, so no read can be dropped. Workgroup g of `groups` takes vectors
// g·64 + l, then every groups·64 further, four loads in flight per lane; the sums wrap (mod 2^32),
// so their order does not matter and the host checks the total exactly.
#version 450
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Data { uvec4 data[]; };
layout(std430, binding = 1) writeonly buffer Out { uint partial[]; };

layout(push_constant) uniform Push {
  uint base;    // first workgroup of this dispatch
  uint n;       // vectors in the binding
  uint groups;  // workgroups over the binding (every dispatch of it)
  uint out0;    // where this binding's sums begin in `partial`
} P;

shared uint red[64];

void main() {
  const uint g = P.base + gl_WorkGroupID.x;
  const uint l = gl_LocalInvocationID.x;
  const uint stride = P.groups * 64u;
  uvec4 a0 = uvec4(0u), a1 = uvec4(0u), a2 = uvec4(0u), a3 = uvec4(0u);
  uint i = g * 64u + l;
  for (; i + 3u * stride < P.n; i += 4u * stride) {
    a0 += data[i];
    a1 += data[i + stride];
    a2 += data[i + 2u * stride];
    a3 += data[i + 3u * stride];
  }
  for (; i < P.n; i += stride) a0 += data[i];
  const uvec4 a = a0 + a1 + a2 + a3;
  red[l] = a.x + a.y + a.z + a.w;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (l < s) red[l] += red[l + s];
    barrier();
  }
  if (l == 0u) partial[P.out0 + g] = red[0];
}
