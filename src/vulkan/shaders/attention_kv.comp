// Attention of one sequence's rows over a paged cache of KV formats (kernels/kv_format.h), read
// in place: no row is expanded to f32 in memory. attention.comp's structure (one workgroup per
// (row, query head), keys in blocks of 64 on the absolute grid, the online softmax by the fixed
// trees), with kv_format.h's primitives inside:
// - the query is prepared once (kv_prepare_query): rotated where K is, and for q8_0/q4_0 K
//   quantized to int8 per block of 32 (dq = amax/127, correctly rounded as the CPU's);
// - lane l scores key b0 + l in kv_scores' order (eight partials i ≡ m mod 8, fma; for q8_0/q4_0
//   the exact int sums of four code products per partial, scaled by dq·dk; the halving tree of
//   eight): the CPU's score bits for the same prepared query and row;
// - lane l accumulates dims d ≡ l (mod 64) in the stored space over the block's keys in order,
//   dequantization fused (fma(w·a, code, acc) as kv_values), then the output row is divided by
//   the softmax sum and un-rotated where V is (kv_values_finish), then gated.
// A row's keys and their order are fixed by its position: the same bits in any batch or chunking.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;

layout(std430, binding = 0) readonly buffer Q { float q[]; };     // [n·nh, hd] normed, turned
layout(std430, binding = 1) readonly buffer QG { float qg[]; };   // [n, nh, q_row]: the gates
layout(std430, binding = 2) readonly buffer K { uint kp[]; };     // [blocks, 64, nkv, k_bytes]
layout(std430, binding = 3) readonly buffer V { uint vp[]; };     // [blocks, 64, nkv, v_bytes]
layout(std430, binding = 4) readonly buffer T { int table[]; };   // logical → physical block
layout(std430, binding = 5) writeonly buffer O { float o[]; };    // [n, nh·hd]
layout(std430, binding = 6) readonly buffer B { float books[]; }; // K codebook [16], V's [16]

layout(push_constant) uniform Push {
  uint base;  // first workgroup of this dispatch
  uint n, nh, nkv, hd, pos0, first_key, q_row, gated;
  float scale;
  uint kt, vt, krot, vrot, kbytes, vbytes;  // types, rotations, bytes of a head's row
  float rsd;
  uint signs[8];
} P;

#include "common.glsl"
#include "kv.glsl"

#define PER_LANE 4  // KV_MAX_HD / WG
shared int qc[KV_MAX_HD];  // the query's int8 codes (q8_0/q4_0 K)
shared float qd[KV_MAX_HD / 32];
shared float pr[WG];
shared float red[WG];

float reduce(float v, uint l, bool take_max) {
  red[l] = v;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (l < s) {
      precise float r = take_max ? max(red[l], red[l + s]) : red[l] + red[l + s];
      red[l] = r;
    }
    barrier();
  }
  const float total = red[0];
  barrier();
  return total;
}

// Element i of a row at byte r of a float-read type (f32, bf16, turbo's centroid from book).
#define KV_FLOAT_VALUE(buf, t, r, i, book)                                                   \
  ((t) == KV_F32    ? uintBitsToFloat(buf[((r) >> 2) + (i)])                                 \
   : (t) == KV_BF16 ? bf16_bits(KV_U16(buf, (r) + 2u * (i)))                                 \
                    : books[(book) + kv_code(buf, t, r, i)])
// Code i of a turbo row at byte r (after its 4-byte scale), LSB first.
#define kv_code(buf, t, r, i) kv_code_##buf(t, r, i)
uint kv_code_kp(uint t, uint r, uint i) {
  const uint bits = kv_turbo_bits(t), bit = i * bits, at = r + 4u + (bit >> 3);
  uint v = KV_BYTE(kp, at);
  if ((bit & 7u) + bits > 8u) v |= KV_BYTE(kp, at + 1u) << 8;
  return (v >> (bit & 7u)) & ((1u << bits) - 1u);
}
uint kv_code_vp(uint t, uint r, uint i) {
  const uint bits = kv_turbo_bits(t), bit = i * bits, at = r + 4u + (bit >> 3);
  uint v = KV_BYTE(vp, at);
  if ((bit & 7u) + bits > 8u) v |= KV_BYTE(vp, at + 1u) << 8;
  return (v >> (bit & 7u)) & ((1u << bits) - 1u);
}
// Code i of a q8_0/q4_0 row at byte r (q4_0: nibble − 8), and block b's scale.
int block_code_k(uint t, uint r, uint i) {
  if (t == KV_Q8_0) return bitfieldExtract(int(KV_BYTE(kp, r + (i >> 5) * 34u + 2u + (i & 31u))), 0, 8);
  const uint by = KV_BYTE(kp, r + (i >> 5) * 18u + 2u + (i & 15u));
  return int((i & 31u) < 16u ? by & 15u : by >> 4) - 8;
}
int block_code_v(uint t, uint r, uint i) {
  if (t == KV_Q8_0) return bitfieldExtract(int(KV_BYTE(vp, r + (i >> 5) * 34u + 2u + (i & 31u))), 0, 8);
  const uint by = KV_BYTE(vp, r + (i >> 5) * 18u + 2u + (i & 15u));
  return int((i & 31u) < 16u ? by & 15u : by >> 4) - 8;
}
float block_scale_k(uint t, uint r, uint b) { return f16_bits(KV_U16(kp, r + b * (t == KV_Q8_0 ? 34u : 18u))); }
float block_scale_v(uint t, uint r, uint b) { return f16_bits(KV_U16(vp, r + b * (t == KV_Q8_0 ? 34u : 18u))); }

// kv_scores of the prepared query against the K row at byte r.
float score(uint r) {
  const uint t = P.kt, d = P.hd;
  float p[8];
  for (uint m = 0u; m < 8u; ++m) p[m] = 0.0;
  if (t == KV_Q8_0 || t == KV_Q4_0) {
    for (uint b = 0u; b < d / 32u; ++b) {
      precise float sc = qd[b] * block_scale_k(t, r, b);
      for (uint m = 0u; m < 8u; ++m) {
        int quad = 0;
        for (uint e = 0u; e < 4u; ++e) {
          const uint i = 32u * b + 4u * m + e;
          quad += qc[i] * block_code_k(t, r, i);
        }
        precise float pm = fma(float(quad), sc, p[m]);
        p[m] = pm;
      }
    }
    precise float s = kv_tree8(p) * P.scale;
    return s;
  }
  for (uint i = 0u; i < d; ++i) {
    precise float pm = fma(kvx[i], KV_FLOAT_VALUE(kp, t, r, i, 0u), p[i & 7u]);
    p[i & 7u] = pm;
  }
  const float tr = kv_tree8(p);
  if (kv_is_turbo(t)) {
    precise float s = (tr * uintBitsToFloat(kp[r >> 2])) * P.scale;
    return s;
  }
  precise float s = tr * P.scale;
  return s;
}

void main() {
  const uint g = P.base + gl_WorkGroupID.x;
  const uint t = g / P.nh, h = g % P.nh, l = gl_LocalInvocationID.x;
  if (t >= P.n) return;  // uniform over the workgroup
  const uint d = P.hd, kh = h / (P.nh / P.nkv), pos = P.pos0 + t;
  const uint kstride = P.nkv * P.kbytes, vstride = P.nkv * P.vbytes;
  // The prepared query (kv_prepare_query) in kvx[] (and qc/qd).
  for (uint i = l; i < d; i += WG) kvx[i] = q[g * d + i];
  if (P.krot != 0u) kv_rotate_shared(d, l);
  barrier();
  if (P.kt == KV_Q8_0 || P.kt == KV_Q4_0) {
    for (uint b = l; b < d / 32u; b += WG) {
      bool finite = true;
      float amax = 0.0;
      for (uint i = 32u * b; i < 32u * b + 32u; ++i) {
        finite = finite && !isnan(kvx[i]) && !isinf(kvx[i]);
        amax = max(amax, abs(kvx[i]));
      }
      const float inv = amax > 0.0 && finite ? div_cr(127.0, amax) : 0.0;
      qd[b] = finite ? div_cr(amax, 127.0) : uintBitsToFloat(0x7FC00000u);
      for (uint i = 32u * b; i < 32u * b + 32u; ++i) {
        precise float v = kvx[i] * inv;
        qc[i] = finite ? int(roundEven(clamp(v, -127.0, 127.0))) : 0;
      }
    }
    barrier();
  }
  const float neg_inf = uintBitsToFloat(0xFF800000u);
  float m = neg_inf;
  precise float lsum = 0.0;
  precise float acc[PER_LANE];
  for (uint i = 0u; i < PER_LANE; ++i) acc[i] = 0.0;
  const uint vt = P.vt;
  const bool vquant = vt == KV_Q8_0 || vt == KV_Q4_0;
  for (uint b0 = (P.first_key / 64u) * 64u; b0 <= pos; b0 += 64u) {
    const uint blk = uint(table[b0 / 64u]);
    const uint j = b0 + l;
    const bool valid = j >= P.first_key && j <= pos;
    const float s = valid ? score((blk * 64u + l) * kstride + kh * P.kbytes) : neg_inf;
    const float m_new = max(m, reduce(s, l, true));  // the block holds a valid key: finite
    const float alpha = exp_f(m - m_new);            // 0 for the first block (m = −inf)
    const float pj = valid ? exp_f(s - m_new) : 0.0;
    pr[l] = pj;
    const float bsum = reduce(pj, l, false);  // its barriers also publish pr[]
    lsum = fma(lsum, alpha, bsum);
    m = m_new;
    for (uint i = 0u; i < PER_LANE; ++i) {
      const uint dd = l + i * WG;
      if (dd >= d) break;
      precise float a = acc[i] * alpha;
      for (uint jj = 0u; jj < 64u; ++jj) {
        const uint key = b0 + jj;
        if (key < P.first_key || key > pos) continue;
        const uint r = (blk * 64u + jj) * vstride + kh * P.vbytes;
        if (vquant) {
          precise float w = pr[jj] * block_scale_v(vt, r, dd >> 5);
          a = fma(w, float(block_code_v(vt, r, dd)), a);
        } else if (kv_is_turbo(vt)) {
          precise float w = pr[jj] * uintBitsToFloat(vp[r >> 2]);
          a = fma(w, books[16u + kv_code(vp, vt, r, dd)], a);
        } else {
          a = fma(pr[jj], KV_FLOAT_VALUE(vp, vt, r, dd, 16u), a);
        }
      }
      acc[i] = a;
    }
    barrier();  // pr[] is rewritten by the next block
  }
  // Divided by the sum, un-rotated where V is, gated.
  for (uint i = 0u; i < PER_LANE; ++i) {
    const uint dd = l + i * WG;
    if (dd >= d) break;
    kvx[dd] = div_rn(acc[i], lsum);
  }
  if (P.vrot != 0u) kv_unrotate_shared(d, l);
  barrier();
  for (uint i = l; i < d; i += WG) {
    precise float r = kvx[i];
    if (P.gated != 0u) r = r * sigmoid_f(qg[(t * P.nh + h) * P.q_row + d + i]);
    o[(t * P.nh + h) * d + i] = r;
  }
}
