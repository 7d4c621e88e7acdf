// Elementwise kernels: SwiGLU's silu(g)·u, the GDN output gate x·silu(z), the vision tower's GELUs
// and its bias add.
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/elementwise.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/cpu/math-inl.h"
#include "kernels/math.h"
// Once per target:
#include <algorithm>
#include <cmath>

#include "kernels/cpu/elementwise.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;

void SiluMulImpl(const float* g, const float* u, int64_t n, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(SiluV(df, hn::LoadU(df, g + i)), hn::LoadU(df, u + i)), df, out + i);
  for (; i < n; ++i) out[i] = silu(g[i]) * u[i];
}

void MulSiluImpl(float* x, const float* z, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), SiluV(df, hn::LoadU(df, z + i))), df, x + i);
  for (; i < n; ++i) x[i] *= silu(z[i]);
}

// x = f(x) over x[n] with a vector function; the tail goes through a padded vector so that every
// element gets the same arithmetic wherever it lies in the row.
template <class F>
HWY_INLINE void MapInPlace(float* x, int64_t n, F f) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(df, hn::LoadU(df, x + i)), df, x + i);
  if (i < n) {
    HWY_ALIGN float tail[hn::MaxLanes(DF())] = {};
    std::copy(x + i, x + n, tail);
    hn::Store(f(df, hn::Load(df, tail)), df, tail);
    std::copy(tail, tail + (n - i), x + i);
  }
}

void GeluImpl(float* x, int64_t n, bool tanh_form) {
  if (tanh_form) MapInPlace(x, n, [](DF d, hn::Vec<DF> v) { return GeluTanhV(d, v); });
  else MapInPlace(x, n, [](DF d, hn::Vec<DF> v) { return GeluErfV(d, v); });
}

void AddImpl(float* y, const float* b, int64_t n) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::LoadU(df, b + i)), df, y + i);
  for (; i < n; ++i) y[i] += b[i];
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(MulSiluImpl);
HWY_EXPORT(GeluImpl);
HWY_EXPORT(AddImpl);

void silu_mul(const float* g, const float* u, int64_t n, float* out) { HWY_DYNAMIC_DISPATCH(SiluMulImpl)(g, u, n, out); }
void mul_silu(float* x, const float* z, int64_t n) { HWY_DYNAMIC_DISPATCH(MulSiluImpl)(x, z, n); }
void gelu(float* x, int64_t n, bool tanh_form) { HWY_DYNAMIC_DISPATCH(GeluImpl)(x, n, tanh_form); }
void add(float* y, const float* b, int64_t n) { HWY_DYNAMIC_DISPATCH(AddImpl)(y, b, n); }
}  // namespace qwen35::kernels::cpu
#endif
