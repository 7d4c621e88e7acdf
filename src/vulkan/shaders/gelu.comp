// In place on x[count]: GELU, the tanh form (tanh_form 1) or the exact erf form, as the CPU
// backend computes them (kernels/cpu/math-inl.h), with common.glsl's exp_f and div_rn:
//   tanh: x / (1 + e^(−2u)), u = √(2/π)·(x + 0.044715·x³) (0.5·x·(1 + tanh u) without its
//         cancellation for x < 0);
//   erf:  x·Φ(x), Φ(x) = 0.5·erfc(|x|/√2) for x < 0, 1 − 0.5·erfc(x/√2) else, with
//         erfc(z) = t·e^(P(t) − z²), t = 1/(1 + z/2), P the CPU's degree-10 fit, and z² = a²/2
//         split exactly (a = hi + lo in 12 + 12 bits) so the large exponent is exact.
// Each element's arithmetic is its own: the same bits in any call.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) buffer X { float x[]; };

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint count;
  uint tanh_form;
} P;

#include "common.glsl"

float gelu_tanh(float v) {
  precise float u2 = v * fma(0.071354816197061, v * v, 1.5957691216057308);  // 2u
  const float e = exp_f(min(-u2, 100.0));
  return div_rn(v, 1.0 + e);
}

// e^x for the exponent −a²/2 (exact, ≤ 0): exp_f's arithmetic with its range reduction written as
// separate products (n·C1 exact in 17 bits, n·C2 one rounding). With exp_f's fma pair, lavapipe
// gave r about an ulp of x off for this computed argument (the result 20–60 ulp off, measured);
// written so, it is within the bound the tests hold (16 ulp).
float exp_exact_arg(float x) {
  if (x < -103.97208) return 0.0;
  const float n = roundEven(x * 1.44269504088896341);
  precise float hi = n * 0.693359375;
  precise float lo = n * -2.12194440e-4;
  precise float r = (x - hi) - lo;
  precise float p = 1.9875691500e-4;
  p = fma(p, r, 1.3981999507e-3);
  p = fma(p, r, 8.3334519073e-3);
  p = fma(p, r, 4.1665795894e-2);
  p = fma(p, r, 1.6666665459e-1);
  p = fma(p, r, 5.0000001201e-1);
  precise float y = fma(p, r * r, r) + 1.0;
  const int ni = int(n);
  const int n1 = ni / 2;
  precise float res = y * uintBitsToFloat(uint(n1 + 127) << 23) * uintBitsToFloat(uint(ni - n1 + 127) << 23);
  return res;
}

// erfc(a/√2) for 0 ≤ a ≤ 14.5.
float erfc_half_sqrt2(float a) {
  const float t = div_rn(1.0, fma(a, 0.35355339059327373, 1.0));
  const float s = max(fma(t, 2.4, -1.4), -1.0);
  const float kP[11] = float[](-0.5585953537279242, 0.5703071029766138, 0.015745074072069612,
                               -0.029470336857998256, -0.001045551834992518, 0.0037074767402928335,
                               -0.000275961158036545, -0.0005343206104018358, 0.00012986821437918785,
                               5.486024679573908e-05, -2.2855769688377016e-05);
  precise float p = kP[10];
  for (int i = 9; i >= 0; --i) p = fma(p, s, kP[i]);
  // a² = hi + lo exactly: every partial product of the 12-bit halves is exact in float.
  const float ah = uintBitsToFloat(floatBitsToUint(a) & 0xFFFFF000u);
  precise float al = a - ah;
  precise float hi = a * a;
  precise float lo = ((ah * ah - hi) + (ah + ah) * al) + al * al;
  const float big = exp_exact_arg(-(hi * 0.5));
  const float small = exp_f(p - lo * 0.5);
  precise float r = t * (big * small);
  return r;
}

float gelu_erf(float v) {
  const float a = min(abs(v), 14.5);
  precise float h = 0.5 * erfc_half_sqrt2(a);
  precise float phi = v < 0.0 ? h : 1.0 - h;
  precise float r = v * phi;
  return r;
}

void main() {
  const uint e = (P.base + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
  if (e >= P.count) return;
  x[e] = P.tanh_form != 0u ? gelu_tanh(x[e]) : gelu_erf(x[e]);
}
