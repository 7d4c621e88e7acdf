// The exact mode's affine tile loops (2/4/8-bit codes times fp32 activations), one instantiation
// per code width, for matmul.cc's dispatch (affine_tiles-inl.h). Highway compiles this file once
// per SIMD target, the same targets as matmul.cc.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/affine_tiles_exact.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// Once per target:
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"

HWY_BEFORE_NAMESPACE();
namespace qwen35::kernels::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The parts the tile loop builds on, in matmul.cc's order.
#include "kernels/cpu/vec_x86-inl.h"
#include "kernels/cpu/mlx_codes-inl.h"
#include "kernels/cpu/affine_exact-inl.h"
#include "kernels/cpu/affine_int8-inl.h"
#include "kernels/cpu/affine_tiles-inl.h"

void TiledRangeExact(const Matrix& m, const AffineActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                     float* y, MatmulScratch::Share& share) {
  if (m.bits == 4) RangeAffine<4, false>(m, a, t0, t1, o0, o1, y, share);
  else if (m.bits == 8) RangeAffine<8, false>(m, a, t0, t1, o0, o1, y, share);
  else RangeAffine<2, false>(m, a, t0, t1, o0, o1, y, share);
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
