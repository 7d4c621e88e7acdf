// The vision tower's ops in float64 and the error bounds of their CPU kernels, shared by the CPU
// kernels' and the Vulkan shaders' op tests (tests/kernels/vision_ops_test.cc,
// tests/vulkan/vision_ops_test.cc): the device is held to the CPU's bounds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

namespace qwen35::testing {

inline constexpr double kVisionEps = 1.0 / (1 << 24);  // float's unit roundoff

// LayerNorm's bound for element i of row xr[dim] (weights w, biases b): the mean's error is at
// most ~(dim/lanes + 4)·u·mean|x| (≤ 64 terms per accumulator for dim ≤ 1152 and 4 accumulators
// of ≥ 4 lanes; 16 lanes on AVX-512); the variance's relative error as much again, halved by the
// square root; then (x − mean), ·inv·w, + b each add an ulp. With |x − mean| + mean|x| as the
// scale of the first three terms: 80u·(|x − mean| + mean|x|)·inv·|w| + 4u·|b|.
inline std::vector<double> layer_norm_tolerance(const float* xr, int64_t dim, const float* w, const float* b,
                                                double eps) {
  double mean = 0, var = 0, mabs = 0;
  for (int64_t i = 0; i < dim; ++i) mean += xr[i], mabs += std::fabs(xr[i]);
  mean /= double(dim);
  for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
  const double inv = 1.0 / std::sqrt(var / double(dim) + eps);
  std::vector<double> tol(static_cast<size_t>(dim));
  for (int64_t i = 0; i < dim; ++i)
    tol[size_t(i)] = 80 * kVisionEps * (std::fabs(xr[i] - mean) + mabs / double(dim)) * inv * std::fabs(w[i]) +
                     4 * kVisionEps * std::fabs(b[i]) + 1e-30;
  return tol;
}

// GELU in float64 without the cancellation of 1 + tanh / 1 + erf for x < 0, which in double
// flushes results below ~10⁻¹⁶·|x| to 0: x·sigmoid(2u) and 0.5·x·erfc(−x/√2).
inline double gelu_tanh64(double x) {
  return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double gelu_erf64(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

// The error bound of the SIMD GELUs at x (result `want`), relative (cpu/math-inl.h): tanh form
// x/(1 + e^(−2u)): a few roundings plus the rounding of 2u (≤ 5 roundings, relative), which
// e^(−2u) turns into an absolute error of the exponent: (8 + 6|2u|)·u. Erf form: the fit
// (7·10⁻⁹ ≈ 0.12u) plus the exact split of x²/2 leaves ~10 roundings: 16u. Plus 1e−37 absolute:
// results below FLT_MIN (x < −10.3 for tanh, x < −13 for erf) are flushed or subnormal.
inline double gelu_tol(double x, double want, bool tanh_form) {
  const double u2 = std::min(std::fabs(2 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)), 1e3);
  const double rel = tanh_form ? (8 + 6 * u2) * kVisionEps : 16 * kVisionEps;
  return rel * std::fabs(want) + 1e-37;
}

// GELU inputs: a dense sweep of [−20, 20], the tails where the result underflows, huge
// magnitudes where x³ overflows, zeros and subnormals.
inline std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (int i = -20000; i <= 20000; ++i) x.push_back(float(i) * 0.001f);
  for (float m : {30.0f, 100.0f, 1e3f, 1e6f, 1e10f, 1e19f, 1e30f, FLT_MAX}) {
    x.push_back(m);
    x.push_back(-m);
  }
  for (float v : {0.0f, -0.0f, 1e-40f, -1e-40f, FLT_MIN, -FLT_MIN, 1e-20f, -1e-20f}) x.push_back(v);
  x.push_back(0.25f);  // a length that leaves a vector tail on every target
  return x;
}

// y = GELU(x) (the tanh or the erf form), element by element, against the float64 function
// within gelu_tol.
inline void expect_gelu_within_bound(const std::vector<float>& x, const std::vector<float>& y, bool tanh_form) {
  ASSERT_EQ(x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double want = tanh_form ? gelu_tanh64(xi) : gelu_erf64(xi);
    ASSERT_FALSE(std::isnan(y[i])) << "x = " << xi;
    if (std::isinf(want)) continue;  // x³ overflowed double too: nothing to compare
    ASSERT_LE(std::fabs(y[i] - want), gelu_tol(xi, want, tanh_form))
        << (tanh_form ? "tanh" : "erf") << " form at x = " << xi << ": " << y[i] << " vs " << want;
  }
}

// The 2-D rotary tables of a patch grid `width` wide (row t at grid (t / width, t % width)): the
// first head_dim/4 angles from the grid row, the next head_dim/4 from the column,
// inv_freq_j = 10000^(−2j/(head_dim/2)), as the tower computes them.
inline void rotary_tables(int64_t n, int64_t hd, int64_t width, std::vector<float>& cos, std::vector<float>& sin) {
  const int64_t half = hd / 2, quarter = hd / 4;
  cos.resize(size_t(n * half));
  sin.resize(size_t(n * half));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const int64_t j = i < quarter ? i : i - quarter;
      const double pos = double(i < quarter ? t / width : t % width);
      const double ang = pos * std::pow(10000.0, -2.0 * double(j) / double(half));
      cos[size_t(t * half + i)] = float(std::cos(ang));
      sin[size_t(t * half + i)] = float(std::sin(ang));
    }
}

// Rows `rows` of the attention in float64 (want) and the error bound of the CPU kernel's float
// arithmetic for each of its elements (tol), worst case, from the operations the kernel does:
// - score of key j: rotation and 1/√hd scaling (≤ 3 roundings per factor), then one FMA chain of
//   hd terms: |error| ≤ (hd + 6)·u·Σ_c|q_c·k_c|/√hd ≤ D (the row's largest);
// - score errors ≤ D scale the weights by e^(±D), which moves the output by ≤ 2D·(weighted mean
//   of |v − out|) to first order;
// - the weights e^(s − m) (Highway's Exp, 1 ulp; the subtraction, 1), their sum (≤ n/4 additions
//   per lane with 4 lanes or more, then the lanes, rescaled ≤ once per block) and each output's
//   sum (one FMA chain over the n keys, rescaled with the weights): ≤ (n + n/4 + 8)·u relative to
//   the weighted mean of |v|.
struct Expectation {
  std::vector<double> want, tol;  // [rows.size(), n_heads, head_dim]
};

inline Expectation expected_rows(const float* qkv, const float* cos, const float* sin, int64_t n, int64_t nh, int64_t hd,
                          const std::vector<int64_t>& rows) {
  const int64_t half = hd / 2, row = 3 * nh * hd;
  auto rot = [&](int64_t at, int part, int64_t h, double* o) {
    const float* x = qkv + at * row + (part * nh + h) * hd;
    for (int64_t i = 0; i < half; ++i) {
      const double cc = cos[at * half + i], ss = sin[at * half + i];
      o[i] = x[i] * cc - x[i + half] * ss;
      o[i + half] = x[i + half] * cc + x[i] * ss;
    }
  };
  Expectation e{std::vector<double>(rows.size() * size_t(nh * hd)), std::vector<double>(rows.size() * size_t(nh * hd))};
  std::vector<double> k(static_cast<size_t>(n * hd)), q(static_cast<size_t>(hd)), w(static_cast<size_t>(n));
  for (int64_t h = 0; h < nh; ++h) {
    for (int64_t j = 0; j < n; ++j) rot(j, 1, h, &k[size_t(j * hd)]);
    for (size_t r = 0; r < rows.size(); ++r) {
      rot(rows[r], 0, h, q.data());
      double mx = -INFINITY, sum = 0, dmax = 0;
      for (int64_t j = 0; j < n; ++j) {
        double d = 0, a = 0;
        for (int64_t i = 0; i < hd; ++i) {
          d += q[size_t(i)] * k[size_t(j * hd + i)];
          a += std::fabs(q[size_t(i)] * k[size_t(j * hd + i)]);
        }
        w[size_t(j)] = d / std::sqrt(double(hd));
        dmax = std::max(dmax, double(hd + 6) * kVisionEps * a / std::sqrt(double(hd)));
        mx = std::max(mx, w[size_t(j)]);
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      for (int64_t i = 0; i < hd; ++i) {
        const float* v = qkv + (2 * nh + h) * hd + i;
        double out = 0, mean_abs = 0, mean_dev = 0;
        for (int64_t j = 0; j < n; ++j) out += w[size_t(j)] * v[j * row];
        out /= sum;
        for (int64_t j = 0; j < n; ++j) {
          mean_abs += w[size_t(j)] * std::fabs(v[j * row]);
          mean_dev += w[size_t(j)] * std::fabs(v[j * row] - out);
        }
        const size_t o = r * size_t(nh * hd) + size_t(h * hd + i);
        e.want[o] = out;
        e.tol[o] = 2 * dmax * mean_dev / sum + double(n + n / 4 + 8) * kVisionEps * mean_abs / sum + 1e-30;
      }
    }
  }
  return e;
}

}  // namespace qwen35::testing
