// Rows [n, nkv, hd] encoded into a paged cache of a KV format (kernels/kv_format.h kv_encode_row)
// at positions pos0..pos0+n-1: position p lives in physical block table[p / 64], slot p % 64, a
// position being nkv rows of row_bytes bytes (model/kv_pool.h). One workgroup per (row, KV head).
//
// The bytes are the CPU encoder's: the rotation's butterflies and the scale are the same float
// operations, divisions are correctly rounded (div_cr), f16/bf16 conversions are integer code.
// Turbo's row norm is the one exception: the CPU sums y_i² in double, the device in two floats
// (scaled by a power of two, so no overflow): s = ‖y‖/√d gets the CPU's bits unless it lies
// within about 2⁻⁴⁰ (relative) of a float rounding boundary, and a code y_i/s within 2⁻²⁴ of a
// cell boundary may take the neighbouring cell (docs/design.md "KV formats on the device").
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Src { float src[]; };  // [n, nkv, hd]
layout(std430, binding = 1) buffer Pool { uint pool[]; };          // [blocks, 64, nkv, row_bytes]
layout(std430, binding = 2) readonly buffer Table { int table[]; };
layout(std430, binding = 3) readonly buffer Books { float books[]; };  // see vulkan/attention.h

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, nkv, hd, pos0;
  uint type, rotated, row_bytes;
  uint mids;  // offset of this cache's cell boundaries in books[]
  float rsd;
  uint signs[8];
} P;

#include "common.glsl"
#include "kv.glsl"

shared uint ob[4 * KV_MAX_HD];  // the row's bytes, one a word
shared uint codes[KV_MAX_HD];
shared float norm;

// q8_0 block b: ds = f16(amax/127) saturated, q = clamp(round(x/ds), ±127); NaN scale if not finite.
void encode_q8_0(uint b) {
  const uint o = b * 34u, i0 = b * 32u;
  bool finite = true;
  float amax = 0.0;
  for (uint i = 0u; i < 32u; ++i) {
    const float x = kvx[i0 + i];
    finite = finite && !isnan(x) && !isinf(x);
    amax = max(amax, abs(x));
  }
  const uint h = finite ? kv_f16_scale(div_cr(amax, 127.0)) : 0x7E00u;
  ob[o] = h & 0xFFu;
  ob[o + 1u] = h >> 8;
  const float ds = f16_bits(h);
  const float inv = ds > 0.0 ? div_cr(1.0, ds) : 0.0;
  for (uint i = 0u; i < 32u; ++i) {
    precise float v = kvx[i0 + i] * inv;
    const int q = finite ? int(roundEven(clamp(v, -127.0, 127.0))) : 0;
    ob[o + 2u + i] = uint(q) & 0xFFu;
  }
}

// q4_0 block b: m the value of largest magnitude (the first on ties), ds = f16(m/−8),
// nibble = clamp(round(x/ds), −8, 7) + 8; element i < 16 low in byte i, i + 16 high.
void encode_q4_0(uint b) {
  const uint o = b * 18u, i0 = b * 32u;
  bool finite = true;
  float m = 0.0;
  for (uint i = 0u; i < 32u; ++i) {
    const float x = kvx[i0 + i];
    finite = finite && !isnan(x) && !isinf(x);
    if (abs(x) > abs(m)) m = x;
  }
  precise float m8 = m * -0.125;  // m / −8: the same exact quotient, the same rounding
  const uint h = finite ? kv_f16_scale(m8) : 0x7E00u;
  ob[o] = h & 0xFFu;
  ob[o + 1u] = h >> 8;
  const float ds = f16_bits(h);
  const float inv = ds != 0.0 ? div_cr(1.0, ds) : 0.0;
  for (uint i = 0u; i < 16u; ++i) {
    uint nib[2];
    for (uint k = 0u; k < 2u; ++k) {
      precise float v = kvx[i0 + i + 16u * k] * inv;
      nib[k] = finite ? uint(int(roundEven(clamp(v, -8.0, 7.0))) + 8) : 8u;
    }
    ob[o + 2u + i] = nib[0] | (nib[1] << 4);
  }
}

// Turbo's s = ‖y‖/√d in f32 (lane 0): Σ y_i² in order as two floats (each square exact as
// p + e), the row first scaled by 2^(127 − E), E the largest exponent, so the sum is in [1, 4d);
// then the square root correctly rounded from the pair and scaled back. NaN where y is not finite.
float turbo_norm(uint d) {
  uint emax = 0u;
  bool finite = true;
  for (uint i = 0u; i < d; ++i) {
    const float y = kvx[i];
    finite = finite && !isnan(y) && !isinf(y);
    emax = max(emax, (floatBitsToUint(y) >> 23) & 0xFFu);
  }
  if (!finite) return uintBitsToFloat(0x7FC00000u);
  if (emax == 0u) return 0.0;  // zeros (subnormal rows aside: see the header)
  const int shift = 127 - int(emax);
  precise float hi = 0.0;
  precise float lo = 0.0;
  for (uint i = 0u; i < d; ++i) {
    precise float y = ldexp(kvx[i], shift);
    precise float p = y * y;
    const float e = kv_two_prod_err(y, y, p);
    precise float s = hi + p;
    precise float bp = s - hi;
    precise float err = (hi - (s - bp)) + (p - bp);
    lo = lo + (err + e);
    hi = s;
  }
  precise float h = hi + lo;
  precise float l = lo - (h - hi);
  // S = (h + l)/d, exact (d a power of two).
  const float rd = uintBitsToFloat((127u - uint(findMSB(d))) << 23);  // 1/d exactly, not by '/'
  precise float sh = h * rd;
  precise float sl = l * rd;
  precise float r0 = sqrt(sh);
  precise float r0sq = r0 * r0;
  precise float res = ((sh - r0sq) - kv_two_prod_err(r0, r0, r0sq)) + sl;
  precise float c = r0 + res * div_rn(0.5, r0);
  // The neighbour whose square is nearest S.
  float best = c;
  precise float csq = c * c;
  precise float bd = abs((csq - sh) + (kv_two_prod_err(c, c, csq) - sl));
  for (int k = -1; k <= 1; k += 2) {
    const float t = uintBitsToFloat(uint(int(floatBitsToUint(c)) + k));
    precise float tsq = t * t;
    precise float td = abs((tsq - sh) + (kv_two_prod_err(t, t, tsq) - sl));
    if (td < bd) {
      bd = td;
      best = t;
    }
  }
  return ldexp(best, -shift);
}

void main() {
  const uint g = P.base + gl_WorkGroupID.x;
  const uint t = g / P.nkv, kh = g % P.nkv, l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // uniform over the workgroup
  const uint d = P.hd;
  for (uint i = l; i < d; i += WG) kvx[i] = src[(t * P.nkv + kh) * d + i];
  if (P.rotated != 0u) kv_rotate_shared(d, l);
  barrier();
  const uint type = P.type;
  if (type == KV_F32) {
    for (uint i = l; i < d; i += WG) {
      const uint u = floatBitsToUint(kvx[i]);
      for (uint k = 0u; k < 4u; ++k) ob[4u * i + k] = (u >> (8u * k)) & 0xFFu;
    }
  } else if (type == KV_BF16) {
    for (uint i = l; i < d; i += WG) {
      const uint h = kv_bf16(kvx[i]);
      ob[2u * i] = h & 0xFFu;
      ob[2u * i + 1u] = h >> 8;
    }
  } else if (type == KV_Q8_0) {
    for (uint b = l; b < d / 32u; b += WG) encode_q8_0(b);
  } else if (type == KV_Q4_0) {
    for (uint b = l; b < d / 32u; b += WG) encode_q4_0(b);
  } else {
    if (l == 0u) norm = turbo_norm(d);
    barrier();
    const float s = norm;
    const uint bits = kv_turbo_bits(type), levels = 1u << bits;
    // code i: the centroid nearest y_i/s, the lower on a tie (u > boundary moves up).
    for (uint i = l; i < d; i += WG) {
      uint k = 0u;
      if (!isnan(s) && s != 0.0) {
        const float u = div_cr(kvx[i], s);
        while (k + 1u < levels && u > books[P.mids + k]) ++k;
      }
      codes[i] = k;
    }
    barrier();
    const uint nbytes = d * bits / 8u;
    for (uint j = l; j < nbytes; j += WG) {
      uint v = 0u;
      for (uint i = (8u * j) / bits; i <= (8u * j + 7u) / bits && i < d; ++i) {
        const int sh = int(i * bits) - int(8u * j);  // bit of code i within byte j
        v |= sh >= 0 ? codes[i] << uint(sh) : codes[i] >> uint(-sh);
      }
      ob[4u + j] = v & 0xFFu;
    }
    if (l == 0u) {
      const uint u = floatBitsToUint(s);
      for (uint k = 0u; k < 4u; ++k) ob[k] = (u >> (8u * k)) & 0xFFu;
    }
  }
  barrier();
  // The row's bytes into the pool's words; a word shared with a neighbouring row (rows of a
  // length or offset not a multiple of 4) takes only our bytes, by atomics.
  const uint p = P.pos0 + t, rb = P.row_bytes;
  const uint o = (uint(table[p / 64u]) * 64u + p % 64u) * (P.nkv * rb) + kh * rb;
  const uint w0 = o >> 2, w1 = (o + rb + 3u) >> 2;
  for (uint w = w0 + l; w < w1; w += WG) {
    uint v = 0u, mask = 0u;
    for (uint k = 0u; k < 4u; ++k) {
      const uint at = 4u * w + k;
      if (at >= o && at < o + rb) {
        v |= ob[at - o] << (8u * k);
        mask |= 0xFFu << (8u * k);
      }
    }
    if (mask == 0xFFFFFFFFu) {
      pool[w] = v;
    } else {
      atomicAnd(pool[w], ~mask);
      atomicOr(pool[w], v);
    }
  }
}
