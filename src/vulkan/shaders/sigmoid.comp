// In place: x[i] = sigmoid(x[i]) over n values (the shared expert's gate, model/model.cc).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer X { float x[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n;
} P;

#include "common.glsl"

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
  if (e < P.n) x[e] = sigmoid_f(x[e]);
}
