// LayerNorm of one row: the mean and the variance by vector sums, then the affine map.
//
// Highway compiles this file once per SIMD target (foreach_target) and dispatches at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/layer_norm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <cmath>

#include "kernels/cpu/layer_norm.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, 16>;

// Σ f(x[i]) over x[n]: four vector accumulators over blocks of 4N (independent chains), added
// pairwise, their lanes summed, then the scalar tail in order.
template <class F, class G>
HWY_INLINE float SumOf(const float* x, int64_t n, F f, G g) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  auto a0 = hn::Zero(df), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    a0 = f(df, hn::LoadU(df, x + i), a0);
    a1 = f(df, hn::LoadU(df, x + i + N), a1);
    a2 = f(df, hn::LoadU(df, x + i + 2 * N), a2);
    a3 = f(df, hn::LoadU(df, x + i + 3 * N), a3);
  }
  for (; i + N <= n; i += N) a0 = f(df, hn::LoadU(df, x + i), a0);
  float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) s += g(x[i]);
  return s;
}

void LayerNormRowImpl(const float* x, int64_t dim, const float* w, const float* b, float eps, float* out) {
  const DF df;
  const int64_t N = int64_t(hn::Lanes(df));
  const float mean = SumOf(x, dim, [](DF, hn::Vec<DF> v, hn::Vec<DF> acc) { return hn::Add(acc, v); },
                           [](float v) { return v; }) / float(dim);
  const auto vm = hn::Set(df, mean);
  const float var = SumOf(x, dim, [&](DF, hn::Vec<DF> v, hn::Vec<DF> acc) {
                            const auto c = hn::Sub(v, vm);
                            return hn::MulAdd(c, c, acc);
                          },
                          [&](float v) { return (v - mean) * (v - mean); }) / float(dim);
  const float inv = 1.0f / std::sqrt(var + eps);
  const auto vi = hn::Set(df, inv);
  int64_t i = 0;
  for (; i + N <= dim; i += N) {
    const auto c = hn::Sub(hn::LoadU(df, x + i), vm);
    hn::StoreU(hn::MulAdd(c, hn::Mul(vi, hn::LoadU(df, w + i)), hn::LoadU(df, b + i)), df, out + i);
  }
  for (; i < dim; ++i) out[i] = (x[i] - mean) * (inv * w[i]) + b[i];
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace qwen35::kernels::cpu {
HWY_EXPORT(LayerNormRowImpl);

void layer_norm_row(const float* x, int64_t dim, const float* w, const float* b, float eps, float* out) {
  HWY_DYNAMIC_DISPATCH(LayerNormRowImpl)(x, dim, w, b, eps, out);
}
}  // namespace qwen35::kernels::cpu
#endif
