// The activation functions in SIMD (Highway's Exp, a few ulp from std::exp), for the kernels of
// every target; kernels/math.h holds their scalar twins.
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

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // QWEN35_KERNELS_CPU_MATH_INL_H_
