// SIMD kernels (Highway dynamic dispatch) of the gated delta rule for one value head: the
// recurrent step and the chunked UT form. Tested against the scalar reference on every target.
#pragma once

#include <cstdint>

namespace qwen35::kernels::cpu {

// One token of the gated delta rule on state S [dk, dv] (row-major, updated in place):
//   kv = decay · Σ_i k_i S_i;  u = β (v − kv);  S_i ← decay · S_i + k_i u;  o = Σ_i q_i S_i.
// Column blocks are finished one at a time (a block's u depends only on its own columns), so
// the state is read and written once and the second touch hits L1.
void delta_step(float* S, const float* k, const float* q, const float* v, float decay, float beta,
                int64_t dk, int64_t dv, float* o);

// The n rows (n <= 64) of one value head as one chunk of the UT-transform form. Row t of q, k
// starts at q + t*qk_stride (k likewise), g and beta at t*gb_stride, v at t*v_stride, the output
// at out + t*out_stride. scratch: 2*n + n*n + 2*n*dv + n*dk + max(n, dk) floats.
struct DeltaChunk {
  int64_t n, dk, dv;
  const float *q, *k;
  int64_t qk_stride;
  const float *g, *beta;
  int64_t gb_stride;
  const float* v;
  int64_t v_stride;
  float* S;
  float* out;
  int64_t out_stride;
  float* scratch;
};
void delta_chunk(const DeltaChunk& c);

}  // namespace qwen35::kernels::cpu
