#include "model/state.h"

#include <algorithm>

namespace qwen35::model {

SequenceState::SequenceState(const ModelConfig& c, int64_t capacity) : capacity_(capacity) {
  kv_row_ = c.n_kv_heads * c.head_dim;
  const int64_t n_blocks = (capacity + kernels::kKvBlock - 1) / kernels::kKvBlock;
  const int64_t block = kernels::kKvBlock * kv_row_;  // floats per block
  for (auto kind : c.layers) {
    if (kind == LayerKind::kFullAttention) {
      slot_.push_back(int64_t(kv_.size()));
      std::vector<float>& kv = kv_.emplace_back(size_t(2 * n_blocks * block), 0.0f);
      std::vector<float*>& kb = k_blocks_.emplace_back();
      std::vector<float*>& vb = v_blocks_.emplace_back();
      for (int64_t b = 0; b < n_blocks; ++b) {
        kb.push_back(kv.data() + b * block);
        vb.push_back(kv.data() + (n_blocks + b) * block);
      }
    } else {
      slot_.push_back(int64_t(conv_.size()));
      conv_.emplace_back(size_t((c.conv_kernel - 1) * c.conv_channels()), 0.0f);
      delta_.emplace_back(size_t(c.n_v_heads * c.d_k * c.d_v), 0.0f);
    }
  }
}

void SequenceState::reset() {
  pos_ = 0;
  // The KV cache needs no clearing: positions >= pos_ are never read.
  for (auto& v : conv_) std::fill(v.begin(), v.end(), 0.0f);
  for (auto& v : delta_) std::fill(v.begin(), v.end(), 0.0f);
}

size_t SequenceState::kv_bytes() const {
  size_t n = 0;
  for (const auto& v : kv_) n += v.size() * 4;
  return n;
}

size_t SequenceState::recurrent_bytes() const {
  size_t n = 0;
  for (const auto& v : conv_) n += v.size() * 4;
  for (const auto& v : delta_) n += v.size() * 4;
  return n;
}

}  // namespace qwen35::model
