#include "model/state.h"

#include <algorithm>

#include "core/check.h"

namespace qwen35::model {

SequenceState::SequenceState(const ModelConfig& c, int64_t capacity)
    : SequenceState(c, capacity, nullptr) {}

SequenceState::SequenceState(const ModelConfig& c, int64_t capacity, KvPool* pool)
    : capacity_(capacity), pool_(pool) {
  kv_row_ = c.n_kv_heads * c.head_dim;
  const int64_t n_blocks = (capacity + kernels::kKvBlock - 1) / kernels::kKvBlock;
  if (!pool_) {
    own_pool_ = std::make_unique<KvPool>(c, n_blocks);
    pool_ = own_pool_.get();
  }
  for (auto kind : c.layers) {
    if (kind == LayerKind::kFullAttention) {
      slot_.push_back(int64_t(k_blocks_.size()));
      k_blocks_.emplace_back().reserve(size_t(n_blocks));
      v_blocks_.emplace_back().reserve(size_t(n_blocks));
    } else {
      slot_.push_back(int64_t(conv_.size()));
      conv_.emplace_back(size_t((c.conv_kernel - 1) * c.conv_channels()), 0.0f);
      delta_.emplace_back(size_t(c.n_v_heads * c.d_k * c.d_v), 0.0f);
    }
  }
  QWEN35_CHECK(pool_->n_layers() == int64_t(k_blocks_.size()));
  blocks_.reserve(size_t(n_blocks));
  if (own_pool_) QWEN35_CHECK(reserve(capacity));
}

SequenceState::~SequenceState() { release_blocks(); }

bool SequenceState::reserve(int64_t positions) {
  positions = std::min(positions, capacity_);
  while (blocks_held() * kernels::kKvBlock < positions) {
    const int32_t b = pool_->allocate();
    if (b < 0) return false;
    blocks_.push_back(b);
    for (size_t i = 0; i < k_blocks_.size(); ++i) {
      k_blocks_[i].push_back(pool_->k(int64_t(i), b));
      v_blocks_[i].push_back(pool_->v(int64_t(i), b));
    }
  }
  return true;
}

void SequenceState::release_blocks() {
  for (int32_t b : blocks_) pool_->release(b);
  blocks_.clear();
  for (auto& t : k_blocks_) t.clear();
  for (auto& t : v_blocks_) t.clear();
}

void SequenceState::trim_blocks() {
  if (own_pool_) return;  // a private pool's blocks stay with the state
  const size_t keep = size_t((pos_ + kernels::kKvBlock - 1) / kernels::kKvBlock);
  while (blocks_.size() > keep) {
    pool_->release(blocks_.back());
    blocks_.pop_back();
    for (auto& t : k_blocks_) t.pop_back();
    for (auto& t : v_blocks_) t.pop_back();
  }
}

size_t SequenceState::verify_bytes(const ModelConfig& c) {
  size_t n_gdn = 0;
  for (auto kind : c.layers) n_gdn += kind == LayerKind::kFullAttention ? 0 : 1;
  const size_t C = size_t(c.conv_channels()), nv = size_t(c.n_v_heads);
  const size_t per_layer = size_t(c.conv_kernel - 1) * C + size_t(kMaxVerifyRows) * (C + 2 * nv) +
                           nv * size_t(c.d_k * c.d_v);
  return n_gdn * per_layer * sizeof(float);
}

void SequenceState::prepare_verify(const ModelConfig& c) {
  const int64_t rows = kMaxVerifyRows;
  const size_t C = size_t(c.conv_channels()), nv = size_t(c.n_v_heads);
  verify_.resize(conv_.size());
  for (VerifyRecord& v : verify_) {
    if (v.after.empty()) {
      v.conv0.resize(size_t(c.conv_kernel - 1) * C);
      v.after.resize(nv * size_t(c.d_k * c.d_v));
    }
    if (v.qkv.size() < size_t(rows) * C) {
      v.qkv.resize(size_t(rows) * C);
      v.a.resize(size_t(rows) * nv);
      v.b.resize(size_t(rows) * nv);
    }
  }
}

void SequenceState::reset() {
  pos_ = 0;
  verify_rows_ = 0;
  if (!own_pool_) release_blocks();
  for (auto& v : conv_) std::fill(v.begin(), v.end(), 0.0f);
  for (auto& v : delta_) std::fill(v.begin(), v.end(), 0.0f);
}

size_t SequenceState::kv_bytes() const { return size_t(blocks_held()) * pool_->block_bytes(); }

void SequenceState::save_recurrent(float* out) const {
  QWEN35_CHECK(verify_rows_ == 0);
  for (const auto& v : conv_) out = std::copy(v.begin(), v.end(), out);
  for (const auto& v : delta_) out = std::copy(v.begin(), v.end(), out);
}

void SequenceState::load_recurrent(const float* in) {
  QWEN35_CHECK(verify_rows_ == 0);
  for (auto& v : conv_) {
    std::copy(in, in + v.size(), v.begin());
    in += v.size();
  }
  for (auto& v : delta_) {
    std::copy(in, in + v.size(), v.begin());
    in += v.size();
  }
}

void SequenceState::adopt(std::span<const int32_t> blocks, int64_t pos) {
  QWEN35_CHECK(pos_ == 0 && blocks_.empty() && !own_pool_);
  QWEN35_CHECK(pos <= int64_t(blocks.size()) * kernels::kKvBlock && pos <= capacity_);
  for (int32_t b : blocks) {
    pool_->retain(b);
    blocks_.push_back(b);
    for (size_t i = 0; i < k_blocks_.size(); ++i) {
      k_blocks_[i].push_back(pool_->k(int64_t(i), b));
      v_blocks_[i].push_back(pool_->v(int64_t(i), b));
    }
  }
  pos_ = pos;
}

size_t SequenceState::recurrent_bytes() const {
  size_t n = 0;
  for (const auto& v : conv_) n += v.size() * 4;
  for (const auto& v : delta_) n += v.size() * 4;
  return n;
}

}  // namespace qwen35::model
