// Shared by every shader: exact conversions of stored values, the fixed-width reduction, and
// activation functions whose accuracy does not rest on the driver's built-ins.
//
// Exactness (docs/design.md "Vulkan backend"): arithmetic that decides a result's bits is marked
// `precise` (SPIR-V NoContraction), so a driver cannot fuse a multiply and an add in one place and
// not in another; the fused multiply-adds we want are written as fma(). Reductions run in a fixed
// order per output: lane l of a kWorkgroup-wide group takes the elements k ≡ l (mod 64) in
// increasing k, then the 64 partials are added in a fixed halving tree in shared memory. Nothing
// depends on the subgroup size.

#define WG 64

// f16 bits to f32, exactly (subnormals included; no reliance on the driver's half support).
float f16_bits(uint h) {
  const uint s = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1Fu;
  const uint m = h & 0x3FFu;
  if (e == 0u) {
    const float v = float(m) * 5.9604644775390625e-8;  // m · 2^-24, exact
    return s != 0u ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(s | 0x7F800000u | (m << 13));
  return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

float bf16_bits(uint h) { return uintBitsToFloat(h << 16); }

// a / b correctly rounded in all but rare ties: the driver's division (2.5 ulp in Vulkan) refined
// by one Newton step on the exact remainder.
float div_rn(float a, float b) {
  precise float q = a / b;
  if (isinf(b) || isinf(q) || isnan(q)) return q;  // no remainder to refine (0·∞ would be NaN)
  precise float r = fma(-q, b, a);
  precise float q1 = fma(r, 1.0 / b, q);
  return q1;
}

// e^x within about 1 ulp on every device: 2^n · e^r with r = x − n·ln2 in two parts (Cody–Waite)
// and a degree-6 polynomial for e^r (the single-precision Cephes coefficients).
float exp_f(float x) {
  if (x > 88.72283905206835) return uintBitsToFloat(0x7F800000u);
  if (x < -103.97208) return 0.0;
  const float n = roundEven(x * 1.44269504088896341);
  precise float r = fma(-n, 0.693359375, x);
  r = fma(-n, -2.12194440e-4, r);
  precise float p = 1.9875691500e-4;
  p = fma(p, r, 1.3981999507e-3);
  p = fma(p, r, 8.3334519073e-3);
  p = fma(p, r, 4.1665795894e-2);
  p = fma(p, r, 1.6666665459e-1);
  p = fma(p, r, 5.0000001201e-1);
  precise float y = fma(p, r * r, r) + 1.0;
  // 2^n in two factors: n may reach -150, past the normal exponents of one factor.
  const int ni = int(n);
  const int n1 = ni / 2;
  precise float res = y * uintBitsToFloat(uint(n1 + 127) << 23) * uintBitsToFloat(uint(ni - n1 + 127) << 23);
  return res;
}

float silu_f(float x) { return div_rn(x, 1.0 + exp_f(-x)); }
float sigmoid_f(float x) { return div_rn(1.0, 1.0 + exp_f(-x)); }

// 1/sqrt(m), refined by one Newton step from the driver's inversesqrt.
float rsqrt_f(float m) {
  precise float y = inversesqrt(m);
  precise float h = 0.5 * m * y;
  precise float e = fma(-h, y, 0.5);
  precise float res = fma(y, e, y);
  return res;
}
