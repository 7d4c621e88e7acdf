// SIMD kernels (Highway dynamic dispatch) for the per-sequence parts of the Gated DeltaNet layer:
// one token of the recurrent delta rule for one value head, and the depthwise causal conv1d + SiLU
// over a range of channels. Each has its portable twin in cpu_ops.cc (used where these do not
// apply) and is tested against the scalar reference on every compiled target.
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

// Causal attention of one query row over cache positions 0..n_pos-1 (keys and values at
// k + j*stride, v + j*stride): o[hd] = softmax_j(q·k_j · scale) v_j, by an online softmax over
// blocks of 64 keys (one pass over the cache). s: 64 floats of scratch.
void attend(const float* q, const float* k, const float* v, int64_t stride, int64_t n_pos, int64_t hd,
            float scale, float* s, float* o);
// The same for nq query rows against one cache (the query heads that share a key/value head, at
// one or more positions): query i sees positions 0..n_pos[i]-1, and each 64-key block is read once
// for all of them. Each query's arithmetic is attend's: o[i] gets the same bits as alone.
// s: 64·nq floats of scratch, m: 2·nq floats.
void attend_many(const float* const* q, const int64_t* n_pos, int nq, const float* k, const float* v,
                 int64_t stride, int64_t hd, float scale, float* s, float* m, float* const* o);

// Depthwise causal conv1d + SiLU on channels [c0, c1) of x [n, ch] with weights w [ch, kernel]
// and the previous inputs in state [kernel-1, ch] (oldest first, updated). out [n, ch].
// Returns false (and does nothing) for a kernel wider than the SIMD version handles.
bool conv1d_silu_channels(const float* x, int64_t n, int64_t ch, const float* w, int64_t kernel,
                          float* state, float* out, int64_t c0, int64_t c1);

// Elementwise SiLU gates in SIMD (Highway's Exp, a few ulp from std::exp):
// out[i] = silu(g[i])·u[i] (SwiGLU), and x[i] *= silu(z[i]) (the GDN output gate).
void silu_mul(const float* g, const float* u, int64_t n, float* out);
void mul_silu(float* x, const float* z, int64_t n);

}  // namespace qwen35::kernels::cpu
