// The KV cache formats of kernels/kv_format.h on the device: rows read and written as bytes of a
// buffer of 32-bit words (the pool's layout is the CPU's, byte for byte), the rotation, and the
// correctly rounded division the encoders need to make the CPU's bytes.
//
// The including shader includes common.glsl first and declares before it a push constant block
// P with `float rsd` (1/√d as the CPU rounds it) and `uint signs[8]` (bit i: the sign of D_i,
// kernels/kv_format.h's splitmix64 bits), which the rotation reads.

#define KV_MAX_HD 256
#define KV_F32 0u
#define KV_BF16 1u
#define KV_Q8_0 2u
#define KV_Q4_0 3u
#define KV_TURBO4 4u
#define KV_TURBO3 5u

shared float kvx[KV_MAX_HD];  // the row being rotated (and, in attention, the query)

// Byte o and the little-endian half-word at even o of a word buffer.
#define KV_BYTE(buf, o) ((buf[(o) >> 2] >> (((o) & 3u) * 8u)) & 0xFFu)
#define KV_U16(buf, o) ((buf[(o) >> 2] >> (((o) & 2u) * 8u)) & 0xFFFFu)

bool kv_is_turbo(uint t) { return t == KV_TURBO4 || t == KV_TURBO3; }
uint kv_turbo_bits(uint t) { return t == KV_TURBO4 ? 4u : 3u; }

// a·b = p + e exactly (Dekker's product by Veltkamp's split; no overflow, no underflow): with
// multiplies and adds only, since a driver may compute fma() unfused (lavapipe's differs from
// the fused result), and the exact error is what the encoders' bits rest on.
float kv_split_hi(float a) {
  precise float c = 4097.0 * a;
  precise float h = c - (c - a);
  return h;
}
float kv_two_prod_err(float a, float b, float p) {
  const float ah = kv_split_hi(a), bh = kv_split_hi(b);
  precise float al = a - ah;
  precise float bl = b - bh;
  precise float e = (((ah * bh - p) + ah * bl) + al * bh) + al * bl;
  return e;
}

// a / b correctly rounded (finite a, b ≠ 0, no underflow): div_rn's quotient or a neighbour,
// whichever leaves the smallest remainder a − q·b (fma computes it exactly near the quotient).
// Binary quotients have no ties, so this is the IEEE result the CPU's '/' gives.
float kv_remainder(float a, float q, float b) {  // |a − q·b|, exact near the quotient
  precise float p = q * b;
  precise float r = (a - p) - kv_two_prod_err(q, b, p);
  return abs(r);
}
float div_cr(float a, float b) {
  const float q = div_rn(a, b);
  if (isinf(q) || isnan(q) || q == 0.0) return q;
  const float lo = uintBitsToFloat(floatBitsToUint(q) - 1u);
  const float hi = uintBitsToFloat(floatBitsToUint(q) + 1u);
  float r = kv_remainder(a, q, b);
  const float rl = kv_remainder(a, lo, b);
  const float rh = kv_remainder(a, hi, b);
  float best = q;
  if (rl < r) {
    best = lo;
    r = rl;
  }
  if (rh < r) best = hi;
  return best;
}

// f32 → bf16 bits, round to nearest even, NaN kept quiet (core::f32_to_bf16).
uint kv_bf16(float f) {
  uint u = floatBitsToUint(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return ((u >> 16) | 0x40u) & 0xFFFFu;
  u += 0x7FFFu + ((u >> 16) & 1u);
  return u >> 16;
}

// f32 → f16 bits, round to nearest even, in integers only (core::f32_to_f16: the subnormal range
// too, which a device flushing denormals could not compute in floats), then saturated at ±65504
// (kv_format.cc f16_scale).
uint kv_f16_scale(float f) {
  const uint u = floatBitsToUint(f);
  const uint sign = (u >> 16) & 0x8000u;
  const uint a = u & 0x7FFFFFFFu;
  uint h;
  if (a > 0x7F800000u) {
    h = sign | 0x7E00u;
  } else if (a >= 0x477FF000u) {
    h = sign | 0x7C00u;
  } else if (a < 0x38800000u) {  // f16 subnormal or zero: round(|f|·2^24)
    const uint e = a >> 23;
    if (e < 102u) {  // below 2^-25: rounds to 0
      h = sign;
    } else {
      const uint m = (a & 0x7FFFFFu) | 0x800000u;  // |f| = m·2^(e−150)
      const uint shift = 126u - e;                // |f|·2^24 = m / 2^shift, shift in 14..24
      uint q = m >> shift;
      const uint rem = m & ((1u << shift) - 1u), hf = 1u << (shift - 1u);
      if (rem > hf || (rem == hf && (q & 1u) != 0u)) q += 1u;
      h = sign | q;
    }
  } else {
    const uint man = a & 0x7FFFFFu;
    h = (((a >> 23) - 112u) << 10) | (man >> 13);
    const uint rem = man & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0u)) h += 1u;
    h |= sign;
  }
  return (h & 0x7FFFu) == 0x7C00u ? ((h & 0x8000u) | 0x7BFFu) : h;
}

// The rotation of kvx[0..d) in place by the workgroup (every lane calls it; barriers inside),
// with kernels/kv_format.cc's float operations: signs, the Walsh–Hadamard butterflies stage by
// stage (each butterfly's a + b and a − b of the same two values: the CPU's bits whatever the
// order inside a stage), then × rsd. kv_unrotate_shared is the inverse: butterflies, × rsd,
// signs.
void kv_signs_shared(uint d, uint l) {
  for (uint i = l; i < d; i += WG)
    if (((P.signs[i >> 5] >> (i & 31u)) & 1u) != 0u) kvx[i] = -kvx[i];
  barrier();
}
void kv_fwht_shared(uint d, uint l) {
  for (uint h = 1u; h < d; h <<= 1) {
    for (uint p = l; p < d / 2u; p += WG) {
      const uint j = (p / h) * 2u * h + p % h;
      const float a = kvx[j], b = kvx[j + h];
      precise float s = a + b;
      precise float t = a - b;
      kvx[j] = s;
      kvx[j + h] = t;
    }
    barrier();
  }
}
void kv_scale_shared(uint d, uint l) {
  for (uint i = l; i < d; i += WG) {
    precise float y = kvx[i] * P.rsd;
    kvx[i] = y;
  }
  barrier();
}
void kv_rotate_shared(uint d, uint l) {
  barrier();
  kv_signs_shared(d, l);
  kv_fwht_shared(d, l);
  kv_scale_shared(d, l);
}
void kv_unrotate_shared(uint d, uint l) {
  barrier();
  kv_fwht_shared(d, l);
  kv_scale_shared(d, l);
  kv_signs_shared(d, l);
}

// The fixed tree of eight partials (kernels/kv_format.h).
float kv_tree8(float p[8]) {
  precise float t = ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
  return t;
}
