// The op interface: the only kernel header model/ includes. Activations are fp32; weights stay in
// their stored type (f32, f16, bf16, MLX affine 2..8-bit, GGUF blocks) and are dequantized inside
// the kernels.
//
// Every op has a scalar twin in kernels/ref (the ground truth of the op tests) and a threaded
// version in kernels/cpu. Batch invariance (docs/design.md §6): a row's result never depends on how
// many rows are in the call or on the thread count; reductions run in a fixed order per row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/kv_format.h"
#include "kernels/rope.h"

namespace qwen35::kernels {

// kF32..kAffine: safetensors and MLX; the others: ggml block types of GGUF files
// (kernels/matrix.h gives their block sizes and scalar decoding).
enum class WeightType : uint8_t { kF32, kF16, kBF16, kAffine, kQ8_0, kQ4_0, kIQ4_NL, kQ4_K, kQ5_K,
                                  kQ6_K, kIQ4_XS, kQ4_1, kQ5_0, kQ5_1, kQ2_K, kQ3_K, kIQ2_XXS,
                                  kIQ2_XS, kIQ3_XXS, kIQ3_S };

// A weight matrix [rows = out features, cols = in features], row-major, in its stored type.
// For kAffine (MLX): `data` is the uint32 bit stream of each row (row stride cols*bits/32 words;
// code j occupies bits [j*bits, (j+1)*bits) of the row, little-endian), `scales`/`biases` are
// [rows, cols/group] of `sb_type` (f32, f16 or bf16); w = scale*q + bias. Without biases, the
// bias is −zero·scale (0 when zero is 0): the fast mode's affine form of the ggml types with
// symmetric codes (Ops::int8_form) stores no biases.
// For the ggml block types: `data` holds each row as cols / block elements consecutive blocks, rows
// back to back (kernels/matrix.h).
struct Matrix {
  WeightType type = WeightType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  int bits = 0;
  int group = 0;
  core::DType sb_type = core::DType::kBF16;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int zero = 0;
  // 4-bit kAffine whose codes are code-book indices: code q stands for the unsigned code book[q]
  // (a signed value + 128; 16 entries stored four times over, 64 bytes, so that a byte shuffle
  // maps each 128-bit block; null: plain codes). The int8 forms of IQ4_NL, IQ4_XS and the IQ2/IQ3
  // types, with zero 128 (kernels/int8_form.h).
  const uint8_t* book = nullptr;
  // kAffine scales and biases in tile-major order: group g of row r at ((r/16)·groups + g)·16 +
  // r%16, so that a tile of 16 rows finds its [group][row] scales in place (the int8 forms; rows
  // a multiple of 16, and a row slice starts at one).
  bool sb_tiled = false;
  // kAffine codes in tile-major order: word j of row r at ((r/16)·words + j)·16 + r%16 (32-bit
  // words), so that a tile of 16 rows reads word j of all its rows as one vector, and the whole
  // matrix as one sequential stream (the int8 forms; rows a multiple of 16, slices start at one).
  bool codes_tiled = false;

  // Rows [r0, r0+n) of this matrix as a matrix of its own (no copy).
  Matrix row_slice(int64_t r0, int64_t n) const;
  // Bytes the kernel streams to read the whole matrix once.
  size_t bytes() const;
};

// The fast mode's form of a matrix whose stored type the int8 kernels do not read (the ggml block
// types): the same codes and group scales as an affine matrix (kernels/int8_form.cc), which they
// do read, and the storage it views.
struct Int8Form {
  Matrix m;
  std::vector<uint32_t> codes;
  std::vector<uint8_t> scales, biases;
};

// Dequantizes element (r, c) (slow; for tests and the scalar reference).
float matrix_at(const Matrix& m, int64_t r, int64_t c);
// Dequantizes row r of m into out[m.cols] (kernels/matrix.cc).
void decode_row(const Matrix& m, int64_t r, float* out);

class Ops;

// Scratch memory of one caller: activations prepared for matmuls, per-thread buffers. Kernels
// hold no state of their own; what they reuse between calls lives here, so callers with their own
// workspaces and thread pools (a main model and a draft head, say) may run at the same time.
// A workspace is made by a backend (Ops::new_workspace), is used only with that backend, and
// serves one call at a time. It grows on first use and is then reused (no allocation in steady
// state).
class Workspace {
 public:
  explicit Workspace(const Ops* owner) : owner_(owner) {}
  virtual ~Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  const Ops* owner() const { return owner_; }

 private:
  const Ops* owner_;
};

// Everything a kernel may need besides its operands.
struct Context {
  core::ThreadPool* pool = nullptr;  // nullptr: single-threaded
  // Fast mode: activations of MLX-quantized matmuls (2-6 and 8 bits) are quantized to int8 per weight group
  // (scale max|x|/127, as llama.cpp does for its Q8 activations) and multiplied in integers
  // (u8 x s8 dot products). Deterministic and batch-invariant like the exact mode, but not
  // bit-identical to it; its error against the reference is measured in the tests. The scalar
  // reference ignores it.
  bool int8_activations = false;
  // The caller's scratch (from the same backend's new_workspace()); nullptr: each call makes a
  // temporary one (tests, one-off calls).
  Workspace* workspace = nullptr;
};

// Positions per block of a key/value cache: the 64-position grid of docs/design.md §6.
inline constexpr int64_t kKvBlock = 64;

// The key/value cache of one full-attention layer of one sequence, as a table of blocks: block b
// holds positions [b·kKvBlock, (b+1)·kKvBlock) as [kKvBlock, n_kv_heads] rows of K (and of V) in
// their format (kernels/kv_format.h): fp32 [head_dim] by default, else each head's row encoded.
// Blocks need not be adjacent in memory (paged KV); positions within one are. Kernels read the
// table in place, with the same bits wherever the blocks lie.
struct KvView {
  uint8_t* const* k_blocks = nullptr;  // [ceil(capacity / kKvBlock)]
  uint8_t* const* v_blocks = nullptr;
  int64_t capacity = 0;  // positions the table covers
  int64_t row = 0;       // values per position: n_kv_heads · head_dim
  // The formats; the default (f32, unrotated) is the exact path's fp32 rows, read by the
  // attention kernel of old, whose bits every f32 cache keeps. Others go through kv_attention.
  KvFormat k_format{}, v_format{};
  int64_t k_bytes = 0, v_bytes = 0;  // bytes per position (0: row·4, fp32)

  bool f32() const {
    return k_format.type == KvType::kF32 && v_format.type == KvType::kF32 && !k_format.rotated &&
           !v_format.rotated;
  }
  int64_t k_stride() const { return k_bytes > 0 ? k_bytes : row * 4; }
  int64_t v_stride() const { return v_bytes > 0 ? v_bytes : row * 4; }
  uint8_t* k_row(int64_t pos) const { return k_blocks[pos / kKvBlock] + (pos % kKvBlock) * k_stride(); }
  uint8_t* v_row(int64_t pos) const { return v_blocks[pos / kKvBlock] + (pos % kKvBlock) * v_stride(); }
  // fp32 caches only (f32()).
  float* k_at(int64_t pos) const { return reinterpret_cast<float*>(k_row(pos)); }
  float* v_at(int64_t pos) const { return reinterpret_cast<float*>(v_row(pos)); }
};

class Ops {
 public:
  virtual ~Ops() = default;
  virtual const char* name() const = 0;
  // A workspace for Context::workspace, one per concurrent caller.
  virtual std::unique_ptr<Workspace> new_workspace() const = 0;

  // y[n, W.rows] = x[n, W.cols] · Wᵀ
  virtual void matmul(const Context& ctx, const float* x, int64_t n, const Matrix& w,
                      float* y) const = 0;
  // ys[i] = x · ws[i]ᵀ for `count` matrices that read the same activations (q/k/v, gate/up, ...).
  // Bit for bit what `count` matmul calls give; a backend may share their preparation and threads.
  virtual void matmul_many(const Context& ctx, const float* x, int64_t n, const Matrix* const* ws,
                           float* const* ys, int count) const {
    for (int i = 0; i < count; ++i) matmul(ctx, x, n, *ws[i], ys[i]);
  }
  // The form in which this backend's fast mode (Context::int8_activations) multiplies `m` in
  // integers, for a matrix it would otherwise multiply exactly in both modes; null where it has
  // none (the default, and every type but the ggml block types). Built once by the caller (in
  // parallel on `pool`) and used in place of m while fast mode is on.
  virtual std::unique_ptr<Int8Form> int8_form(const Matrix& m, core::ThreadPool* pool) const {
    (void)m;
    (void)pool;
    return nullptr;
  }
  // out[n, E.cols] = rows `tokens` of the embedding table E (dequantized).
  virtual void embed(const Context& ctx, const Matrix& table, const int32_t* tokens, int64_t n,
                     float* out) const = 0;
  // out[n, dim] = x · rsqrt(mean(x²) + eps) · w   (w already holds 1+w for zero-centred norms)
  virtual void rms_norm(const Context& ctx, const float* x, int64_t n, int64_t dim,
                        const float* w, float eps, float* out) const = 0;
  // In place on x[n, dim]: x = x · rsqrt(mean(x²)+eps) · w · silu(z)   (GDN output norm)
  virtual void gated_rms_norm(const Context& ctx, float* x, const float* z, int64_t n,
                              int64_t dim, const float* w, float eps) const = 0;
  // out[i] = silu(gate[i]) · up[i]; gate and up are rows of width `dim` with strides.
  virtual void swiglu(const Context& ctx, const float* gate, const float* up, int64_t n,
                      int64_t dim, int64_t in_stride, float* out) const = 0;

  // y[t, :] += s[t] · x[t, :] over rows x, y [n, dim] (s == nullptr: y += x). The residual add
  // and the gated shared expert.
  virtual void add_rows(const Context& ctx, const float* x, const float* s, int64_t n, int64_t dim,
                        float* y) const = 0;
  // The MoE expert combine: y[t, :] = Σ_j weight[t, j] · expert_out[t, j, :] for j = 0..k-1 in
  // order, from zero; expert_out [n, k, dim], weight [n, k], y [n, dim].
  virtual void moe_combine(const Context& ctx, const float* expert_out, const float* weight,
                           int64_t n, int64_t k, int64_t dim, float* y) const = 0;

  // Full attention of one sequence, in place on the query/gate projection:
  //   qg [n, n_heads, 2*head_dim] (query | gate per head), k [n, n_kv, hd], v [n, n_kv, hd];
  //   without the output gate (p.gated false: Qwen3) qg is the query alone, [n, n_heads, hd],
  //   and the sigmoid(gate) factor is left out.
  // Applies QK-norm (q_norm/k_norm weights [hd], 1+w folded) and partial RoPE (first rotary_dim
  // dims, rotate-half, at p.positions or else pos0..pos0+n-1), appends k/v to `cache` at pos0..
  // (encoded one row at a time in the cache's formats: a row's bytes depend on it alone), then writes
  // out [n, n_heads*hd] = softmax(q·kᵀ/√hd) v · sigmoid(gate) over cache positions
  // first_key..pos (positions before first_key are never read: the MTP head's cache has no row
  // at position 0, model/state.h).
  struct AttentionParams {
    int64_t n_heads, n_kv_heads, head_dim, rotary_dim;
    float rope_theta, eps;
    const float* q_norm;
    const float* k_norm;
    int64_t first_key = 0;
    bool gated = true;  // the query rows carry the output gate (see above)
    // Multimodal RoPE (kernels/rope.h): the axis of each of the rotary_dim/2 pairs, and the
    // rows' positions [n, 3] (temporal, height, width). Null positions: pos0 + t on every axis.
    const uint8_t* pair_axis = nullptr;
    const int64_t* positions = nullptr;

    // RoPE of row t of a call at pos0, in place on x[head_dim].
    void rope(float* x, int64_t t, int64_t pos0) const {
      if (positions) {
        apply_rope(x, rotary_dim, rope_theta, positions + 3 * t, pair_axis);
      } else {
        const int64_t p3[3] = {pos0 + t, pos0 + t, pos0 + t};
        apply_rope(x, rotary_dim, rope_theta, p3, nullptr);
      }
    }
  };
  virtual void attention(const Context& ctx, const AttentionParams& p, const float* qg,
                         const float* k, const float* v, int64_t n, int64_t pos0, KvView cache,
                         float* out) const = 0;

  // Depthwise causal conv1d + SiLU of one sequence over x [n, channels]; `state` [kernel-1,
  // channels] holds the previous inputs (oldest first) and is updated. w: [channels, kernel]
  // with w[:, kernel-1] on the current token.
  virtual void conv1d_silu(const Context& ctx, const float* x, int64_t n, int64_t channels,
                           const float* w, int64_t kernel, float* state, float* out) const = 0;

  // Gated delta rule of one sequence. Inputs after the conv: qkv [n, 2*nk*dk + nv*dv] (all q
  // heads, all k heads, all v heads), a, b [n, nv] raw projections. Computes L2-normalised q, k
  // (q scaled by dk^-0.5), β = sigmoid(b), g = A·softplus(a + dt_bias) with A = -exp(A_log);
  // value head h reads key head h / (nv/nk), the HF order, or h % nk when `tiled_v_heads` (GGUF
  // files store the value heads so). state: [nv, dk, dv] fp32, updated. out [n, nv, dv].
  // `chunked` selects the UT-transform form over the whole call (n ≤ 64 rows, one chunk) instead
  // of the token-by-token recurrence.
  // `state_in` (recurrent form only; null: none) is where the first row reads the state from:
  // the result lands in `state` and `state_in` is left as it was, with the bits of the in-place
  // run (speculative decoding verifies rows this way and keeps the state it started from).
  struct DeltaParams {
    int64_t n_k_heads, n_v_heads, d_k, d_v;
    const float* decay;    // [nv] A = -exp(A_log)
    const float* dt_bias;  // [nv]
    const float* state_in = nullptr;  // [nv, dk, dv]
    bool tiled_v_heads = false;
  };
  virtual void gated_delta(const Context& ctx, const DeltaParams& p, const float* qkv,
                           const float* a, const float* b, int64_t n, bool chunked, float* state,
                           float* out) const = 0;

  // The vision tower's ops (their CPU kernels: docs/design.md §2, kernels/cpu).
  // out[n, dim] = (x − mean)/sqrt(var + eps)·w + b per row (population variance).
  virtual void layer_norm(const Context& ctx, const float* x, int64_t n, int64_t dim,
                          const float* w, const float* b, float eps, float* out) const = 0;
  // In place on x[n, dim]: GELU, the tanh form 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
  // (gelu_pytorch_tanh) or the exact erf form 0.5·x·(1 + erf(x/√2)).
  virtual void gelu(const Context& ctx, float* x, int64_t n, int64_t dim, bool tanh_form) const = 0;
  // y[t, :] += bias over y[n, dim].
  virtual void add_bias(const Context& ctx, float* y, int64_t n, int64_t dim,
                        const float* bias) const = 0;
  // Bidirectional attention of one image: qkv [n, 3, n_heads, head_dim] (the fused projection,
  // bias added), cos/sin [n, head_dim/2] (row t's angle i rotates the pair (i, i + head_dim/2) of
  // q and k, rotate-half); out [n, n_heads·head_dim] = softmax(q·kᵀ/√head_dim)·v, every row seeing
  // all n rows. head_dim must be even. Memory grows linearly in n (the CPU backend keeps the
  // rotated keys and padded values, about 2·n·n_heads·head_dim floats, in the workspace).
  struct VisionAttentionParams {
    int64_t n_heads, head_dim;
  };
  virtual void vision_attention(const Context& ctx, const VisionAttentionParams& p,
                                const float* qkv, int64_t n, const float* cos, const float* sin,
                                float* out) const = 0;
  // The same attention in parts, so that a caller can spread it over calls by query rows (the
  // vision tower's tiles, model/vision.h): the keys and values of all n rows are prepared once
  // into `kv` (vision_kv_floats(p, n) floats, laid out as the backend likes; 0: it needs none),
  // by vision_kv_rows over row ranges that cover [0, n) in any order; then vision_attend_rows
  // gives query rows [q0, q1) into out [q1 − q0, n_heads·head_dim]. qkv, cos and sin are the
  // whole image's, as above, and must not change in between. Each query row gets the bits that
  // vision_attention gives it.
  virtual size_t vision_kv_floats(const VisionAttentionParams& p, int64_t n) const = 0;
  virtual void vision_kv_rows(const Context& ctx, const VisionAttentionParams& p, const float* qkv, int64_t n,
                              const float* cos, const float* sin, int64_t r0, int64_t r1, float* kv) const = 0;
  virtual void vision_attend_rows(const Context& ctx, const VisionAttentionParams& p, const float* qkv,
                                  int64_t n, const float* cos, const float* sin, const float* kv, int64_t q0,
                                  int64_t q1, float* out) const = 0;

  // MoE router: softmax over logits [n, n_experts] in fp32, top-k (ties to the lower index),
  // renormalised. idx [n, k], weight [n, k].
  virtual void router_topk(const Context& ctx, const float* logits, int64_t n, int64_t n_experts, int64_t k,
                           bool renormalize, int32_t* idx, float* weight) const = 0;
};

// The scalar reference (ground truth) and the threaded CPU backend.
const Ops& ref_ops();
const Ops& cpu_ops();

}  // namespace qwen35::kernels
