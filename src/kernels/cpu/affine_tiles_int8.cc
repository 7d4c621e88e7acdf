// The fast mode's affine tile loops (int8 activations, integer dot products), one instantiation
// per code width and the IQ4 code book, for matmul.cc's dispatch (affine_tiles-inl.h). Highway
// compiles this file once per SIMD target, the same targets as matmul.cc.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/affine_tiles_int8.cc"
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

void TiledRangeInt8(const Matrix& m, const AffineActs& a, int64_t t0, int64_t t1, int64_t o0, int64_t o1,
                    float* y, MatmulScratch::Share& share) {
  switch (m.bits) {
    case 4:
      if (m.book) RangeAffine<4, true, true>(m, a, t0, t1, o0, o1, y, share);
      else RangeAffine<4, true>(m, a, t0, t1, o0, o1, y, share);
      break;
    case 8: RangeAffine<8, true>(m, a, t0, t1, o0, o1, y, share); break;
    case 2: RangeAffine<2, true>(m, a, t0, t1, o0, o1, y, share); break;
    case 3: RangeAffine<3, true>(m, a, t0, t1, o0, o1, y, share); break;
    case 5: RangeAffine<5, true>(m, a, t0, t1, o0, o1, y, share); break;
    default: RangeAffine<6, true>(m, a, t0, t1, o0, o1, y, share); break;
  }
}

}  // namespace qwen35::kernels::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
