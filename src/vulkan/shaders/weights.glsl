// Element (r, k) of a stored weight matrix (one binding part: row r of the part), dequantized by
// the rule kernels/matrix.h states for its type, with the same float operations (so an embedding
// row is the bits decode_row gives). Compiled once per type (W_F32, W_AFFINE, W_Q4_K, ...).
//
// The including shader declares the words of the part as `wq` (binding 2), for W_AFFINE also the
// scales `ws` (3) and biases `wb` (4), for the IQ2/IQ3 types the code book `wgrid` (3: the
// format's grid points as uint16 level indices, kernels/iq_grids.h), and a push-constant block P
// with cols, bits, group, sb_type (0 f32, 1 f16, 2 bf16), has_bias and zero. Every buffer is read as 32-bit words: no 8- or 16-bit
// storage feature is needed, and the ggml blocks (even sizes) keep each f16 inside one word.

uint byte_at(uint off) { return (wq[off >> 2] >> ((off & 3u) << 3)) & 0xFFu; }
uint u16_at(uint off) { return (wq[off >> 2] >> ((off & 2u) << 3)) & 0xFFFFu; }  // off even
float half_at(uint off) { return f16_bits(u16_at(off)); }
int s8(uint b) { return int(b << 24) >> 24; }

#if defined(W_IQ4_NL) || defined(W_IQ4_XS)
const int KIQ4[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
#endif

#ifdef W_IQ
// Grid point p (its magnitudes' level indices), and the 8 signs of a 7-bit field (bit 7 makes the
// count of negatives even): kernels/iq_grids.h.
uint grid_point(uint p) { return (wgrid[p >> 1] >> ((p & 1u) << 4)) & 0xFFFFu; }
uint iq_signs(uint s7) {
  s7 &= 127u;
  return s7 | ((uint(bitCount(s7)) & 1u) << 7);
}
const uint IQ2_LEVELS[3] = uint[3](8u, 25u, 43u);
const uint IQ3XXS_LEVELS[8] = uint[8](4u, 12u, 20u, 28u, 36u, 44u, 52u, 62u);
const uint IQ3S_LEVELS[8] = uint[8](1u, 3u, 5u, 7u, 9u, 11u, 13u, 15u);
uint u32_at(uint off) { return u16_at(off) | (u16_at(off + 2u) << 16); }  // off even
#endif

#if defined(W_Q4_K) || defined(W_Q5_K)
// The 6-bit scale and min of group j (0..7) from the 12 packed bytes at `off`.
void scale_min_k4(uint j, uint off, out uint sc, out uint m) {
  if (j < 4u) {
    sc = byte_at(off + j) & 63u;
    m = byte_at(off + j + 4u) & 63u;
  } else {
    sc = (byte_at(off + j + 4u) & 0xFu) | ((byte_at(off + j - 4u) >> 6) << 4);
    m = (byte_at(off + j + 4u) >> 4) | ((byte_at(off + j) >> 6) << 4);
  }
}
#endif

#ifdef W_AFFINE
float sb_at(uint which, uint i) {
  const uint t = P.sb_type;
  if (t == 0u) return uintBitsToFloat(which == 0u ? ws[i] : wb[i]);
  const uint word = which == 0u ? ws[i >> 1] : wb[i >> 1];
  const uint h = (word >> ((i & 1u) << 4)) & 0xFFFFu;
  return t == 1u ? f16_bits(h) : bf16_bits(h);
}
#endif

// Block elements and bytes of the ggml types.
#if defined(W_Q8_0)
#define BE 32u
#define BB 34u
#elif defined(W_Q4_0) || defined(W_IQ4_NL)
#define BE 32u
#define BB 18u
#elif defined(W_Q4_1)
#define BE 32u
#define BB 20u
#elif defined(W_Q5_0)
#define BE 32u
#define BB 22u
#elif defined(W_Q5_1)
#define BE 32u
#define BB 24u
#elif defined(W_Q4_K)
#define BE 256u
#define BB 144u
#elif defined(W_Q5_K)
#define BE 256u
#define BB 176u
#elif defined(W_Q6_K)
#define BE 256u
#define BB 210u
#elif defined(W_IQ4_XS)
#define BE 256u
#define BB 136u
#elif defined(W_Q2_K)
#define BE 256u
#define BB 84u
#elif defined(W_Q3_K)
#define BE 256u
#define BB 110u
#elif defined(W_IQ2_XXS)
#define BE 256u
#define BB 66u
#elif defined(W_IQ2_XS)
#define BE 256u
#define BB 74u
#elif defined(W_IQ3_XXS)
#define BE 256u
#define BB 98u
#elif defined(W_IQ3_S)
#define BE 256u
#define BB 110u
#endif

float weight_at(uint r, uint k) {
#if defined(W_F32)
  return uintBitsToFloat(wq[r * P.cols + k]);
#elif defined(W_F16)
  return half_at((r * P.cols + k) * 2u);
#elif defined(W_BF16)
  return bf16_bits(u16_at((r * P.cols + k) * 2u));
#elif defined(W_AFFINE)
  const uint words = P.cols * P.bits / 32u;
  const uint off = k * P.bits;
  const uint wi = r * words + (off >> 5), sh = off & 31u;
  uint v = wq[wi] >> sh;
  if (sh + P.bits > 32u) v |= wq[wi + 1u] << (32u - sh);
  const uint q = v & ((1u << P.bits) - 1u);
  const uint g = r * (P.cols / P.group) + k / P.group;
  const float s = sb_at(0u, g);
  precise float b = P.has_bias != 0u ? sb_at(1u, g) : (P.zero != 0 ? -float(P.zero) * s : 0.0);
  precise float w = s * float(q) + b;
  return w;
#else
  // s·c − mn, split_block's rule: s and mn as the format computes them, then one product and
  // one difference per element.
  const uint base = r * (P.cols / BE) * BB + (k / BE) * BB;
  const uint i = k % BE;
  float s, mn = 0.0;
  int c;
#if defined(W_Q8_0)
  s = half_at(base);
  c = s8(byte_at(base + 2u + i));
#elif defined(W_Q4_0) || defined(W_IQ4_NL)
  s = half_at(base);
  const uint b = byte_at(base + 2u + (i & 15u));
  const uint q = i < 16u ? b & 15u : b >> 4;
#if defined(W_Q4_0)
  c = int(q) - 8;
#else
  c = KIQ4[q];
#endif
#elif defined(W_Q4_1)
  s = half_at(base);
  mn = -half_at(base + 2u);
  const uint b = byte_at(base + 4u + (i & 15u));
  c = int(i < 16u ? b & 15u : b >> 4);
#elif defined(W_Q5_0) || defined(W_Q5_1)
#if defined(W_Q5_0)
  const uint p = base + 2u;
  s = half_at(base);
#else
  const uint p = base + 4u;
  s = half_at(base);
  mn = -half_at(base + 2u);
#endif
  const uint qh = u16_at(p) | (u16_at(p + 2u) << 16);
  const uint b = byte_at(p + 4u + (i & 15u));
  const uint q = (i < 16u ? b & 15u : b >> 4) | (((qh >> i) & 1u) << 4);
#if defined(W_Q5_0)
  c = int(q) - 16;
#else
  c = int(q);
#endif
#elif defined(W_Q4_K) || defined(W_Q5_K)
  const uint p = i / 64u, l = i % 32u, hi = (i % 64u) / 32u, j = 2u * p + hi;
  uint sc, m;
  scale_min_k4(j, base + 4u, sc, m);
  precise float ps = half_at(base) * float(sc);
  precise float pm = half_at(base + 2u) * float(m);
  s = ps;
  mn = pm;
#if defined(W_Q4_K)
  const uint b = byte_at(base + 16u + 32u * p + l);
  c = int(hi != 0u ? b >> 4 : b & 15u);
#else
  const uint b = byte_at(base + 48u + 32u * p + l);
  const uint h = (byte_at(base + 16u + l) >> (2u * p + hi)) & 1u;
  c = int((hi != 0u ? b >> 4 : b & 15u) | (h << 4));
#endif
#elif defined(W_Q6_K)
  const uint n = i / 128u, quarter = (i % 128u) / 32u, l = i % 32u;
  const uint lo = byte_at(base + 64u * n + l + ((quarter & 1u) != 0u ? 32u : 0u));
  const uint h = (byte_at(base + 128u + 32u * n + l) >> (2u * quarter)) & 3u;
  c = int(((quarter >= 2u ? lo >> 4 : lo & 15u) | (h << 4))) - 32;
  precise float ps = half_at(base + 208u) * float(s8(byte_at(base + 192u + i / 16u)));
  s = ps;
#elif defined(W_Q2_K) || defined(W_Q3_K)
  // Element 128n + 32j + 16h + l: bits 2j..2j+1 of qs[32n + 16h + l], in group 8n + 2j + h.
  const uint n = i / 128u, j = (i % 128u) / 32u, h = (i % 32u) / 16u, l = i % 16u;
  const uint grp = 8u * n + 2u * j + h;
#if defined(W_Q2_K)
  const uint sc = byte_at(base + grp);
  precise float ps = half_at(base + 80u) * float(sc & 15u);
  precise float pm = half_at(base + 82u) * float(sc >> 4);
  s = ps;
  mn = pm;
  c = int((byte_at(base + 16u + 32u * n + 16u * h + l) >> (2u * j)) & 3u);
#else
  const uint lo = grp < 8u ? byte_at(base + 96u + grp) & 15u : byte_at(base + 96u + grp - 8u) >> 4;
  const uint hi = (byte_at(base + 104u + grp % 4u) >> (2u * (grp / 4u))) & 3u;
  precise float ps = half_at(base + 108u) * float(int(lo | (hi << 4)) - 32);
  s = ps;
  c = int((byte_at(base + 32u + 32u * n + 16u * h + l) >> (2u * j)) & 3u);
  if (((byte_at(base + 16u * h + l) >> (4u * n + j)) & 1u) == 0u) c -= 4;
#endif
#elif defined(W_IQ)
  // Runs of 8 signed grid magnitudes, groups of 32 (IQ2_XS: scales per 16).
  const uint ib = i / 32u, l = (i % 32u) / 8u, e = i % 8u;
  uint m, signs;
#if defined(W_IQ2_XXS)
  const uint idx = u32_at(base + 2u + 8u * ib), hi = u32_at(base + 6u + 8u * ib);
  precise float ps = half_at(base) * (0.5 + float(hi >> 28)) * 0.25;
  m = IQ2_LEVELS[(grid_point((idx >> (8u * l)) & 255u) >> (2u * e)) & 3u];
  signs = iq_signs(hi >> (7u * l));
#elif defined(W_IQ2_XS)
  const uint v = u16_at(base + 2u + 2u * (4u * ib + l));
  const uint sc = byte_at(base + 66u + ib);
  precise float ps = half_at(base) * (0.5 + float((i % 32u) < 16u ? sc & 15u : sc >> 4)) * 0.25;
  m = IQ2_LEVELS[(grid_point(v & 511u) >> (2u * e)) & 3u];
  signs = iq_signs(v >> 9);
#elif defined(W_IQ3_XXS)
  const uint aux = u32_at(base + 66u + 4u * ib);
  precise float ps = half_at(base) * (0.5 + float(aux >> 28)) * 0.5;
  m = IQ3XXS_LEVELS[(grid_point(byte_at(base + 2u + 8u * ib + 2u * l + (e >> 2))) >> (3u * (e & 3u))) & 7u];
  signs = iq_signs(aux >> (7u * l));
#else  // IQ3_S
  const uint qh = byte_at(base + 66u + ib);
  const uint q = byte_at(base + 2u + 8u * ib + 2u * l + (e >> 2)) | (((qh >> (2u * l + (e >> 2))) & 1u) << 8);
  precise float ps = half_at(base) * float(1u + 2u * ((byte_at(base + 106u + ib / 2u) >> (4u * (ib % 2u))) & 15u));
  m = IQ3S_LEVELS[(grid_point(q) >> (3u * (e & 3u))) & 7u];
  signs = byte_at(base + 74u + 4u * ib + l);
#endif
  s = ps;
  c = ((signs >> e) & 1u) != 0u ? -int(m) : int(m);
#elif defined(W_IQ4_XS)
  const uint ib = i / 32u, j = i % 32u;
  const uint sh = u16_at(base + 2u);
  const uint ls = ((byte_at(base + 4u + ib / 2u) >> (4u * (ib % 2u))) & 15u) | (((sh >> (2u * ib)) & 3u) << 4);
  precise float ps = half_at(base) * float(int(ls) - 32);
  s = ps;
  const uint b = byte_at(base + 8u + 16u * ib + (j & 15u));
  c = KIQ4[j < 16u ? b & 15u : b >> 4];
#endif
  precise float w = s * float(c) - mn;
  return w;
#endif
}
