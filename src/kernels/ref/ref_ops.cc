// The scalar reference of every op: plain loops, double accumulation, no threads. The ground truth
// the CPU kernels are tested against; also usable as a whole backend for the model tests.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/math.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"
#include "kernels/rope.h"

namespace qwen35::kernels {
namespace {

void l2norm_scaled(float* x, int64_t d, float scale) {
  double ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += double(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss + 1e-6);
  for (int64_t i = 0; i < d; ++i) x[i] = float(x[i] * inv * scale);
}

void rms_norm_row(const float* x, int64_t dim, const float* w, float eps, float* out) {
  double ss = 0;
  for (int64_t i = 0; i < dim; ++i) ss += double(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = float(x[i] * inv * w[i]);
}

class RefOps final : public Ops {
 public:
  const char* name() const override { return "ref"; }
  std::unique_ptr<Workspace> new_workspace() const override { return std::make_unique<Workspace>(this); }

  void matmul(const Context&, const float* x, int64_t n, const Matrix& w, float* y) const override {
    std::vector<float> row(size_t(w.cols));
    for (int64_t o = 0; o < w.rows; ++o) {
      decode_row(w, o, row.data());
      for (int64_t t = 0; t < n; ++t) {
        double acc = 0;
        for (int64_t c = 0; c < w.cols; ++c) acc += double(x[t * w.cols + c]) * row[size_t(c)];
        y[t * w.rows + o] = float(acc);
      }
    }
  }

  void embed(const Context&, const Matrix& e, const int32_t* tokens, int64_t n,
             float* out) const override {
    for (int64_t t = 0; t < n; ++t) decode_row(e, tokens[t], out + t * e.cols);
  }

  void rms_norm(const Context&, const float* x, int64_t n, int64_t dim, const float* w, float eps,
                float* out) const override {
    for (int64_t t = 0; t < n; ++t) rms_norm_row(x + t * dim, dim, w, eps, out + t * dim);
  }

  void gated_rms_norm(const Context&, float* x, const float* z, int64_t n, int64_t dim,
                      const float* w, float eps) const override {
    for (int64_t t = 0; t < n; ++t) {
      rms_norm_row(x + t * dim, dim, w, eps, x + t * dim);
      for (int64_t i = 0; i < dim; ++i) x[t * dim + i] *= silu(z[t * dim + i]);
    }
  }

  void swiglu(const Context&, const float* gate, const float* up, int64_t n, int64_t dim,
              int64_t in_stride, float* out) const override {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < dim; ++i)
        out[t * dim + i] = silu(gate[t * in_stride + i]) * up[t * in_stride + i];
  }

  void add_rows(const Context&, const float* x, const float* s, int64_t n, int64_t dim,
                float* y) const override {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < dim; ++i) y[t * dim + i] += s ? s[t] * x[t * dim + i] : x[t * dim + i];
  }

  void moe_combine(const Context&, const float* eo, const float* weight, int64_t n, int64_t k,
                   int64_t dim, float* y) const override {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < dim; ++i) {
        float acc = 0.0f;
        for (int64_t j = 0; j < k; ++j) acc += weight[t * k + j] * eo[(t * k + j) * dim + i];
        y[t * dim + i] = acc;
      }
  }

  void attention(const Context&, const AttentionParams& p, const float* qg, const float* k,
                 const float* v, int64_t n, int64_t pos0, KvView cache, float* out) const override {
    const int64_t hd = p.head_dim, nkv = p.n_kv_heads, nh = p.n_heads, rep = nh / nkv;
    QWEN35_CHECK(pos0 + n <= cache.capacity && cache.row == nkv * hd);
    QWEN35_CHECK(p.first_key >= 0 && p.first_key <= pos0);
    if (!cache.f32()) return attention_compressed(p, qg, k, v, n, pos0, cache, out);
    std::vector<float> tmp(static_cast<size_t>(hd));
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < nkv; ++h) {
        float* kc = cache.k_at(pos0 + t) + h * hd;
        rms_norm_row(k + (t * nkv + h) * hd, hd, p.k_norm, p.eps, kc);
        p.rope(kc, t, pos0);
        std::copy_n(v + (t * nkv + h) * hd, hd, cache.v_at(pos0 + t) + h * hd);
      }
    const double scale = 1.0 / std::sqrt(double(hd));
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = pos0 + t;
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t q_row = p.gated ? 2 * hd : hd;
        const float* q_in = qg + (t * nh + h) * q_row;
        const float* gate = p.gated ? q_in + hd : nullptr;
        rms_norm_row(q_in, hd, p.q_norm, p.eps, tmp.data());
        p.rope(tmp.data(), t, pos0);
        const int64_t kh = h / rep;
        const int64_t j0 = p.first_key;
        std::vector<double> s(static_cast<size_t>(pos + 1 - j0));
        double mx = -INFINITY;
        for (int64_t j = j0; j <= pos; ++j) {
          const float* kj = cache.k_at(j) + kh * hd;
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += double(tmp[i]) * kj[i];
          s[size_t(j - j0)] = d * scale;
          mx = std::max(mx, s[size_t(j - j0)]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        float* o = out + (t * nh + h) * hd;
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int64_t j = j0; j <= pos; ++j) acc += s[size_t(j - j0)] * cache.v_at(j)[kh * hd + i];
          o[i] = float(acc / sum);
          if (gate != nullptr) o[i] *= sigmoid(gate[i]);
        }
      }
    }
  }

  // attention() over a cache of another format: rows encoded one by one (kv_encode_row), scores
  // by the scalar primitive (kv_scores_ref: the query prepared as the K format asks), the softmax
  // and the value sum in double over the decoded stored rows, the sum un-rotated at the end.
  void attention_compressed(const AttentionParams& p, const float* qg, const float* k,
                            const float* v, int64_t n, int64_t pos0, const KvView& cache,
                            float* out) const {
    const int64_t hd = p.head_dim, nkv = p.n_kv_heads, nh = p.n_heads, rep = nh / nkv;
    const int64_t kb = int64_t(kv_row_bytes(cache.k_format)), vb = int64_t(kv_row_bytes(cache.v_format));
    std::vector<float> tmp(static_cast<size_t>(hd)), row(tmp.size()), acc(tmp.size());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t h = 0; h < nkv; ++h) {
        rms_norm_row(k + (t * nkv + h) * hd, hd, p.k_norm, p.eps, tmp.data());
        p.rope(tmp.data(), t, pos0);
        kv_encode_row(cache.k_format, tmp.data(), cache.k_row(pos0 + t) + h * kb);
        kv_encode_row(cache.v_format, v + (t * nkv + h) * hd, cache.v_row(pos0 + t) + h * vb);
      }
    const float scale = 1.0f / std::sqrt(float(hd));
    PreparedQuery pq;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t pos = pos0 + t;
      for (int64_t h = 0; h < nh; ++h) {
        const int64_t q_row = p.gated ? 2 * hd : hd, kh = h / rep, j0 = p.first_key;
        const float* q_in = qg + (t * nh + h) * q_row;
        rms_norm_row(q_in, hd, p.q_norm, p.eps, tmp.data());
        p.rope(tmp.data(), t, pos0);
        kv_prepare_query(cache.k_format, tmp.data(), &pq);
        std::vector<double> s(static_cast<size_t>(pos + 1 - j0));
        double mx = -INFINITY;
        for (int64_t j = j0; j <= pos; ++j) {
          float sj;
          kv_scores_ref(pq, cache.k_row(j) + kh * kb, 0, 1, scale, &sj);
          mx = std::max(mx, s[size_t(j - j0)] = sj);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        std::vector<double> o(static_cast<size_t>(hd), 0.0);
        for (int64_t j = j0; j <= pos; ++j) {
          kv_decode_stored(cache.v_format, cache.v_row(j) + kh * vb, row.data());
          for (int64_t i = 0; i < hd; ++i) o[size_t(i)] += s[size_t(j - j0)] * row[size_t(i)];
        }
        for (int64_t i = 0; i < hd; ++i) acc[size_t(i)] = float(o[size_t(i)] / sum);
        kv_values_finish(cache.v_format, acc.data());
        float* dst = out + (t * nh + h) * hd;
        for (int64_t i = 0; i < hd; ++i)
          dst[i] = p.gated ? acc[size_t(i)] * sigmoid(q_in[hd + i]) : acc[size_t(i)];
      }
    }
  }

  void conv1d_silu(const Context&, const float* x, int64_t n, int64_t ch, const float* w,
                   int64_t kernel, float* state, float* out) const override {
    const int64_t km1 = kernel - 1;
    // window rows: state (km1 rows) then x (n rows)
    auto in = [&](int64_t r, int64_t c) { return r < km1 ? state[r * ch + c] : x[(r - km1) * ch + c]; };
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < ch; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < kernel; ++j) acc += double(w[c * kernel + j]) * in(t + j, c);
        out[t * ch + c] = silu(float(acc));
      }
    std::vector<float> ns(static_cast<size_t>(km1 * ch));
    for (int64_t r = 0; r < km1; ++r)
      for (int64_t c = 0; c < ch; ++c) ns[r * ch + c] = in(n + r, c);
    std::copy(ns.begin(), ns.end(), state);
  }

  void gated_delta(const Context&, const DeltaParams& p, const float* qkv, const float* a,
                   const float* b, int64_t n, bool chunked, float* state,
                   float* out) const override {
    const int64_t nk = p.n_k_heads, nv = p.n_v_heads, dk = p.d_k, dv = p.d_v, rep = nv / nk;
    const int64_t ch = 2 * nk * dk + nv * dv;
    const float qscale = float(1.0 / std::sqrt(double(dk)));
    std::vector<float> q(static_cast<size_t>(n * nk * dk)), k(static_cast<size_t>(n * nk * dk)), g(static_cast<size_t>(n * nv)), beta(static_cast<size_t>(n * nv));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t h = 0; h < nk; ++h) {
        std::copy_n(qkv + t * ch + h * dk, dk, &q[(t * nk + h) * dk]);
        std::copy_n(qkv + t * ch + nk * dk + h * dk, dk, &k[(t * nk + h) * dk]);
        l2norm_scaled(&q[(t * nk + h) * dk], dk, qscale);
        l2norm_scaled(&k[(t * nk + h) * dk], dk, 1.0f);
      }
      for (int64_t h = 0; h < nv; ++h) {
        beta[t * nv + h] = sigmoid(b[t * nv + h]);
        g[t * nv + h] = p.decay[h] * softplus(a[t * nv + h] + p.dt_bias[h]);
      }
    }
    auto V = [&](int64_t t, int64_t h) { return qkv + t * ch + 2 * nk * dk + h * dv; };
    QWEN35_CHECK(!(chunked && p.state_in));
    if (p.state_in) std::copy_n(p.state_in, nv * dk * dv, state);
    for (int64_t h = 0; h < nv; ++h) {
      const int64_t kh = p.tiled_v_heads ? h % nk : h / rep;
      float* S = state + h * dk * dv;  // [dk, dv]
      auto Q = [&](int64_t t) { return &q[(t * nk + kh) * dk]; };
      auto K = [&](int64_t t) { return &k[(t * nk + kh) * dk]; };
      if (!chunked) {
        for (int64_t t = 0; t < n; ++t) {
          const double decay = std::exp(double(g[t * nv + h]));
          for (int64_t i = 0; i < dk * dv; ++i) S[i] = float(S[i] * decay);
          for (int64_t j = 0; j < dv; ++j) {
            double kv = 0;
            for (int64_t i = 0; i < dk; ++i) kv += double(K(t)[i]) * S[i * dv + j];
            const double u = beta[t * nv + h] * (V(t, h)[j] - kv);
            for (int64_t i = 0; i < dk; ++i) S[i * dv + j] = float(S[i * dv + j] + K(t)[i] * u);
          }
          for (int64_t j = 0; j < dv; ++j) {
            double o = 0;
            for (int64_t i = 0; i < dk; ++i) o += double(Q(t)[i]) * S[i * dv + j];
            out[(t * nv + h) * dv + j] = float(o);
          }
        }
        continue;
      }
      // Chunked (UT-transform) form over the n rows as one chunk.
      std::vector<double> cum(static_cast<size_t>(n)), A(static_cast<size_t>(n * n), 0.0), W(static_cast<size_t>(n * dv)), U(static_cast<size_t>(n * dk));
      double c = 0;
      for (int64_t t = 0; t < n; ++t) cum[t] = (c += g[t * nv + h]);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < dk; ++e) d += double(K(i)[e]) * K(j)[e];
          A[i * n + j] = beta[i * nv + h] * d * std::exp(cum[i] - cum[j]);
        }
      for (int64_t i = 0; i < n; ++i) {  // forward substitution of (I + A) X = B
        const double bi = beta[i * nv + h];
        for (int64_t e = 0; e < dv; ++e) W[i * dv + e] = bi * V(i, h)[e];
        for (int64_t e = 0; e < dk; ++e) U[i * dk + e] = bi * K(i)[e] * std::exp(cum[i]);
        for (int64_t j = 0; j < i; ++j) {
          for (int64_t e = 0; e < dv; ++e) W[i * dv + e] -= A[i * n + j] * W[j * dv + e];
          for (int64_t e = 0; e < dk; ++e) U[i * dk + e] -= A[i * n + j] * U[j * dk + e];
        }
      }
      std::vector<double> vnew(static_cast<size_t>(n * dv));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < dv; ++e) {
          double us = 0;
          for (int64_t d = 0; d < dk; ++d) us += U[i * dk + d] * S[d * dv + e];
          vnew[i * dv + e] = W[i * dv + e] - us;
        }
      for (int64_t i = 0; i < n; ++i)
        for (int64_t e = 0; e < dv; ++e) {
          double qs = 0;
          for (int64_t d = 0; d < dk; ++d) qs += double(Q(i)[d]) * S[d * dv + e];
          double acc = std::exp(cum[i]) * qs;
          for (int64_t j = 0; j <= i; ++j) {
            double qk = 0;
            for (int64_t d = 0; d < dk; ++d) qk += double(Q(i)[d]) * K(j)[d];
            acc += qk * std::exp(cum[i] - cum[j]) * vnew[j * dv + e];
          }
          out[(i * nv + h) * dv + e] = float(acc);
        }
      const double last = n > 0 ? cum[n - 1] : 0.0;
      for (int64_t d = 0; d < dk; ++d)
        for (int64_t e = 0; e < dv; ++e) {
          double s = std::exp(last) * S[d * dv + e];
          for (int64_t j = 0; j < n; ++j) s += std::exp(last - cum[j]) * K(j)[d] * vnew[j * dv + e];
          S[d * dv + e] = float(s);
        }
    }
  }

  void layer_norm(const Context&, const float* x, int64_t n, int64_t dim, const float* w,
                  const float* b, float eps, float* out) const override {
    QWEN35_CHECK_MSG(dim > 0, "layer_norm: dim must be positive");
    for (int64_t t = 0; t < n; ++t) {
      const float* r = x + t * dim;
      double mean = 0, var = 0;
      for (int64_t i = 0; i < dim; ++i) mean += r[i];
      mean /= double(dim);
      for (int64_t i = 0; i < dim; ++i) var += (r[i] - mean) * (r[i] - mean);
      const double inv = 1.0 / std::sqrt(var / double(dim) + double(eps));
      for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = float((r[i] - mean) * inv * w[i] + b[i]);
    }
  }

  // 0.5·x·(1 + tanh(u)) as x/(1 + e^(−2u)) and 0.5·x·(1 + erf(x/√2)) as 0.5·x·erfc(−x/√2): the
  // same functions, without the cancellation of 1 + tanh or 1 + erf for x < 0 (in double it
  // flushes results below ~10⁻¹⁶·|x| to 0).
  void gelu(const Context&, float* x, int64_t n, int64_t dim, bool tanh_form) const override {
    const double k = std::sqrt(2.0 / std::acos(-1.0));
    for (int64_t i = 0; i < n * dim; ++i) {
      const double v = x[i];
      x[i] = float(tanh_form ? v / (1.0 + std::exp(-2.0 * k * (v + 0.044715 * v * v * v)))
                             : 0.5 * v * std::erfc(-v / std::sqrt(2.0)));
    }
  }

  void add_bias(const Context&, float* y, int64_t n, int64_t dim, const float* bias) const override {
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < dim; ++i) y[t * dim + i] += bias[i];
  }

  void vision_attention(const Context& ctx, const VisionAttentionParams& p, const float* qkv, int64_t n,
                        const float* cos, const float* sin, float* out) const override {
    vision_attend_rows(ctx, p, qkv, n, cos, sin, nullptr, 0, n, out);
  }
  // The reference prepares nothing: it rotates the keys again in each call, in double.
  size_t vision_kv_floats(const VisionAttentionParams&, int64_t) const override { return 0; }
  void vision_kv_rows(const Context&, const VisionAttentionParams& p, const float*, int64_t n, const float*,
                      const float*, int64_t r0, int64_t r1, float*) const override {
    QWEN35_CHECK_MSG(p.n_heads > 0 && p.head_dim > 0 && p.head_dim % 2 == 0,
                     "vision_attention: n_heads must be positive and head_dim positive and even");
    QWEN35_CHECK_MSG(0 <= r0 && r0 <= r1 && r1 <= n, "vision_kv_rows: rows out of the image");
  }
  void vision_attend_rows(const Context&, const VisionAttentionParams& p, const float* qkv, int64_t n,
                          const float* cos, const float* sin, const float*, int64_t q0, int64_t q1,
                          float* out) const override {
    const int64_t nh = p.n_heads, hd = p.head_dim, half = hd / 2, row = 3 * nh * hd;
    QWEN35_CHECK_MSG(nh > 0 && hd > 0 && hd % 2 == 0,
                     "vision_attention: n_heads must be positive and head_dim positive and even");
    QWEN35_CHECK_MSG(0 <= q0 && q0 <= q1 && q1 <= n, "vision_attend_rows: rows out of the image");
    if (q0 == q1) return;
    // Row t's rotated head h of q (part 0) or k (part 1), in double.
    auto rotated = [&](int64_t t, int part, int64_t h, double* r) {
      const float* x = qkv + t * row + (part * nh + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double c = cos[t * half + i], s = sin[t * half + i];
        r[i] = x[i] * c - x[i + half] * s;
        r[i + half] = x[i + half] * c + x[i] * s;
      }
    };
    const double scale = 1.0 / std::sqrt(double(hd));
    std::vector<double> k(static_cast<size_t>(n * hd)), q(static_cast<size_t>(hd)), s(static_cast<size_t>(n));
    for (int64_t h = 0; h < nh; ++h) {
      for (int64_t j = 0; j < n; ++j) rotated(j, 1, h, &k[size_t(j * hd)]);
      for (int64_t t = q0; t < q1; ++t) {
        rotated(t, 0, h, q.data());
        double mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[size_t(i)] * k[size_t(j * hd + i)];
          mx = std::max(mx, s[size_t(j)] = d * scale);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t i = 0; i < hd; ++i) {
          double acc = 0;
          for (int64_t j = 0; j < n; ++j) acc += s[size_t(j)] * qkv[j * row + (2 * nh + h) * hd + i];
          out[(t - q0) * nh * hd + h * hd + i] = float(acc / sum);
        }
      }
    }
  }

  void router_topk(const Context&, const float* logits, int64_t n, int64_t ne, int64_t k, bool renorm,
                   int32_t* idx, float* weight) const override {
    std::vector<double> pr(static_cast<size_t>(ne));
    std::vector<int32_t> order(static_cast<size_t>(ne));
    for (int64_t t = 0; t < n; ++t) {
      const float* l = logits + t * ne;
      double mx = *std::max_element(l, l + ne), sum = 0;
      for (int64_t e = 0; e < ne; ++e) sum += (pr[e] = std::exp(double(l[e]) - mx));
      for (auto& x : pr) x /= sum;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return pr[x] > pr[y]; });
      double tot = 0;
      for (int64_t j = 0; j < k; ++j) tot += pr[order[j]];
      for (int64_t j = 0; j < k; ++j) {
        idx[t * k + j] = order[j];
        weight[t * k + j] = float(renorm ? pr[order[j]] / tot : pr[order[j]]);
      }
    }
  }
};

}  // namespace

const Ops& ref_ops() {
  static const RefOps ops;
  return ops;
}

}  // namespace qwen35::kernels
