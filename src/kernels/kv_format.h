// Key/value cache formats: how one KV head's row (head_dim values at one position) is stored,
// encoded on write and read by attention without expanding it (docs/design.md, "KV formats").
//
// A row's bytes depend on that row alone (no state, no batch, no thread count): quantizing on
// write is deterministic, so a cache filled in any order or any batch holds the same bytes.
//
// Rotated formats store H·D·x/√d (D: fixed pseudo-random signs, H: the Walsh–Hadamard matrix;
// orthonormal). Scores are invariant under it: the query is rotated once per row
// (kv_prepare_query) and dotted with the stored rows. Values accumulate in the stored space and
// the output row is un-rotated once (kv_values_finish).
//
// The two attention primitives (kv_scores, kv_values) have this scalar reference and a SIMD
// twin in kernels/cpu/kv_attention.h; the order of every float operation is fixed below, so both
// give the same bits on every target.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace qwen35::kernels {

enum class KvType : uint8_t { kF32, kBF16, kQ8_0, kQ4_0, kTurbo4, kTurbo3 };
inline constexpr KvType kAllKvTypes[] = {KvType::kF32,  KvType::kBF16,   KvType::kQ8_0,
                                         KvType::kQ4_0, KvType::kTurbo4, KvType::kTurbo3};

// "f32", "bf16", "q8_0", "q4_0", "turbo4", "turbo3".
std::string_view kv_type_name(KvType t);
// The type of a name; an unknown one is one line listing the names.
core::Result<KvType> parse_kv_type(std::string_view name);
// "K" (both caches) or "K,V" (an asymmetric pair, e.g. "q8_0,turbo4"); an error names the part.
struct KvTypes {
  KvType k = KvType::kF32, v = KvType::kF32;
  bool operator==(const KvTypes&) const = default;
};
core::Result<KvTypes> parse_kv_types(std::string_view spec);

// Values per quantization block of q8_0 and q4_0 (ggml's blocks), and the head_dims a rotation
// takes (powers of two in [kKvMinRotated, kKvMaxRotated]; the turbo codebooks exist for these).
inline constexpr int64_t kKvQuantBlock = 32;
inline constexpr int64_t kKvMinRotated = 32;
inline constexpr int64_t kKvMaxRotated = 1024;

// The format of one cache (K or V) of a layer: the type, the row length, and whether rows are
// stored rotated. Turbo types always are; q8_0 and q4_0 optionally (K: recommended); f32 and
// bf16 may be but gain nothing.
struct KvFormat {
  KvType type = KvType::kF32;
  int64_t head_dim = 0;
  bool rotated = false;
};
// A format with the rotation the type requires (turbo: always) or the caller asks for.
inline KvFormat kv_format(KvType t, int64_t head_dim, bool rotate) {
  return {t, head_dim, rotate || t == KvType::kTurbo4 || t == KvType::kTurbo3};
}
// OK, or one line naming the type and head_dim that do not go together (not a multiple of the
// block, not a power of two for the rotation, a turbo format without its rotation).
core::Status kv_format_check(const KvFormat& f);
// The same test without a message (the per-row hot path's assertion).
bool kv_format_valid(const KvFormat& f);
// Bytes of one row (layouts in docs/design.md): f32 4·d, bf16 2·d, q8_0 34·d/32, q4_0 18·d/32,
// turbo4 4 + d/2, turbo3 4 + 3·d/8. The format must pass kv_format_check.
size_t kv_row_bytes(const KvFormat& f);

// The KV cache's formats (model/kv_pool.h): f32 and bf16 unrotated; q8_0, q4_0 and the turbo
// types rotated, K and V alike, wherever head_dim is a power of two in [32, 1024] (q8_0 and q4_0
// stay unrotated at other multiples of 32; turbo then fails kv_format_check).
KvFormat kv_cache_format(KvType t, int64_t head_dim);
// "q8_0" when K and V share the type, else "q8_0,turbo4" (what parse_kv_types reads back).
std::string kv_types_name(KvTypes t);
// OK, or one line naming the pair, the type and the head_dim they cannot take.
core::Status kv_types_check(KvTypes t, int64_t head_dim);

// The rotation of a row: y = H·D·x/√d and its inverse x = D·H·y/√d, d a power of two in
// [kKvMinRotated, kKvMaxRotated]; in place allowed (y == x). D's signs come from splitmix64
// (seed kKvRotationSeed, sign i = bit i%64 of the output for key i/64), the same for every head
// and layer. Float butterflies in a fixed order: |unrotate(rotate(x)) − x|₂ ≤ (2·log2 d +
// 4)·2⁻²⁴·|x|₂.
inline constexpr uint64_t kKvRotationSeed = 0x6b76726f74617465ull;  // "kvrotate"
void kv_rotate(const float* x, int64_t head_dim, float* y);
void kv_unrotate(const float* y, int64_t head_dim, float* x);

// The Lloyd–Max codebook of a turbo type at head_dim d: 2^bits centroids, ascending, for the
// coordinate u = √d·t of a uniformly random unit vector (density ∝ (1 − u²/d)^((d−3)/2)),
// derived once in double (kv_format.cc). A row stores s = |x|₂/√d and code i, nearest to
// y_i/s; decoded ŷ_i = s·c[code].
const float* kv_turbo_codebook(KvType t, int64_t head_dim);

// One row: x[head_dim] → dst[kv_row_bytes] (deterministic, this row's values alone).
// Non-finite values: bf16 keeps them per element; q8_0/q4_0 store a NaN scale for the block,
// turbo a NaN norm for the row, so they decode (and score) as NaN rather than as a wrong number.
void kv_encode_row(const KvFormat& f, const float* x, void* dst);
// The row back in the caller's space (un-rotated): out[head_dim].
void kv_decode_row(const KvFormat& f, const void* src, float* out);
// The row as stored (rotated where the format is): out[head_dim].
void kv_decode_stored(const KvFormat& f, const void* src, float* out);

// A query row prepared once for the K rows of one format: rotated where K is, and for q8_0 and
// q4_0 quantized to int8 per block of 32 (d = amax/127 in f32, code = round(x·127/amax)).
// Reused between calls (its vectors keep their capacity): a caller keeps one per thread in its
// workspace, so steady-state attention allocates nothing.
struct PreparedQuery {
  KvFormat format;
  std::vector<float> f;        // [head_dim] the query in the stored space (f32, bf16, turbo)
  std::vector<int8_t> q8;      // [head_dim] int8 codes (q8_0, q4_0)
  std::vector<float> d;        // [head_dim/32] their block scales
  std::vector<int32_t> quad8;  // q4_0: [head_dim/4] 8·(sum of each 4 codes): the nibbles' −8
};
void kv_prepare_query(const KvFormat& k_format, const float* q, PreparedQuery* out);

// The primitives read only rows that were encoded or zero-filled (all-zero bytes decode to 0 in
// every format): bytes never written may hold a NaN scale, and a zero weight does not mask it
// (0·NaN is NaN), so a caller skips such rows rather than weighting them by 0. Both primitives
// are pure functions of their arguments (thread-safe on distinct outputs), and splitting the
// rows of a call into consecutive calls (carrying acc) gives the same bits.
//
// Scores of a prepared query against n rows (row j at k_rows + j·stride bytes):
// s[j] = (q·k̂_j)·scale, each in this order:
// - float types: eight partials, partial l = fma chain over i ≡ l (mod 8) in order of
//   q_i·v_i (v_i: the f32 value, the widened bf16, or the turbo centroid c[code_i]), then
//   t = ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)); s = t·scale, or (t·s_row)·scale for turbo;
// - q8_0/q4_0: per block b in order, the eight exact int32 sums of 4 code products
//   (Q_l = Σ_m qc·kc over i = 32b + 4l + m; q4_0's kc = nibble − 8), then
//   p_l = fma(float(Q_l), dq_b·dk_b, p_l); the same tree; s = t·scale.
void kv_scores_ref(const PreparedQuery& q, const uint8_t* k_rows, int64_t stride, int64_t n,
                   float scale, float* s);
// The scores of nq prepared queries (one K format) against the same n rows: s[i][j] gets query
// i's bits of kv_scores. The SIMD twin decodes each row once for up to four queries (the query
// heads of a KV head share its rows).
void kv_scores_many_ref(const PreparedQuery* const* q, int nq, const uint8_t* k_rows,
                        int64_t stride, int64_t n, float scale, float* const* s);
// acc[head_dim] += Σ_j w[j]·decode(row j) over n rows in order, per element i:
// acc_i = fma(w_j·a_j, v_i, acc_i) with a_j the block scale (q8_0, q4_0: v = code, nibble − 8)
// or row scale (turbo: v = c[code]), and fma(w_j, v_i, acc_i) for f32/bf16. In the stored space.
void kv_values_ref(const KvFormat& f, const float* w, const uint8_t* v_rows, int64_t stride,
                   int64_t n, float* acc);
// After the last kv_values of an output row: un-rotates acc in place where V is rotated (the
// caller's softmax normalization may come before or after: both are linear).
void kv_values_finish(const KvFormat& f, float* acc);

}  // namespace qwen35::kernels
