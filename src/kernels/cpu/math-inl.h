// The activation functions in SIMD (Highway's Exp, a few ulp from std::exp), for the kernels of
// every target; kernels/math.h holds the scalar twins of SiLU (the GELUs run their tails through
// the vector forms).
#if defined(QWEN35_KERNELS_CPU_MATH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef QWEN35_KERNELS_CPU_MATH_INL_H_
#undef QWEN35_KERNELS_CPU_MATH_INL_H_
#else
#define QWEN35_KERNELS_CPU_MATH_INL_H_
#endif

#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// silu(a) = a / (1 + e^-a), per lane.
template <class D>
HWY_INLINE hn::Vec<D> SiluV(D d, hn::Vec<D> a) {
  return hn::Div(a, hn::Add(hn::Set(d, 1.0f), hn::Exp(d, hn::Neg(a))));
}

// GELU, tanh form: 0.5·x·(1 + tanh(u)) with u = √(2/π)·(x + 0.044715·x³), computed as
// x·sigmoid(2u) = x / (1 + e^(−2u)) (the same function; no cancellation in 1 + tanh(u) for x < 0).
// Relative error at most (8 + 6·|2u|)·2⁻²⁴ (the |2u| term: the rounding of u, which e^(−2u) turns
// into an error of the exponent; it counts for x < 0 only, where e^(−2u) dominates); measured
// 2.6·(1 + |2u|)·2⁻²⁴. Never NaN for finite x: e^(−2u) overflows to +inf for −2u > 88.7 (clamped
// to 100, inside Highway's Exp's valid range), giving −0.
template <class D>
HWY_INLINE hn::Vec<D> GeluTanhV(D d, hn::Vec<D> x) {
  const auto c1 = hn::Set(d, 1.5957691216057308f);     // 2·√(2/π)
  const auto c2 = hn::Set(d, 0.071354816197061f);      // 2·√(2/π)·0.044715
  const auto u2 = hn::Mul(x, hn::MulAdd(c2, hn::Mul(x, x), c1));
  const auto e = hn::Exp(d, hn::Min(hn::Neg(u2), hn::Set(d, 100.0f)));
  return hn::Div(x, hn::Add(hn::Set(d, 1.0f), e));
}

// erfc(z) for z = a/√2, a ≥ 0 (a ≤ 14.5; erfc is 0 in float beyond), to a relative error of a few
// ulp: erfc(z) = t·e^(P(t) − z²) with t = 1/(1 + z/2) and P a degree-10 least-squares fit of
// log(erfc(z)·e^(z²)/t) over z ∈ [0, 10] (fit error 7·10⁻⁹; P is held at its z = 10 value beyond).
// z² = a²/2 is split exactly into hi + lo (Dekker's product), so the large exponent −hi/2 is exact
// and e^(−hi/2) within 1 ulp. At most 16 ulp in all; measured 6.4.
template <class D>
HWY_INLINE hn::Vec<D> ErfcHalfSqrt2V(D d, hn::Vec<D> a) {
  const hn::RebindToUnsigned<D> du;
  const auto one = hn::Set(d, 1.0f), half = hn::Set(d, 0.5f);
  const auto t = hn::Div(one, hn::MulAdd(a, hn::Set(d, 0.35355339059327373f), one));  // 1/(1 + a/(2√2))
  const auto s = hn::Max(hn::MulAdd(t, hn::Set(d, 2.4f), hn::Set(d, -1.4f)), hn::Set(d, -1.0f));
  constexpr float kP[] = {-0.5585953537279242f,    0.5703071029766138f,     0.015745074072069612f,
                          -0.029470336857998256f,  -0.001045551834992518f,  0.0037074767402928335f,
                          -0.000275961158036545f,  -0.0005343206104018358f, 0.00012986821437918785f,
                          5.486024679573908e-05f,  -2.2855769688377016e-05f};
  auto p = hn::Set(d, kP[10]);
  for (int i = 9; i >= 0; --i) p = hn::MulAdd(p, s, hn::Set(d, kP[i]));
  // a² = hi + lo exactly: a = ah + al with 12 significant bits in ah, so every partial product
  // below is exact in float.
  const auto ah = hn::BitCast(d, hn::And(hn::BitCast(du, a), hn::Set(du, 0xFFFFF000u)));
  const auto al = hn::Sub(a, ah);
  const auto hi = hn::Mul(a, a);
  const auto lo = hn::Add(hn::Add(hn::Sub(hn::Mul(ah, ah), hi), hn::Mul(hn::Add(ah, ah), al)), hn::Mul(al, al));
  const auto big = hn::Exp(d, hn::Neg(hn::Mul(hi, half)));
  const auto small = hn::Exp(d, hn::Sub(p, hn::Mul(lo, half)));
  return hn::Mul(t, hn::Mul(big, small));
}

// GELU, erf form: x·Φ(x) with Φ(x) = 0.5·erfc(−x/√2): 0.5·erfc(|x|/√2) for x < 0 (relative
// accuracy in the tail) and 1 − 0.5·erfc(x/√2) for x ≥ 0. Never NaN for finite x.
template <class D>
HWY_INLINE hn::Vec<D> GeluErfV(D d, hn::Vec<D> x) {
  const auto a = hn::Min(hn::Abs(x), hn::Set(d, 14.5f));
  const auto h = hn::Mul(hn::Set(d, 0.5f), ErfcHalfSqrt2V(d, a));
  const auto phi = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), h, hn::Sub(hn::Set(d, 1.0f), h));
  return hn::Mul(x, phi);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QWEN35_KERNELS_CPU_MATH_INL_H_
