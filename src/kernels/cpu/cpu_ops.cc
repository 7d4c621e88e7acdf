// Threaded CPU kernels. Work is split over independent outputs (matrix rows, tokens, heads,
// channels); every reduction runs inside one work item in a fixed order, so results do not depend
// on the batch size or the thread count (docs/design.md §6). The SIMD kernels (Highway, run-time
// dispatch) live beside this file, one concept each (matmul.cc dispatches the matmul kernels;
// attention.cc, delta_rule.cc, conv1d.cc, elementwise.cc, layer_norm.cc, vision_attention.cc);
// every op's scalar twin is in kernels/ref.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/delta_rule.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/layer_norm.h"
#include "kernels/cpu/vision_attention.h"
#include "kernels/cpu/workspace.h"
#include "kernels/int8_form.h"
#include "kernels/math.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"
#include "kernels/rope.h"

namespace qwen35::kernels {
namespace {

// Sum of a[i]*b[i] with 8 interleaved partial sums and a fixed final tree.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

inline float sum_squares(const float* a, int64_t n) { return dot(a, a, n); }

void rms_norm_row(const float* x, int64_t dim, const float* w, float eps, float* out) {
  const float inv = 1.0f / std::sqrt(sum_squares(x, dim) / float(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = x[i] * inv * w[i];
}

void l2norm_scaled(float* x, int64_t d, float scale) {
  const float inv = scale / std::sqrt(sum_squares(x, d) + 1e-6f);
  for (int64_t i = 0; i < d; ++i) x[i] *= inv;
}

void run(const Context& ctx, size_t n, const core::ThreadPool::RangeFn& fn, size_t grain = 1) {
  if (ctx.pool == nullptr) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  ctx.pool->parallel_for(n, fn, grain);
}

// The query side of attention, shared by every cache format. A work item is a run of
// consecutive positions of one key/value head (positions_per_item): its positions·rep queries
// share every key/value block, read once for all of them. Items go out in a folded order (first,
// last, second, ...) so each thread's contiguous share mixes cheap early positions with costly
// late ones (causal). Each query is normed and rotated into the thread's scratch; attend(ts, kh,
// qp, np, nq, op) runs the queries over head kh's cache; then the output gate, when gated. Each
// query's arithmetic does not depend on its item (attention.h): the same bits whatever the split.
//
// The size of an item: a long prompt's cache outgrows the caches, and each item streams every
// block before its last position from memory, so a call of many rows takes long items (up to 64
// positions: 16× fewer passes over the cache than 4), as long as every thread still gets about
// eight items to balance; a decode row or a short call keeps items of 4.
int64_t positions_per_item(const Context& ctx, int64_t n, int64_t nkv) {
  const int64_t threads = ctx.pool ? std::max(1, ctx.pool->size()) : 1;
  return std::clamp<int64_t>(n * nkv / (8 * threads), 4, 64);
}

template <class Attend>
void attention_items(const Context& ctx, const Ops::AttentionParams& p, const float* qg, int64_t n,
                     int64_t pos0, float* out, cpu::ThreadScratch* threads, Attend&& attend) {
  const int64_t hd = p.head_dim, nkv = p.n_kv_heads, nh = p.n_heads, rep = nh / nkv;
  const int64_t q_row = p.gated ? 2 * hd : hd;  // floats per head in qg
  const int64_t per = positions_per_item(ctx, n, nkv);
  const int64_t items = (n + per - 1) / per * nkv;
  run(ctx, size_t(items), [&](size_t b, size_t e, int tid) {
    const size_t nq_max = size_t(per * rep);
    cpu::ThreadScratch& ts = threads[tid];
    float* qs = cpu::grow(ts.queries, nq_max * size_t(hd));
    const float** qp = cpu::grow(ts.query_rows, nq_max);
    float** op = cpu::grow(ts.out_rows, nq_max);
    int64_t* np = cpu::grow(ts.n_pos, nq_max);
    for (size_t it = b; it < e; ++it) {
      const int64_t f = it % 2 == 0 ? int64_t(it / 2) : items - 1 - int64_t(it / 2);
      const int64_t t0 = f / nkv * per, kh = f % nkv;
      const int64_t t1 = std::min(n, t0 + per);
      int nq = 0;
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t h = kh * rep; h < (kh + 1) * rep; ++h, ++nq) {
          float* q = qs + nq * hd;
          rms_norm_row(qg + (t * nh + h) * q_row, hd, p.q_norm, p.eps, q);
          p.rope(q, t, pos0);
          qp[nq] = q;
          op[nq] = out + (t * nh + h) * hd;
          np[nq] = pos0 + t + 1;
        }
      attend(ts, kh, qp, np, nq, op);
      if (!p.gated) continue;
      nq = 0;
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t h = kh * rep; h < (kh + 1) * rep; ++h, ++nq) {
          const float* gate = qg + (t * nh + h) * 2 * hd + hd;
          for (int64_t i = 0; i < hd; ++i) op[nq][i] *= sigmoid(gate[i]);
        }
    }
  });
}

// The checks every vision attention entry makes (broken invariants of the caller).
void check_vision(const Ops::VisionAttentionParams& p) {
  QWEN35_CHECK_MSG(p.n_heads > 0 && p.head_dim > 0 && p.head_dim % 2 == 0,
                   "vision_attention: n_heads must be positive and head_dim positive and even");
}

// The prepared keys and values of an n-row image in the buffer `kv` (kernels/cpu/vision_attention.h).
cpu::VisionKv vision_kv(const Ops::VisionAttentionParams& p, int64_t n, float* kv) {
  cpu::VisionKv k{n, p.n_heads, p.head_dim, cpu::vision_value_stride(p.head_dim), kv, nullptr};
  if (kv != nullptr) k.v = kv + k.kt_floats();
  return k;
}

class CpuOps final : public Ops {
 public:
  const char* name() const override { return "cpu"; }
  std::unique_ptr<Workspace> new_workspace() const override {
    return std::make_unique<cpu::CpuWorkspace>(this);
  }

  void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w,
              float* y) const override {
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::matmul(ctx, x, n, w, y, cpu::workspace_of(ctx, this, temp).matmul);
  }
  void matmul_many(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws, float* const* ys,
                   int count) const override {
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::matmul_many(ctx, x, n, ws, ys, count, cpu::workspace_of(ctx, this, temp).matmul);
  }

  // The ggml block types in the affine form the int8 tile kernels read, where its shape takes
  // them (the 5-bit form needs rows of whole 512-element blocks); elsewhere they stay exact.
  std::unique_ptr<Int8Form> int8_form(const Matrix& m, core::ThreadPool* pool) const override {
    if (!is_block_type(m.type)) return nullptr;
    const Matrix shape = int8_form_shape(m);
    if (shape.bits == 0 || !(cpu::tiled_affine(shape) || cpu::fast_odd_affine(shape))) return nullptr;
    return make_int8_form(m, pool);
  }

  void embed(const Context& ctx, const Matrix& e, const int32_t* tokens, int64_t n,
             float* out) const override {
    run(ctx, size_t(n), [&](size_t b, size_t en, int) {
      for (size_t t = b; t < en; ++t) decode_row(e, tokens[t], out + int64_t(t) * e.cols);
    });
  }

  void rms_norm(const Context& ctx, const float* x, int64_t n, int64_t dim, const float* w,
                float eps, float* out) const override {
    run(ctx, size_t(n), [&](size_t b, size_t e, int) {
      for (size_t t = b; t < e; ++t) rms_norm_row(x + int64_t(t) * dim, dim, w, eps, out + int64_t(t) * dim);
    }, 4);
  }

  void gated_rms_norm(const Context& ctx, float* x, const float* z, int64_t n, int64_t dim,
                      const float* w, float eps) const override {
    run(ctx, size_t(n), [&](size_t b, size_t e, int) {
      for (size_t t = b; t < e; ++t) {
        float* r = x + int64_t(t) * dim;
        const float* zr = z + int64_t(t) * dim;
        rms_norm_row(r, dim, w, eps, r);
        cpu::mul_silu(r, zr, dim);
      }
    }, 4);
  }

  void swiglu(const Context& ctx, const float* gate, const float* up, int64_t n, int64_t dim,
              int64_t in_stride, float* out) const override {
    run(ctx, size_t(n), [&](size_t b, size_t e, int) {
      for (size_t t = b; t < e; ++t)
        cpu::silu_mul(gate + int64_t(t) * in_stride, up + int64_t(t) * in_stride, dim, out + int64_t(t) * dim);
    }, 4);
  }

  void add_rows(const Context& ctx, const float* x, const float* s, int64_t n, int64_t dim,
                float* y) const override {
    run(ctx, size_t(n), [&](size_t b, size_t e, int) {
      for (int64_t t = int64_t(b); t < int64_t(e); ++t) {
        const float* xr = x + t * dim;
        float* yr = y + t * dim;
        if (s == nullptr) {
          for (int64_t i = 0; i < dim; ++i) yr[i] += xr[i];
        } else {
          const float st = s[t];
          for (int64_t i = 0; i < dim; ++i) yr[i] += st * xr[i];
        }
      }
    }, 4);
  }

  void moe_combine(const Context& ctx, const float* eo, const float* weight, int64_t n, int64_t k,
                   int64_t dim, float* y) const override {
    run(ctx, size_t(n), [&](size_t b, size_t e, int) {
      for (int64_t t = int64_t(b); t < int64_t(e); ++t) {
        float* yr = y + t * dim;
        std::fill_n(yr, dim, 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const float w = weight[t * k + j];
          const float* er = eo + (t * k + j) * dim;
          for (int64_t i = 0; i < dim; ++i) yr[i] += w * er[i];
        }
      }
    }, 4);
  }

  void attention(const Context& ctx, const AttentionParams& p, const float* qg, const float* k,
                 const float* v, int64_t n, int64_t pos0, KvView cache, float* out) const override {
    const int64_t hd = p.head_dim, nkv = p.n_kv_heads;
    QWEN35_CHECK(pos0 + n <= cache.capacity && cache.row == nkv * hd);
    QWEN35_CHECK(p.first_key >= 0 && p.first_key <= pos0);
    if (!cache.f32()) return attention_compressed(ctx, p, qg, k, v, n, pos0, cache, out);
    run(ctx, size_t(n * nkv), [&](size_t b, size_t e, int) {
      for (size_t it = b; it < e; ++it) {
        const int64_t t = int64_t(it) / nkv, h = int64_t(it) % nkv;
        float* kc = cache.k_at(pos0 + t) + h * hd;
        rms_norm_row(k + (t * nkv + h) * hd, hd, p.k_norm, p.eps, kc);
        p.rope(kc, t, pos0);
        std::memcpy(cache.v_at(pos0 + t) + h * hd, v + (t * nkv + h) * hd, size_t(hd) * 4);
      }
    });
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::ThreadScratch* threads = cpu::workspace_of(ctx, this, temp).threads(ctx);
    const float scale = 1.0f / std::sqrt(float(hd));
    attention_items(ctx, p, qg, n, pos0, out, threads,
                    [&](cpu::ThreadScratch& ts, int64_t kh, const float** qp, const int64_t* np,
                        int nq, float** op) {
                      float* s = cpu::grow(ts.scores, size_t(nq) * 64);
                      float* m = cpu::grow(ts.softmax_stats, 2 * size_t(nq));
                      cpu::attend_many(qp, np, nq,
                                       {cache.k_blocks, cache.v_blocks, kh * hd, nkv * hd, p.first_key},
                                       hd, scale, s, m, op);
                    });
  }

  // attention() over a cache of another format (kv_attend.h): each K and V row encoded on its
  // own, then the same work items as the fp32 path (four positions of one KV head).
  void attention_compressed(const Context& ctx, const AttentionParams& p, const float* qg,
                            const float* k, const float* v, int64_t n, int64_t pos0,
                            const KvView& cache, float* out) const {
    const int64_t hd = p.head_dim, nkv = p.n_kv_heads;
    QWEN35_CHECK(cache.k_format.head_dim == hd && cache.v_format.head_dim == hd);
    const int64_t kb = int64_t(kv_row_bytes(cache.k_format)), vb = int64_t(kv_row_bytes(cache.v_format));
    QWEN35_CHECK(cache.k_stride() == nkv * kb && cache.v_stride() == nkv * vb);
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::ThreadScratch* threads = cpu::workspace_of(ctx, this, temp).threads(ctx);
    run(ctx, size_t(n * nkv), [&](size_t b, size_t e, int tid) {
      float* row = cpu::grow(threads[tid].kv_row, size_t(hd));
      for (size_t it = b; it < e; ++it) {
        const int64_t t = int64_t(it) / nkv, h = int64_t(it) % nkv;
        rms_norm_row(k + (t * nkv + h) * hd, hd, p.k_norm, p.eps, row);
        p.rope(row, t, pos0);
        kv_encode_row(cache.k_format, row, cache.k_row(pos0 + t) + h * kb);
        kv_encode_row(cache.v_format, v + (t * nkv + h) * hd, cache.v_row(pos0 + t) + h * vb);
      }
    });
    const float scale = 1.0f / std::sqrt(float(hd));
    attention_items(ctx, p, qg, n, pos0, out, threads,
                    [&](cpu::ThreadScratch& ts, int64_t kh, const float** qp, const int64_t* np,
                        int nq, float** op) {
                      const cpu::KvHeadRows rows{cache.k_blocks, cache.v_blocks, kh * kb, kh * vb,
                                                 cache.k_stride(), cache.v_stride(), cache.k_format,
                                                 cache.v_format, p.first_key};
                      cpu::attend_kv_many(qp, np, nq, rows, scale, &ts.kv_attend, op);
                    });
  }

  void conv1d_silu(const Context& ctx, const float* x, int64_t n, int64_t ch, const float* w,
                   int64_t kernel, float* state, float* out) const override {
    QWEN35_CHECK(kernel >= 1);
    run(ctx, size_t(ch), [&](size_t c0, size_t c1, int) {
      cpu::conv1d_silu_channels(x, n, ch, w, kernel, state, out, int64_t(c0), int64_t(c1));
    }, 64);
  }

  void gated_delta(const Context& ctx, const DeltaParams& p, const float* qkv, const float* a,
                   const float* b, int64_t n, bool chunked, float* state,
                   float* out) const override {
    const int64_t nk = p.n_k_heads, nv = p.n_v_heads, dk = p.d_k, dv = p.d_v, rep = nv / nk;
    const int64_t ch = 2 * nk * dk + nv * dv;
    const float qscale = 1.0f / std::sqrt(float(dk));
    QWEN35_CHECK(!(chunked && p.state_in));
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::CpuWorkspace& ws = cpu::workspace_of(ctx, this, temp);
    cpu::ThreadScratch* threads = ws.threads(ctx);
    // Normalised q, k per key head and g, β per value head: [n, nk, dk] x2, [n, nv] x2.
    float* q = cpu::grow(ws.delta_prep, size_t(2 * n * nk * dk + 2 * n * nv));
    float* k = q + n * nk * dk;
    float* g = k + n * nk * dk;
    float* beta = g + n * nv;
    run(ctx, size_t(n), [&](size_t t0, size_t t1, int) {
      for (size_t tt = t0; tt < t1; ++tt) {
        const int64_t t = int64_t(tt);
        for (int64_t h = 0; h < nk; ++h) {
          float* qh = q + (t * nk + h) * dk;
          float* kh = k + (t * nk + h) * dk;
          std::memcpy(qh, qkv + t * ch + h * dk, size_t(dk) * 4);
          std::memcpy(kh, qkv + t * ch + nk * dk + h * dk, size_t(dk) * 4);
          l2norm_scaled(qh, dk, qscale);
          l2norm_scaled(kh, dk, 1.0f);
        }
        for (int64_t h = 0; h < nv; ++h) {
          beta[t * nv + h] = sigmoid(b[t * nv + h]);
          g[t * nv + h] = p.decay[h] * softplus(a[t * nv + h] + p.dt_bias[h]);
        }
      }
    });
    run(ctx, size_t(nv), [&](size_t h0, size_t h1, int tid) {
      for (size_t hh = h0; hh < h1; ++hh) {
        const int64_t h = int64_t(hh), kh = p.tiled_v_heads ? h % nk : h / rep;
        Head hd{n, nk, nv, dk, dv, ch, h, kh, q, k, g, beta, qkv + 2 * nk * dk + h * dv,
                state + h * dk * dv, out + h * dv};
        // The head's starting state into place first: it stays in L2 for the recurrence.
        if (p.state_in)
          std::memcpy(hd.S, p.state_in + h * dk * dv, size_t(dk * dv) * sizeof(float));
        if (chunked) delta_chunk(hd, threads[tid].delta_chunk);
        else delta_recurrent(hd);
      }
    });
  }

  void layer_norm(const Context& ctx, const float* x, int64_t n, int64_t dim, const float* w,
                  const float* b, float eps, float* out) const override {
    QWEN35_CHECK_MSG(dim > 0, "layer_norm: dim must be positive");
    run(ctx, size_t(n), [&](size_t r0, size_t r1, int) {
      for (size_t t = r0; t < r1; ++t) cpu::layer_norm_row(x + int64_t(t) * dim, dim, w, b, eps, out + int64_t(t) * dim);
    }, 4);
  }

  void gelu(const Context& ctx, float* x, int64_t n, int64_t dim, bool tanh_form) const override {
    run(ctx, size_t(n), [&](size_t r0, size_t r1, int) {
      for (size_t t = r0; t < r1; ++t) cpu::gelu(x + int64_t(t) * dim, dim, tanh_form);
    }, 4);
  }

  void add_bias(const Context& ctx, float* y, int64_t n, int64_t dim, const float* bias) const override {
    run(ctx, size_t(n), [&](size_t r0, size_t r1, int) {
      for (size_t t = r0; t < r1; ++t) cpu::add(y + int64_t(t) * dim, bias, dim);
    }, 8);
  }

  // Keys rotated and transposed per block and values padded, once per call (threads over rows);
  // then work items of (head, kVisionQueryBlock query rows), head-major so that a thread's
  // consecutive items share the head's keys and values in cache. The whole image is the parts
  // below over all its rows, the prepared keys and values in the workspace.
  void vision_attention(const Context& ctx, const VisionAttentionParams& p, const float* qkv, int64_t n,
                        const float* cos, const float* sin, float* out) const override {
    check_vision(p);
    if (n <= 0) return;
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::CpuWorkspace& ws = cpu::workspace_of(ctx, this, temp);
    float* kv = cpu::grow(ws.vision_kv, vision_kv_floats(p, n));
    vision_kv_rows(ctx, p, qkv, n, cos, sin, 0, n, kv);
    vision_attend_rows(ctx, p, qkv, n, cos, sin, kv, 0, n, out);
  }

  size_t vision_kv_floats(const VisionAttentionParams& p, int64_t n) const override {
    const cpu::VisionKv kv = vision_kv(p, n, nullptr);
    return n <= 0 ? 0 : kv.kt_floats() + kv.v_floats();
  }

  // Rows [r0, r1); the last range (r1 = n) also zeroes the keys past n in the last block.
  void vision_kv_rows(const Context& ctx, const VisionAttentionParams& p, const float* qkv, int64_t n,
                      const float* cos, const float* sin, int64_t r0, int64_t r1, float* kv) const override {
    check_vision(p);
    QWEN35_CHECK_MSG(0 <= r0 && r0 <= r1 && r1 <= n, "vision_kv_rows: rows out of the image");
    const cpu::VisionKv k = vision_kv(p, n, kv);
    const int64_t end = r1 == n ? k.blocks() * cpu::kVisionKeyBlock : r1;
    run(ctx, size_t(end - r0), [&](size_t a, size_t b, int) {
      cpu::vision_prepare_rows(qkv, cos, sin, k, r0 + int64_t(a), r0 + int64_t(b));
    }, 16);
  }

  void vision_attend_rows(const Context& ctx, const VisionAttentionParams& p, const float* qkv, int64_t n,
                          const float* cos, const float* sin, const float* kv, int64_t q0, int64_t q1,
                          float* out) const override {
    check_vision(p);
    QWEN35_CHECK_MSG(0 <= q0 && q0 <= q1 && q1 <= n, "vision_attend_rows: rows out of the image");
    if (q0 == q1) return;
    const int64_t nh = p.n_heads, hd = p.head_dim;
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::CpuWorkspace& ws = cpu::workspace_of(ctx, this, temp);
    cpu::ThreadScratch* threads = ws.threads(ctx);
    // The kernel only reads the prepared rows.
    const cpu::VisionKv k = vision_kv(p, n, const_cast<float*>(kv));
    const int64_t qblocks = (q1 - q0 + cpu::kVisionQueryBlock - 1) / cpu::kVisionQueryBlock;
    run(ctx, size_t(nh * qblocks), [&](size_t i0, size_t i1, int tid) {
      float* scratch = cpu::grow(threads[tid].vision, size_t(cpu::vision_scratch_floats(hd, k.v_stride)));
      for (size_t it = i0; it < i1; ++it) {
        const int64_t h = int64_t(it) / qblocks, a = q0 + int64_t(it) % qblocks * cpu::kVisionQueryBlock;
        cpu::vision_attend_rows(k, qkv, cos, sin, h, a, std::min(q1, a + cpu::kVisionQueryBlock), scratch, out, q0);
      }
    });
  }

  void router_topk(const Context& ctx, const float* logits, int64_t n, int64_t ne, int64_t k,
                   bool renorm, int32_t* idx, float* weight) const override {
    std::unique_ptr<cpu::CpuWorkspace> temp;
    cpu::CpuWorkspace& ws = cpu::workspace_of(ctx, this, temp);
    float* pr = cpu::grow(ws.router_probs, size_t(ne));
    int32_t* order = cpu::grow(ws.router_order, size_t(ne));
    for (int64_t t = 0; t < n; ++t) {
      const float* l = logits + t * ne;
      const float mx = *std::max_element(l, l + ne);
      float sum = 0;
      for (int64_t e = 0; e < ne; ++e) sum += (pr[e] = std::exp(l[e] - mx));
      for (int64_t e = 0; e < ne; ++e) pr[e] /= sum;
      std::iota(order, order + ne, 0);
      std::partial_sort(order, order + k, order + ne, [&](int32_t x, int32_t y) {
        return pr[x] > pr[y] || (pr[x] == pr[y] && x < y);
      });
      float tot = 0;
      for (int64_t j = 0; j < k; ++j) tot += pr[order[j]];
      for (int64_t j = 0; j < k; ++j) {
        idx[t * k + j] = order[j];
        weight[t * k + j] = renorm ? pr[order[j]] / tot : pr[order[j]];
      }
    }
  }

 private:
  struct Head {
    int64_t n, nk, nv, dk, dv, ch, h, kh;
    const float *q, *k, *g, *beta;
    const float* v;  // row t at v + t*ch
    float* S;        // [dk, dv]
    float* out;      // row t at out + t*nv*dv
    const float* Q(int64_t t) const { return q + (t * nk + kh) * dk; }
    const float* K(int64_t t) const { return k + (t * nk + kh) * dk; }
    float G(int64_t t) const { return g[t * nv + h]; }
    float B(int64_t t) const { return beta[t * nv + h]; }
  };

  static void delta_recurrent(const Head& x) {
    for (int64_t t = 0; t < x.n; ++t)
      cpu::delta_step(x.S, x.K(t), x.Q(t), x.v + t * x.ch, std::exp(x.G(t)), x.B(t), x.dk, x.dv,
                      x.out + t * x.nv * x.dv);
  }

  // The n rows as one chunk of the UT-transform form (kernels/cpu/recurrent.cc).
  static void delta_chunk(const Head& x, std::vector<float>& scratch) {
    const int64_t n = x.n;
    float* buf = cpu::grow(scratch, size_t(2 * n + n * n + 2 * n * x.dv + n * x.dk + std::max(n, x.dk)));
    cpu::delta_chunk({n, x.dk, x.dv, x.Q(0), x.K(0), x.nk * x.dk, x.g + x.h, x.beta + x.h, x.nv, x.v, x.ch, x.S,
                      x.out, x.nv * x.dv, buf});
  }
};

}  // namespace

const Ops& cpu_ops() {
  static const CpuOps ops;
  return ops;
}

}  // namespace qwen35::kernels
