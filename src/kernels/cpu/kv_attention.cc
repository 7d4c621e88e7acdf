// Scores and value accumulation over compressed KV rows (kernels/cpu/kv_attention.h): rows are
// decoded in registers, eight values at a time, never into memory.
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/kv_attention.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "core/check.h"
#include "core/dtype.h"
#include "kernels/cpu/kv_attention.h"
#include "kernels/kv_format.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
using D8 = hn::Full256<float>;
using DI8 = hn::RebindToSigned<D8>;
using DU8 = hn::RebindToUnsigned<D8>;
using V8 = hn::Vec<D8>;

HWY_INLINE float LoadF32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
// The f16 scale of block b (F16C: exact, as core::f16_to_f32; the quiet NaN the encoder writes
// for a non-finite block widens to the same bits).
HWY_INLINE float BlockScale(KvType t, const uint8_t* row, int64_t b) {
  uint16_t h;
  std::memcpy(&h, row + b * (t == KvType::kQ8_0 ? 34 : 18), 2);
  return _cvtsh_ss(h);
}
HWY_INLINE float Tree8(const float* p) {
  return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

// The 8 lanes' codes of a packed word: lane l gets bits [l·kBits, (l+1)·kBits).
template <int kBits>
HWY_INLINE hn::Vec<DU8> Codes8(uint32_t word) {
  const DU8 du;
  const auto shifts = hn::Mul(hn::Iota(du, 0), hn::Set(du, uint32_t(kBits)));
  return hn::And(hn::Shr(hn::Set(du, word), shifts), hn::Set(du, (1u << kBits) - 1u));
}

// A turbo codebook as two 8-lane tables (turbo3 uses the first).
struct KvBook {
  V8 lo, hi;
};

// Values [i, i+8) of a row of a float type (the centroids for turbo; q types: code or nibble − 8).
template <KvType T>
HWY_INLINE V8 Decode8(const uint8_t* row, int64_t i, const KvBook& book) {
  const D8 d;
  const DI8 di;
  if constexpr (T == KvType::kF32) {
    return hn::LoadU(d, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (T == KvType::kBF16) {
    const hn::Rebind<uint16_t, DI8> d16;
    const auto w = hn::PromoteTo(DU8(), hn::LoadU(d16, reinterpret_cast<const uint16_t*>(row) + i));
    return hn::BitCast(d, hn::ShiftLeft<16>(w));
  } else if constexpr (T == KvType::kTurbo4) {
    uint32_t w;
    std::memcpy(&w, row + 4 + i / 2, 4);
    const auto c = hn::BitCast(di, Codes8<4>(w));
#if HWY_TARGET != HWY_AVX2
    // AVX-512VL: one two-table permute (index bit 3 picks the table).
    return V8{_mm256_permutex2var_ps(book.lo.raw, c.raw, book.hi.raw)};
#endif
    const auto idx = hn::And(c, hn::Set(di, 7));
    const V8 lo = hn::TableLookupLanes(book.lo, hn::IndicesFromVec(d, idx));
    const V8 hi = hn::TableLookupLanes(book.hi, hn::IndicesFromVec(d, idx));
    return hn::IfThenElse(hn::RebindMask(d, hn::Gt(c, hn::Set(di, 7))), hi, lo);
  } else if constexpr (T == KvType::kTurbo3) {
    // The group's 3 bytes as the top of a 4-byte load that starts one byte before them (inside
    // the row: the scale precedes the codes), so no byte past the row is read.
    uint32_t w;
    std::memcpy(&w, row + 3 + i / 8 * 3, 4);
    w >>= 8;
    return hn::TableLookupLanes(book.lo, hn::IndicesFromVec(d, hn::BitCast(di, Codes8<3>(w))));
  } else if constexpr (T == KvType::kQ8_0) {
    const hn::Rebind<int8_t, DI8> d8;
    const int8_t* q = reinterpret_cast<const int8_t*>(row + i / 32 * 34 + 2 + i % 32);
    return hn::ConvertTo(d, hn::PromoteTo(di, hn::LoadU(d8, q)));
  } else {  // kQ4_0: chunk c of its block: bytes (c % 2)·8.., low nibbles for c < 2, else high
    const hn::Rebind<uint8_t, DI8> d8;
    const int64_t c = i % 32 / 8;
    const uint8_t* qs = row + i / 32 * 18 + 2 + (c % 2) * 8;
    auto v = hn::PromoteTo(di, hn::LoadU(d8, qs));
    if (c >= 2) v = hn::ShiftRight<4>(v);
    return hn::ConvertTo(d, hn::Sub(hn::And(v, hn::Set(di, 15)), hn::Set(di, 8)));
  }
}

KvBook MakeKvBook(KvType t, int64_t hd) {
  const D8 d;
  if (t != KvType::kTurbo4 && t != KvType::kTurbo3) return {hn::Zero(d), hn::Zero(d)};
  const float* c = kv_turbo_codebook(t, hd);
  return {hn::LoadU(d, c), t == KvType::kTurbo4 ? hn::LoadU(d, c + 8) : hn::Zero(d)};
}

// A float-type score from its accumulator (lane l: partial l of the header): the f32/bf16 tail
// past the last whole vector in the same chains, the tree, the row's scale (turbo), the scale.
template <KvType T>
HWY_INLINE float FinishFloat(V8 acc, const uint8_t* row, const float* qf, int64_t hd, float scale) {
  HWY_ALIGN float p[8];
  hn::Store(acc, D8(), p);
  for (int64_t i = hd / 8 * 8; i < hd; ++i) {
    float v;
    if constexpr (T == KvType::kF32) {
      std::memcpy(&v, row + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, row + 2 * i, 2);
      v = core::bf16_to_f32(h);
    }
    p[i % 8] = std::fma(qf[i], v, p[i % 8]);
  }
  const float t = Tree8(p);
  return T == KvType::kTurbo4 || T == KvType::kTurbo3 ? (t * LoadF32(row)) * scale : t * scale;
}

// Float-type scores, four rows at a time (independent FMA chains).
template <KvType T>
void ScoresFloat(const PreparedQuery& q, const uint8_t* k, int64_t stride, int64_t n, float scale,
                 float* s) {
  const D8 d;
  const int64_t hd = q.format.head_dim, hv = hd / 8 * 8;
  const KvBook book = MakeKvBook(T, hd);
  const float* qf = q.f.data();
  auto finish = [&](V8 acc, int64_t j) {
    s[j] = FinishFloat<T>(acc, k + j * stride, qf, hd, scale);
  };
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    V8 acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
    for (int64_t i = 0; i < hv; i += 8) {
      const V8 qv = hn::LoadU(d, qf + i);
      for (int r = 0; r < 4; ++r)
        acc[r] = hn::MulAdd(qv, Decode8<T>(k + (j + r) * stride, i, book), acc[r]);
    }
    for (int r = 0; r < 4; ++r) finish(acc[r], j + r);
  }
  for (; j < n; ++j) {
    V8 acc = hn::Zero(d);
    for (int64_t i = 0; i < hv; i += 8)
      acc = hn::MulAdd(hn::LoadU(d, qf + i), Decode8<T>(k + j * stride, i, book), acc);
    finish(acc, j);
  }
}

// The eight four-byte sums of a block: lane l = Σ_m a[4l+m]·b[4l+m], a unsigned, b signed (exact:
// vpmaddubsw's pairs stay below 2^15 since |a|, |b| ≤ 127 for q8_0 and a ≤ 15 for q4_0).
HWY_INLINE __m256i Quads(__m256i a, __m256i b) {
#if HWY_TARGET == HWY_AVX3_DL
  // vpdpbusd (AVX-512 VNNI + VL, EVEX): the intrinsic does not compile inside Highway 1.0.3's
  // AVX3_DL target (kernels/cpu/vec_x86-inl.h); the target is dispatched only on VNNI CPUs.
  __m256i acc = _mm256_setzero_si256();
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
#else
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}

// Block b's quads of a q8_0 or q4_0 row against the prepared query (q4_0: minus 8·Σ quad of q).
template <KvType T>
HWY_INLINE __m256i BlockQuads(const uint8_t* row, int64_t b, const PreparedQuery& q) {
  const __m256i qv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.q8.data() + 32 * b));
  if constexpr (T == KvType::kQ8_0) {
    const __m256i kv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 34 + 2));
    // |k| unsigned times q with k's sign: the products of k·q.
    return Quads(_mm256_sign_epi8(kv, kv), _mm256_sign_epi8(qv, kv));
  } else {
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 18 + 2));
    const __m128i m = _mm_set1_epi8(15);
    const __m256i nib =
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m), _mm_and_si128(qs, m));
    const __m256i off =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.quad8.data() + 8 * b));
    return _mm256_sub_epi32(Quads(nib, qv), off);
  }
}

template <KvType T>
void ScoresInt(const PreparedQuery& q, const uint8_t* k, int64_t stride, int64_t n, float scale,
               float* s) {
  const int64_t blocks = q.format.head_dim / 32;
  int64_t j = 0;
  auto run = [&](auto rows_c) {
    constexpr int kR = decltype(rows_c)::value;
    __m256 acc[kR];
    for (int r = 0; r < kR; ++r) acc[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b)
      for (int r = 0; r < kR; ++r) {
        const uint8_t* row = k + (j + r) * stride;
        const __m256 sc = _mm256_set1_ps(q.d[size_t(b)] * BlockScale(T, row, b));
        acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(BlockQuads<T>(row, b, q)), sc, acc[r]);
      }
    for (int r = 0; r < kR; ++r) {
      HWY_ALIGN float p[8];
      _mm256_store_ps(p, acc[r]);
      s[j + r] = Tree8(p) * scale;
    }
  };
  for (; j + 4 <= n; j += 4) run(std::integral_constant<int, 4>());
  for (; j < n; ++j) run(std::integral_constant<int, 1>());
}

// kQ queries against each row: the row decoded once, each query's chain as kv_scores runs it.
template <KvType T, int kQ>
void ScoresFloatMany(const PreparedQuery* const* q, const uint8_t* k, int64_t stride, int64_t n,
                     float scale, float* const* s) {
  const D8 d;
  const int64_t hd = q[0]->format.head_dim, hv = hd / 8 * 8;
  const KvBook book = MakeKvBook(T, hd);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = k + j * stride;
    V8 acc[kQ];
    for (int a = 0; a < kQ; ++a) acc[a] = hn::Zero(d);
    for (int64_t i = 0; i < hv; i += 8) {
      const V8 v = Decode8<T>(row, i, book);
      for (int a = 0; a < kQ; ++a) acc[a] = hn::MulAdd(hn::LoadU(d, q[a]->f.data() + i), v, acc[a]);
    }
    for (int a = 0; a < kQ; ++a) s[a][j] = FinishFloat<T>(acc[a], row, q[a]->f.data(), hd, scale);
  }
}

template <KvType T, int kQ>
void ScoresIntMany(const PreparedQuery* const* q, const uint8_t* k, int64_t stride, int64_t n,
                   float scale, float* const* s) {
  const int64_t blocks = q[0]->format.head_dim / 32;
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = k + j * stride;
    __m256 acc[kQ];
    for (int a = 0; a < kQ; ++a) acc[a] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
      const float dk = BlockScale(T, row, b);
      __m256i ku, kraw = _mm256_setzero_si256();
      if constexpr (T == KvType::kQ8_0) {
        kraw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + b * 34 + 2));
        ku = _mm256_sign_epi8(kraw, kraw);
      } else {
        const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + b * 18 + 2));
        const __m128i m = _mm_set1_epi8(15);
        ku = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), m), _mm_and_si128(qs, m));
      }
      for (int a = 0; a < kQ; ++a) {
        const __m256i qv =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[a]->q8.data() + 32 * b));
        __m256i quads;
        if constexpr (T == KvType::kQ8_0) {
          quads = Quads(ku, _mm256_sign_epi8(qv, kraw));
        } else {
          const __m256i off =
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q[a]->quad8.data() + 8 * b));
          quads = _mm256_sub_epi32(Quads(ku, qv), off);
        }
        acc[a] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(quads), _mm256_set1_ps(q[a]->d[size_t(b)] * dk),
                                 acc[a]);
      }
    }
    for (int a = 0; a < kQ; ++a) {
      HWY_ALIGN float p[8];
      _mm256_store_ps(p, acc[a]);
      s[a][j] = Tree8(p) * scale;
    }
  }
}

template <int kQ>
void ScoresManyOf(const PreparedQuery* const* q, const uint8_t* k, int64_t stride, int64_t n,
                  float scale, float* const* s) {
  switch (q[0]->format.type) {
    case KvType::kF32:
      return ScoresFloatMany<KvType::kF32, kQ>(q, k, stride, n, scale, s);
    case KvType::kBF16:
      return ScoresFloatMany<KvType::kBF16, kQ>(q, k, stride, n, scale, s);
    case KvType::kQ8_0:
      return ScoresIntMany<KvType::kQ8_0, kQ>(q, k, stride, n, scale, s);
    case KvType::kQ4_0:
      return ScoresIntMany<KvType::kQ4_0, kQ>(q, k, stride, n, scale, s);
    case KvType::kTurbo4:
      return ScoresFloatMany<KvType::kTurbo4, kQ>(q, k, stride, n, scale, s);
    case KvType::kTurbo3:
      return ScoresFloatMany<KvType::kTurbo3, kQ>(q, k, stride, n, scale, s);
  }
}

void ScoresManyImpl(const PreparedQuery* const* q, int nq, const uint8_t* k, int64_t stride,
                    int64_t n, float scale, float* const* s) {
  for (int i = 0; i < nq; i += 4) {
    switch (std::min(4, nq - i)) {
      case 1:
        ScoresManyOf<1>(q + i, k, stride, n, scale, s + i);
        break;
      case 2:
        ScoresManyOf<2>(q + i, k, stride, n, scale, s + i);
        break;
      case 3:
        ScoresManyOf<3>(q + i, k, stride, n, scale, s + i);
        break;
      default:
        ScoresManyOf<4>(q + i, k, stride, n, scale, s + i);
        break;
    }
  }
}

// acc[0, hd) += w_j·a_j·v_j over the rows in order, slabs of kV vectors held in registers while
// the rows stream past; a_j is the row's scale (turbo) or its block's (q types), 1 otherwise.
template <KvType T, int kV>
HWY_INLINE void ValuesSlab(const float* w, const uint8_t* v, int64_t stride, int64_t n, int64_t i0,
                           const KvBook& book, float* acc) {
  const D8 d;
  V8 a[kV];
  for (int c = 0; c < kV; ++c) a[c] = hn::LoadU(d, acc + i0 + 8 * c);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* row = v + j * stride;
    float coef = w[j];
    if constexpr (T == KvType::kTurbo4 || T == KvType::kTurbo3) coef = w[j] * LoadF32(row);
    for (int c = 0; c < kV; ++c) {
      const int64_t i = i0 + 8 * c;
      if constexpr (T == KvType::kQ8_0 || T == KvType::kQ4_0)
        if (c == 0 || i % 32 == 0) coef = w[j] * BlockScale(T, row, i / 32);
      a[c] = hn::MulAdd(hn::Set(d, coef), Decode8<T>(row, i, book), a[c]);
    }
  }
  for (int c = 0; c < kV; ++c) hn::StoreU(a[c], d, acc + i0 + 8 * c);
}

template <KvType T>
void KvValuesOf(const KvFormat& f, const float* w, const uint8_t* v, int64_t stride, int64_t n,
                float* acc) {
  const int64_t hd = f.head_dim, hv = hd / 8 * 8;
  const KvBook book = MakeKvBook(T, hd);
  int64_t i = 0;
  for (; i + 64 <= hv; i += 64) ValuesSlab<T, 8>(w, v, stride, n, i, book, acc);
  for (; i < hv; i += 8) ValuesSlab<T, 1>(w, v, stride, n, i, book, acc);
  for (; i < hd; ++i)  // f32/bf16 tails: per element the same FMAs, rows in order
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* row = v + j * stride;
      float x;
      if constexpr (T == KvType::kF32) {
        std::memcpy(&x, row + 4 * i, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, row + 2 * i, 2);
        x = core::bf16_to_f32(h);
      }
      acc[i] = std::fma(w[j], x, acc[i]);
    }
}

void ScoresImpl(const PreparedQuery& q, const uint8_t* k, int64_t stride, int64_t n, float scale,
                float* s) {
  switch (q.format.type) {
    case KvType::kF32:
      return ScoresFloat<KvType::kF32>(q, k, stride, n, scale, s);
    case KvType::kBF16:
      return ScoresFloat<KvType::kBF16>(q, k, stride, n, scale, s);
    case KvType::kQ8_0:
      return ScoresInt<KvType::kQ8_0>(q, k, stride, n, scale, s);
    case KvType::kQ4_0:
      return ScoresInt<KvType::kQ4_0>(q, k, stride, n, scale, s);
    case KvType::kTurbo4:
      return ScoresFloat<KvType::kTurbo4>(q, k, stride, n, scale, s);
    case KvType::kTurbo3:
      return ScoresFloat<KvType::kTurbo3>(q, k, stride, n, scale, s);
  }
}

void ValuesImpl(const KvFormat& f, const float* w, const uint8_t* v, int64_t stride, int64_t n,
                float* acc) {
  switch (f.type) {
    case KvType::kF32:
      return KvValuesOf<KvType::kF32>(f, w, v, stride, n, acc);
    case KvType::kBF16:
      return KvValuesOf<KvType::kBF16>(f, w, v, stride, n, acc);
    case KvType::kQ8_0:
      return KvValuesOf<KvType::kQ8_0>(f, w, v, stride, n, acc);
    case KvType::kQ4_0:
      return KvValuesOf<KvType::kQ4_0>(f, w, v, stride, n, acc);
    case KvType::kTurbo4:
      return KvValuesOf<KvType::kTurbo4>(f, w, v, stride, n, acc);
    case KvType::kTurbo3:
      return KvValuesOf<KvType::kTurbo3>(f, w, v, stride, n, acc);
  }
}
#else
// No eight-lane FMA target: the reference loops are this target's kernel.
void ScoresImpl(const PreparedQuery& q, const uint8_t* k, int64_t stride, int64_t n, float scale,
                float* s) {
  kv_scores_ref(q, k, stride, n, scale, s);
}
void ScoresManyImpl(const PreparedQuery* const* q, int nq, const uint8_t* k, int64_t stride,
                    int64_t n, float scale, float* const* s) {
  kv_scores_many_ref(q, nq, k, stride, n, scale, s);
}
void ValuesImpl(const KvFormat& f, const float* w, const uint8_t* v, int64_t stride, int64_t n,
                float* acc) {
  kv_values_ref(f, w, v, stride, n, acc);
}
#endif

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(ScoresImpl);
HWY_EXPORT(ValuesImpl);
HWY_EXPORT(ScoresManyImpl);

void kv_scores_many(const PreparedQuery* const* q, int nq, const uint8_t* k_rows, int64_t stride,
                    int64_t n, float scale, float* const* s) {
  for (int i = 1; i < nq; ++i) {
    QWEN35_CHECK(q[i]->format.type == q[0]->format.type &&
                 q[i]->format.head_dim == q[0]->format.head_dim);
  }
  if (nq > 0) HWY_DYNAMIC_DISPATCH(ScoresManyImpl)(q, nq, k_rows, stride, n, scale, s);
}

void kv_scores(const PreparedQuery& q, const uint8_t* k_rows, int64_t stride, int64_t n,
               float scale, float* s) {
  HWY_DYNAMIC_DISPATCH(ScoresImpl)(q, k_rows, stride, n, scale, s);
}
void kv_values(const KvFormat& f, const float* w, const uint8_t* v_rows, int64_t stride, int64_t n,
               float* acc) {
  HWY_DYNAMIC_DISPATCH(ValuesImpl)(f, w, v_rows, stride, n, acc);
}
}  // namespace qwen35::kernels::cpu
#endif
