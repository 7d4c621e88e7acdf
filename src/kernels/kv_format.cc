// KV cache formats: names, checks, the rotation, the turbo codebooks, row encoding and decoding,
// and query preparation (shared by the reference and the CPU kernels).
#include "kernels/kv_format.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"
#include "core/random.h"

namespace qwen35::kernels {
namespace {

bool is_turbo(KvType t) { return t == KvType::kTurbo4 || t == KvType::kTurbo3; }
int turbo_bits(KvType t) { return t == KvType::kTurbo4 ? 4 : 3; }
bool is_pow2(int64_t d) { return d > 0 && (d & (d - 1)) == 0; }
int log2_of(int64_t d) {
  int l = 0;
  while ((int64_t(1) << l) < d) ++l;
  return l;
}

// ---- The turbo codebooks ----
// Lloyd–Max iterations on the exact density of u = √d·t, t a coordinate of a uniform unit vector
// in R^d: f(u) ∝ (1 − u²/d)^((d−3)/2) on |u| < √d. The density is tabulated on a midpoint grid
// with only +, −, ×, / and sqrt (powers by squaring, the half power by sqrt), which IEEE rounds
// exactly, and the iteration count is fixed: the same centroids on every machine and compiler.
// Each iteration moves every centroid to the mean of its cell (prefix sums over the grid); the
// start is Max's Gaussian quantizer (the d → ∞ limit), so a fixed count converges.
constexpr int kGrid = 16384;
constexpr int kLloydIterations = 2000;
constexpr double kMax3[] = {0.2451, 0.7560, 1.3440, 2.1520};
constexpr double kMax4[] = {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326};

double density(double u, int64_t d) {
  const double a = 1.0 - u * u / double(d);
  if (a <= 0) return 0;
  // (d−3)/2 = k + 1/2 with k = (d−4)/2 (d even).
  int64_t k = (d - 4) / 2;
  double p = 1.0, b = a;
  for (; k > 0; k >>= 1, b *= b)
    if (k & 1) p *= b;
  return p * std::sqrt(a);
}

std::array<float, 16> lloyd_max(int bits, int64_t d) {
  const int levels = 1 << bits, half = levels / 2;
  const double r = std::min(std::sqrt(double(d)), 8.0);  // beyond 8: mass below 1e-15
  std::vector<double> u(kGrid), p0(kGrid + 1, 0.0), p1(kGrid + 1, 0.0);
  for (int g = 0; g < kGrid; ++g) {
    u[size_t(g)] = -r + (2.0 * r) * (g + 0.5) / kGrid;
    const double w = density(u[size_t(g)], d);
    p0[size_t(g) + 1] = p0[size_t(g)] + w;
    p1[size_t(g) + 1] = p1[size_t(g)] + w * u[size_t(g)];
  }
  std::vector<double> c(static_cast<size_t>(levels));
  for (int k = 0; k < half; ++k) {
    c[size_t(half + k)] = bits == 4 ? kMax4[k] : kMax3[k];
    c[size_t(half - 1 - k)] = -c[size_t(half + k)];
  }
  // The mass and first moment left of t: the prefix sums, the grid cell holding t in proportion.
  auto prefix = [&](const std::vector<double>& p, double t) {
    const double x = std::clamp((t + r) / (2.0 * r) * kGrid, 0.0, double(kGrid));
    const size_t g = std::min(size_t(x), size_t(kGrid) - 1);
    return p[g] + (x - double(g)) * (p[g + 1] - p[g]);
  };
  std::vector<double> m0(static_cast<size_t>(levels) + 1), m1(static_cast<size_t>(levels) + 1);
  for (int it = 0; it < kLloydIterations; ++it) {
    m0[0] = m1[0] = 0;
    m0[size_t(levels)] = p0[kGrid];
    m1[size_t(levels)] = p1[kGrid];
    for (int k = 1; k < levels; ++k) {
      const double t = 0.5 * (c[size_t(k) - 1] + c[size_t(k)]);
      m0[size_t(k)] = prefix(p0, t);
      m1[size_t(k)] = prefix(p1, t);
    }
    for (int k = 0; k < levels; ++k) {
      const double w = m0[size_t(k) + 1] - m0[size_t(k)];
      if (w > 0) c[size_t(k)] = (m1[size_t(k) + 1] - m1[size_t(k)]) / w;
    }
  }
  std::array<float, 16> out{};
  for (int j = 0; j < levels; ++j) out[size_t(j)] = float(c[size_t(j)]);
  return out;
}

// [bits − 3][log2 d − 5]: every turbo type at every head_dim a rotation takes.
struct Codebooks {
  std::array<std::array<std::array<float, 16>, 6>, 2> c;
};
const Codebooks& codebooks() {
  static const Codebooks books = [] {
    Codebooks b;
    for (int bits = 3; bits <= 4; ++bits)
      for (int l = 5; l <= 10; ++l)
        b.c[size_t(bits - 3)][size_t(l - 5)] = lloyd_max(bits, int64_t(1) << l);
    return b;
  }();
  return books;
}

// ---- Rotation ----
// y = D·x: x_i negated where bit i % 64 of splitmix64(kKvRotationSeed + i/64) is set (d is a
// multiple of 64 or below it). Negation is exact, so this equals multiplying by ±1.
void apply_signs(const float* x, int64_t d, float* y) {
  for (int64_t i0 = 0; i0 < d; i0 += 64) {
    const uint64_t bits = core::splitmix64_of(kKvRotationSeed + uint64_t(i0 / 64));
    for (int64_t i = i0; i < std::min(d, i0 + 64); ++i) y[i] = (bits >> (i - i0)) & 1 ? -x[i] : x[i];
  }
}

// In place, unnormalized: y = H·y, butterflies stage by stage in index order.
void fwht(float* y, int64_t d) {
  for (int64_t h = 1; h < d; h *= 2)
    for (int64_t i = 0; i < d; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = y[j], b = y[j + h];
        y[j] = a + b;
        y[j + h] = a - b;
      }
}

float inv_sqrt(int64_t d) { return float(1.0 / std::sqrt(double(d))); }

// ---- Blocks ----
float load_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
void store_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

bool all_finite(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

// An f16 scale, saturated at ±65504 instead of overflowing to infinity.
uint16_t f16_scale(float d) {
  const uint16_t h = core::f32_to_f16(d);
  return (h & 0x7fffu) == 0x7c00u ? uint16_t((h & 0x8000u) | 0x7bffu) : h;
}

// q8_0: d = amax/127 rounded to f16, codes round(x/d) with the rounded d, clamped to ±127.
void encode_q8_0(const float* x, uint8_t* b) {
  int8_t* q = reinterpret_cast<int8_t*>(b + 2);
  if (!all_finite(x, 32)) {
    store_u16(b, 0x7e00);
    std::fill_n(q, 32, 0);
    return;
  }
  float amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[i]));
  const uint16_t h = f16_scale(amax / 127.0f);
  store_u16(b, h);
  const float ds = core::f16_to_f32(h);
  const float inv = ds > 0 ? 1.0f / ds : 0.0f;
  for (int i = 0; i < 32; ++i) q[i] = int8_t(std::lrintf(std::clamp(x[i] * inv, -127.0f, 127.0f)));
}

// q4_0: m the value of largest magnitude (the first on ties), d = m/−8 rounded to f16, nibble
// round(x/d) + 8 clamped to [0, 15]; element i < 16 in the low nibble of byte i, i + 16 high.
void encode_q4_0(const float* x, uint8_t* b) {
  uint8_t* qs = b + 2;
  if (!all_finite(x, 32)) {
    store_u16(b, 0x7e00);
    std::fill_n(qs, 16, uint8_t(0x88));
    return;
  }
  float m = 0;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  const uint16_t h = f16_scale(m / -8.0f);
  store_u16(b, h);
  const float ds = core::f16_to_f32(h);
  const float inv = ds != 0 ? 1.0f / ds : 0.0f;
  auto nib = [&](float v) { return uint8_t(std::lrintf(std::clamp(v * inv, -8.0f, 7.0f)) + 8); };
  for (int i = 0; i < 16; ++i) qs[i] = uint8_t(nib(x[i]) | nib(x[i + 16]) << 4);
}

// turbo: y = rotate(x), s = |y|₂/√d (f32), code i = the centroid nearest to y_i/s (the lower one on
// a tie); codes packed LSB first (4 bits: two a byte; 3 bits: eight in three bytes).
void encode_turbo(KvType t, const float* x, int64_t d, uint8_t* b) {
  float y[kKvMaxRotated];  // no allocation on the write path
  kv_rotate(x, d, y);
  const int bits = turbo_bits(t);
  uint8_t* codes = b + 4;
  std::fill_n(codes, size_t(d * bits / 8), uint8_t(0));
  if (!all_finite(y, d)) {
    store_f32(b, NAN);
    return;
  }
  double ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += double(y[i]) * y[i];
  const float s = float(std::sqrt(ss / double(d)));
  store_f32(b, s);
  if (s == 0) return;
  const float* c = kv_turbo_codebook(t, d);
  const int levels = 1 << bits;
  for (int64_t i = 0; i < d; ++i) {
    const double u = double(y[i]) / double(s);
    uint32_t k = 0;
    while (int(k) + 1 < levels && u > 0.5 * (double(c[k]) + double(c[k + 1]))) ++k;
    const int64_t bit = i * bits;
    codes[bit / 8] |= uint8_t(k << (bit % 8));
    if (bit % 8 + bits > 8) codes[bit / 8 + 1] |= uint8_t(k >> (8 - bit % 8));
  }
}

uint32_t turbo_code(const uint8_t* codes, int64_t i, int bits) {
  const int64_t bit = i * bits;
  uint32_t v = codes[bit / 8];
  if (bit % 8 + bits > 8) v |= uint32_t(codes[bit / 8 + 1]) << 8;
  return (v >> (bit % 8)) & ((1u << bits) - 1u);
}

}  // namespace

std::string_view kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32:
      return "f32";
    case KvType::kBF16:
      return "bf16";
    case KvType::kQ8_0:
      return "q8_0";
    case KvType::kQ4_0:
      return "q4_0";
    case KvType::kTurbo4:
      return "turbo4";
    case KvType::kTurbo3:
      return "turbo3";
  }
  return "?";
}

core::Result<KvType> parse_kv_type(std::string_view name) {
  for (KvType t : kAllKvTypes)
    if (kv_type_name(t) == name) return t;
  return core::error("unknown kv type '" + std::string(name) +
                     "' (f32, bf16, q8_0, q4_0, turbo4, turbo3)");
}

core::Result<KvTypes> parse_kv_types(std::string_view spec) {
  const size_t comma = spec.find(',');
  auto k = parse_kv_type(spec.substr(0, comma));
  if (!k.ok()) return k.status();
  if (comma == std::string_view::npos) return KvTypes{*k, *k};
  auto v = parse_kv_type(spec.substr(comma + 1));
  if (!v.ok()) return v.status();
  return KvTypes{*k, *v};
}

bool kv_format_valid(const KvFormat& f) {
  if (f.head_dim <= 0 || (is_turbo(f.type) && !f.rotated)) return false;
  if ((f.type == KvType::kQ8_0 || f.type == KvType::kQ4_0) && f.head_dim % kKvQuantBlock != 0)
    return false;
  return !f.rotated ||
         (is_pow2(f.head_dim) && f.head_dim >= kKvMinRotated && f.head_dim <= kKvMaxRotated);
}

core::Status kv_format_check(const KvFormat& f) {
  if (kv_format_valid(f)) return core::ok_status();  // no message built on the hot path
  const std::string what =
      "kv type " + std::string(kv_type_name(f.type)) + ": head_dim " + std::to_string(f.head_dim);
  if (f.head_dim <= 0) return core::error(what + " is not positive");
  if (is_turbo(f.type) && !f.rotated) return core::error(what + ": turbo types are always rotated");
  if ((f.type == KvType::kQ8_0 || f.type == KvType::kQ4_0) && f.head_dim % kKvQuantBlock != 0)
    return core::error(what + " is not a multiple of 32 (its block)");
  if (f.rotated &&
      (!is_pow2(f.head_dim) || f.head_dim < kKvMinRotated || f.head_dim > kKvMaxRotated))
    return core::error(what + " is not a power of two in [32, 1024] (the Hadamard rotation)");
  return core::ok_status();
}

size_t kv_row_bytes(const KvFormat& f) {
  const size_t d = size_t(f.head_dim);
  switch (f.type) {
    case KvType::kF32:
      return 4 * d;
    case KvType::kBF16:
      return 2 * d;
    case KvType::kQ8_0:
      return d / 32 * 34;
    case KvType::kQ4_0:
      return d / 32 * 18;
    case KvType::kTurbo4:
      return 4 + d / 2;
    case KvType::kTurbo3:
      return 4 + 3 * d / 8;
  }
  return 0;
}

void kv_rotate(const float* x, int64_t d, float* y) {
  QWEN35_CHECK(is_pow2(d) && d >= kKvMinRotated && d <= kKvMaxRotated);
  apply_signs(x, d, y);
  fwht(y, d);
  const float r = inv_sqrt(d);
  for (int64_t i = 0; i < d; ++i) y[i] *= r;
}

void kv_unrotate(const float* y, int64_t d, float* x) {
  QWEN35_CHECK(is_pow2(d) && d >= kKvMinRotated && d <= kKvMaxRotated);
  if (x != y) std::copy_n(y, d, x);
  fwht(x, d);
  const float r = inv_sqrt(d);
  for (int64_t i = 0; i < d; ++i) x[i] *= r;
  apply_signs(x, d, x);
}

const float* kv_turbo_codebook(KvType t, int64_t d) {
  QWEN35_CHECK(is_turbo(t) && is_pow2(d) && d >= kKvMinRotated && d <= kKvMaxRotated);
  return codebooks().c[size_t(turbo_bits(t) - 3)][size_t(log2_of(d) - 5)].data();
}

void kv_encode_row(const KvFormat& f, const float* x, void* dst) {
  QWEN35_CHECK(kv_format_valid(f));
  const int64_t d = f.head_dim;
  auto* b = static_cast<uint8_t*>(dst);
  if (is_turbo(f.type)) return encode_turbo(f.type, x, d, b);
  float rot[kKvMaxRotated];
  if (f.rotated) {
    kv_rotate(x, d, rot);
    x = rot;
  }
  switch (f.type) {
    case KvType::kF32:
      std::memcpy(b, x, size_t(d) * 4);
      break;
    case KvType::kBF16:
      for (int64_t i = 0; i < d; ++i) store_u16(b + 2 * i, core::f32_to_bf16(x[i]));
      break;
    case KvType::kQ8_0:
      for (int64_t i = 0; i < d; i += 32) encode_q8_0(x + i, b + i / 32 * 34);
      break;
    case KvType::kQ4_0:
      for (int64_t i = 0; i < d; i += 32) encode_q4_0(x + i, b + i / 32 * 18);
      break;
    default:
      break;
  }
}

void kv_decode_stored(const KvFormat& f, const void* src, float* out) {
  const int64_t d = f.head_dim;
  const auto* b = static_cast<const uint8_t*>(src);
  switch (f.type) {
    case KvType::kF32:
      std::memcpy(out, b, size_t(d) * 4);
      break;
    case KvType::kBF16:
      for (int64_t i = 0; i < d; ++i) out[i] = core::bf16_to_f32(load_u16(b + 2 * i));
      break;
    case KvType::kQ8_0:
      for (int64_t i = 0; i < d; ++i) {
        const uint8_t* blk = b + i / 32 * 34;
        out[i] = core::f16_to_f32(load_u16(blk)) * float(int8_t(blk[2 + i % 32]));
      }
      break;
    case KvType::kQ4_0:
      for (int64_t i = 0; i < d; ++i) {
        const uint8_t* blk = b + i / 32 * 18;
        const int nib = i % 32 < 16 ? blk[2 + i % 32] & 15 : blk[2 + i % 16] >> 4;
        out[i] = core::f16_to_f32(load_u16(blk)) * float(nib - 8);
      }
      break;
    case KvType::kTurbo4:
    case KvType::kTurbo3: {
      const float s = load_f32(b);
      const float* c = kv_turbo_codebook(f.type, d);
      for (int64_t i = 0; i < d; ++i) out[i] = s * c[turbo_code(b + 4, i, turbo_bits(f.type))];
      break;
    }
  }
}

void kv_decode_row(const KvFormat& f, const void* src, float* out) {
  kv_decode_stored(f, src, out);
  if (f.rotated) kv_unrotate(out, f.head_dim, out);
}

void kv_prepare_query(const KvFormat& kf, const float* q, PreparedQuery* out) {
  QWEN35_CHECK(kv_format_valid(kf));
  const int64_t d = kf.head_dim;
  out->format = kf;
  out->f.assign(q, q + d);
  if (kf.rotated) kv_rotate(out->f.data(), d, out->f.data());
  if (kf.type != KvType::kQ8_0 && kf.type != KvType::kQ4_0) return;
  out->q8.resize(size_t(d));
  out->d.resize(size_t(d / 32));
  out->quad8.resize(size_t(d / 4));
  for (int64_t b0 = 0; b0 < d; b0 += 32) {
    const float* x = out->f.data() + b0;
    float amax = 0;
    bool finite = true;
    for (int i = 0; i < 32; ++i) {
      finite = finite && std::isfinite(x[i]);
      amax = std::max(amax, std::fabs(x[i]));
    }
    const float inv = amax > 0 && finite ? 127.0f / amax : 0.0f;
    out->d[size_t(b0 / 32)] = finite ? amax / 127.0f : NAN;
    for (int i = 0; i < 32; ++i)
      out->q8[size_t(b0 + i)] =
          finite ? int8_t(std::lrintf(std::clamp(x[i] * inv, -127.0f, 127.0f))) : 0;
  }
  for (int64_t l = 0; l < d / 4; ++l) {
    int32_t s = 0;
    for (int m = 0; m < 4; ++m) s += out->q8[size_t(4 * l + m)];
    out->quad8[size_t(l)] = 8 * s;
  }
}

std::string kv_types_name(KvTypes t) {
  std::string s(kv_type_name(t.k));
  if (t.v != t.k) (s += ",") += kv_type_name(t.v);
  return s;
}

KvFormat kv_cache_format(KvType t, int64_t head_dim) {
  const bool quantized = t != KvType::kF32 && t != KvType::kBF16;
  const bool rotatable = is_pow2(head_dim) && head_dim >= kKvMinRotated && head_dim <= kKvMaxRotated;
  return kv_format(t, head_dim, quantized && rotatable);
}

core::Status kv_types_check(KvTypes t, int64_t head_dim) {
  for (KvType x : {t.k, t.v})
    if (auto st = kv_format_check(kv_cache_format(x, head_dim)); !st.ok())
      return core::error("--kv-type " + kv_types_name(t) + " does not fit this model: " +
                         st.message());
  return core::ok_status();
}

void kv_values_finish(const KvFormat& f, float* acc) {
  if (f.rotated) kv_unrotate(acc, f.head_dim, acc);
}

}  // namespace qwen35::kernels
