// The CPU backend's workspace (kernels/ops.h, Workspace): every buffer its kernels reuse between
// calls. Call-level buffers are written by the calling thread (or by the pool inside one op, each
// thread its own rows); per-thread buffers belong to one pool thread during a parallel_for.
//
// Thread-safety: one op call at a time per workspace (the caller's thread plus its pool).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/kv_attend.h"
#include "kernels/cpu/matmul.h"
#include "kernels/ops.h"

namespace qwen35::kernels::cpu {

// Grows v to at least n elements (never shrinks) and returns its data.
template <typename T>
T* grow(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// What one pool thread uses inside a parallel op.
struct ThreadScratch {
  // Attention: the work item's queries after QK-norm and RoPE [n_queries, head_dim], their scores
  // for one 64-key block [n_queries, 64], running max and sum [2, n_queries], and per-query
  // pointers and visible lengths.
  std::vector<float> queries, scores, softmax_stats;
  std::vector<const float*> query_rows;
  std::vector<float*> out_rows;
  std::vector<int64_t> n_pos;
  KvAttendScratch kv_attend;  // attention over a compressed cache (kv_attend.h)
  std::vector<float> kv_row;  // a K row normed and rotated before it is encoded
  std::vector<float> delta_chunk;  // cpu::delta_chunk's scratch (delta_rule.h)
  std::vector<float> vision;  // cpu::vision_attend_rows's scratch (vision_attention.h)
};

class CpuWorkspace final : public Workspace {
 public:
  explicit CpuWorkspace(const Ops* owner) : Workspace(owner) {}

  // Per-thread scratch for the pool of `ctx` (one entry without a pool). Call on the calling
  // thread before the parallel region; entry t belongs to thread index t inside it.
  ThreadScratch* threads(const Context& ctx) {
    const size_t n = ctx.pool ? size_t(ctx.pool->size()) : 1;
    if (threads_.size() < n) threads_.resize(n);
    return threads_.data();
  }

  MatmulScratch matmul;
  // gated_delta: L2-normalised q and k per key head [n_tokens, n_k_heads, d_k] x2, then g and β
  // per value head [n_tokens, n_v_heads] x2.
  std::vector<float> delta_prep;
  // router_topk: probabilities [n_experts] and candidate order [n_experts] of one row.
  std::vector<float> router_probs;
  std::vector<int32_t> router_order;
  // vision_attention: the image's prepared keys and values (cpu::VisionKv).
  std::vector<float> vision_kv;

 private:
  std::vector<ThreadScratch> threads_;
};

// The workspace of ctx, or (when the caller passed none) a temporary one held by `temp`.
inline CpuWorkspace& workspace_of(const Context& ctx, const Ops* self,
                                  std::unique_ptr<CpuWorkspace>& temp) {
  if (ctx.workspace == nullptr) {
    temp = std::make_unique<CpuWorkspace>(self);
    return *temp;
  }
  QWEN35_CHECK(ctx.workspace->owner() == self);  // a workspace serves only its own backend
  return *static_cast<CpuWorkspace*>(ctx.workspace);
}

}  // namespace qwen35::kernels::cpu
