// The CPU executor (model/executor.h): runs each op at once through a kernels::Ops backend, the
// calls model.cc made itself before the seam, so the CPU's bits are those of the direct calls.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/ops.h"
#include "model/executor.h"

namespace qwen35::model {

class CpuExecutor final : public Executor {
 public:
  // `ctx` is the owner's (Model's) context, read at every op: its mode may change between steps.
  CpuExecutor(const kernels::Ops& ops, const kernels::Context& ctx) : ops_(ops), ctx_(ctx) {}

  void embed(const kernels::Matrix& table, const int32_t* tokens, int64_t n, float* out) override {
    ops_.embed(ctx_, table, tokens, n, out);
  }
  void rms_norm(const float* x, int64_t n, int64_t dim, const float* w, float eps,
                float* out) override {
    ops_.rms_norm(ctx_, x, n, dim, w, eps, out);
  }
  void gated_rms_norm(float* x, const float* z, int64_t n, int64_t dim, const float* w,
                      float eps) override {
    ops_.gated_rms_norm(ctx_, x, z, n, dim, w, eps);
  }
  void add_rows(const float* x, const float* s, int64_t n, int64_t dim, float* y) override {
    ops_.add_rows(ctx_, x, s, n, dim, y);
  }
  void matmul(const float* x, int64_t n, const kernels::Matrix& w, float* y, bool exact) override;
  void matmul_many(const float* x, int64_t n, const kernels::Matrix* const* ws, float* const* ys,
                   int count) override {
    ops_.matmul_many(ctx_, x, n, ws, ys, count);
  }
  void swiglu(const float* gate, const float* up, int64_t n, int64_t dim, int64_t in_stride,
              float* out) override {
    ops_.swiglu(ctx_, gate, up, n, dim, in_stride, out);
  }
  void attention(const kernels::Ops::AttentionParams& p, const float* qg, const float* k,
                 const float* v, int64_t n, int64_t pos0, const kernels::KvView& cache,
                 float* out) override {
    ops_.attention(ctx_, p, qg, k, v, n, pos0, cache, out);
  }
  void conv1d_silu(const float* x, int64_t n, int64_t channels, const float* w, int64_t kernel,
                   float* state, float* out) override {
    ops_.conv1d_silu(ctx_, x, n, channels, w, kernel, state, out);
  }
  void gated_delta(const kernels::Ops::DeltaParams& p, const float* qkv, const float* a,
                   const float* b, int64_t n, bool chunked, float* state, float* out) override {
    ops_.gated_delta(ctx_, p, qkv, a, b, n, chunked, state, out);
  }
  void router_topk(const float* logits, int64_t n, int64_t n_experts, int64_t k, bool renormalize,
                   int32_t* idx, float* weight) override {
    ops_.router_topk(ctx_, logits, n, n_experts, k, renormalize, idx, weight);
  }
  void moe_combine(const float* expert_out, const float* weight, int64_t n, int64_t k, int64_t dim,
                   float* y) override {
    ops_.moe_combine(ctx_, expert_out, weight, n, k, dim, y);
  }
  void moe_experts(const float* x, int64_t n, const int32_t* idx, int64_t k,
                   std::span<const MlpWeights> experts, int64_t inter, int64_t hidden,
                   float* expert_out) override;
  void sigmoid(float* x, int64_t n) override;
  void layer_norm(const float* x, int64_t n, int64_t dim, const float* w, const float* b, float eps,
                  float* out) override {
    ops_.layer_norm(ctx_, x, n, dim, w, b, eps, out);
  }
  void gelu(float* x, int64_t n, int64_t dim, bool tanh_form) override {
    ops_.gelu(ctx_, x, n, dim, tanh_form);
  }
  void add_bias(float* y, int64_t n, int64_t dim, const float* bias) override {
    ops_.add_bias(ctx_, y, n, dim, bias);
  }
  size_t vision_kv_floats(const kernels::Ops::VisionAttentionParams& p, int64_t n) const override {
    return ops_.vision_kv_floats(p, n);
  }
  void vision_kv_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv, int64_t n,
                      const float* cos, const float* sin, int64_t r0, int64_t r1,
                      float* kv) override {
    ops_.vision_kv_rows(ctx_, p, qkv, n, cos, sin, r0, r1, kv);
  }
  void vision_attend_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv, int64_t n,
                          const float* cos, const float* sin, const float* kv, int64_t q0,
                          int64_t q1, float* out) override {
    ops_.vision_attend_rows(ctx_, p, qkv, n, cos, sin, kv, q0, q1, out);
  }
  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t width) override;
  // The host's memory is written by every step: a device executor that takes the state over later
  // uploads it (model/mirror.h: epoch 0 stands for memory as made).
  void attach(SequenceState& st) override {
    st.mirror().host_wrote();
    st.pool()->mirror().host_wrote();
  }
  core::Status finish() override { return core::ok_status(); }

 private:
  const kernels::Ops& ops_;
  const kernels::Context& ctx_;
  // moe_experts' scratch (grows to the largest call, then reused): the slots (row · k + j)
  // routed to the current expert, their rows gathered, and the expert's intermediates.
  std::vector<int64_t> slots_;
  std::vector<float> gathered_;         // [slots, hidden]
  std::vector<float> gate_, up_, act_;  // [slots, inter]
  std::vector<float> down_;             // [slots, hidden]
};

}  // namespace qwen35::model
