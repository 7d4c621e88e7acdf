// The AMX tile kernel's float step (amx_tiles.h): one group's int32 sums of a 16 × 16 tile scaled
// into the accumulators, sixteen activation rows a vector (eight on AVX2). Every lane performs
// RowScalar8's two fused multiply-adds, so the bits do not depend on the target: the vector
// targets use their fused MulAdd, the others std::fma. Highway compiles this file once per SIMD
// target and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/amx_scale.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <cmath>
#include <cstdint>

#include "kernels/cpu/amx_tiles.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AmxScaleGroupImpl(const int32_t* c, const float* s, const float* b, const float* dx, const float* xs, int nr,
                       float* acc) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
  // The targets whose MulAdd is one fused instruction (FMA3).
  const hn::CappedTag<float, 16> df;
  const hn::RebindToSigned<decltype(df)> di;
  constexpr int kLanesMax = 16;
  const int N = int(hn::Lanes(df));
  for (int l = 0; l < nr; ++l) {
    const auto vs = hn::Set(df, s[l]), vb = hn::Set(df, b[l]);
    for (int r = 0; r < kLanesMax; r += N) {
      const auto isum = hn::ConvertTo(df, hn::LoadU(di, c + l * 16 + r));
      auto a = hn::LoadU(df, acc + l * 16 + r);
      a = hn::MulAdd(isum, hn::Mul(vs, hn::LoadU(df, dx + r)), a);
      a = hn::MulAdd(vb, hn::LoadU(df, xs + r), a);
      hn::StoreU(a, df, acc + l * 16 + r);
    }
  }
#else
  for (int l = 0; l < nr; ++l)
    for (int r = 0; r < 16; ++r) {
      float& a = acc[l * 16 + r];
      a = std::fma(float(c[l * 16 + r]), s[l] * dx[r], a);
      a = std::fma(b[l], xs[r], a);
    }
#endif
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu::amx {
HWY_EXPORT(AmxScaleGroupImpl);

void scale_group(const int32_t* c, const float* s, const float* b, const float* dx, const float* xs, int nr,
                 float* acc) {
  HWY_DYNAMIC_DISPATCH(AmxScaleGroupImpl)(c, s, b, dx, xs, nr, acc);
}
}  // namespace qwen35::kernels::cpu::amx
#endif
