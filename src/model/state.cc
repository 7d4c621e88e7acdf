#include "model/state.h"

#include <algorithm>

namespace qwen35::model {

SequenceState::SequenceState(const ModelConfig& c, int64_t capacity) : capacity_(capacity) {
  kv_half_ = size_t(capacity * c.n_kv_heads * c.head_dim);
  for (auto kind : c.layers) {
    if (kind == LayerKind::kFullAttention) {
      slot_.push_back(int64_t(kv_.size()));
      kv_.emplace_back(2 * kv_half_, 0.0f);
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
