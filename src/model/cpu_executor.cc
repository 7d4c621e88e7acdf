// The CPU executor's ops that are more than one kernel call (cpu_executor.h).
#include "model/cpu_executor.h"

#include <cmath>
#include <cstring>

#include "model/activations.h"

namespace qwen35::model {

void CpuExecutor::matmul(const float* x, int64_t n, const kernels::Matrix& w, float* y,
                         bool exact) {
  if (!exact || !ctx_.int8_activations) {
    ops_.matmul(ctx_, x, n, w, y);
    return;
  }
  kernels::Context c = ctx_;
  c.int8_activations = false;
  ops_.matmul(c, x, n, w, y);
}

// Rows are grouped by expert, in expert order; a row's result is the same whatever else is in
// its group (the matmul is batch-invariant), so grouping changes no bit.
void CpuExecutor::moe_experts(const float* x, int64_t n, const int32_t* idx, int64_t k,
                              std::span<const MlpWeights> experts, int64_t inter, int64_t hidden,
                              float* expert_out) {
  const int64_t H = hidden, I = inter;
  float* gathered = sized(gathered_, n * k * H);
  float* eg = sized(gate_, n * k * I);
  float* eu = sized(up_, n * k * I);
  float* act = sized(act_, n * k * I);
  float* down = sized(down_, n * k * H);
  for (int64_t e = 0; e < int64_t(experts.size()); ++e) {
    slots_.clear();
    for (int64_t s = 0; s < n * k; ++s)
      if (idx[s] == e) slots_.push_back(s);
    if (slots_.empty()) continue;
    const int64_t cnt = int64_t(slots_.size());
    for (int64_t i = 0; i < cnt; ++i)
      std::memcpy(gathered + i * H, x + (slots_[i] / k) * H, size_t(H) * 4);
    const MlpWeights& ex = experts[size_t(e)];
    ops_.matmul(ctx_, gathered, cnt, ex.gate_proj, eg);
    ops_.matmul(ctx_, gathered, cnt, ex.up_proj, eu);
    ops_.swiglu(ctx_, eg, eu, cnt, I, I, act);
    ops_.matmul(ctx_, act, cnt, ex.down_proj, down);
    for (int64_t i = 0; i < cnt; ++i)
      std::memcpy(expert_out + slots_[i] * H, down + i * H, size_t(H) * 4);
  }
}

void CpuExecutor::sigmoid(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void CpuExecutor::copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                            int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(width) * sizeof(float));
}

}  // namespace qwen35::model
