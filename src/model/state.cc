#include "model/state.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace qwen35::model {

SequenceState::SequenceState(const ModelConfig& c, int64_t capacity, bool mtp,
                             kernels::KvTypes types)
    : capacity_(capacity) {
  own_pool_ = std::make_unique<KvPool>(c, (capacity + kernels::kKvBlock - 1) / kernels::kKvBlock,
                                       mtp, types);
  init(c, own_pool_.get());
}

SequenceState::SequenceState(const ModelConfig& c, int64_t capacity, KvPool* pool)
    : capacity_(capacity) {
  init(c, pool);
}

void SequenceState::init(const ModelConfig& c, KvPool* pool) {
  pool_ = pool;
  kv_row_ = c.n_kv_heads * c.head_dim;
  const int64_t n_blocks = (capacity_ + kernels::kKvBlock - 1) / kernels::kKvBlock;
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
  if (pool_->mtp()) {  // the MTP head's cache: attention layer index n_layers
    slot_.push_back(int64_t(k_blocks_.size()));
    k_blocks_.emplace_back().reserve(size_t(n_blocks));
    v_blocks_.emplace_back().reserve(size_t(n_blocks));
    mtp_hidden_.assign(size_t(c.hidden), 0.0f);
  }
  QWEN35_CHECK(pool_->n_layers() == int64_t(k_blocks_.size()));
  blocks_.reserve(size_t(n_blocks));
  if (own_pool_) QWEN35_CHECK(reserve(capacity_));
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

size_t SequenceState::verify_bytes(const ModelConfig& c, bool mtp) {
  size_t n_gdn = 0;
  for (auto kind : c.layers) n_gdn += kind == LayerKind::kFullAttention ? 0 : 1;
  const size_t C = size_t(c.conv_channels()), nv = size_t(c.n_v_heads);
  const size_t per_layer = size_t(c.conv_kernel - 1) * C + size_t(kMaxVerifyRows) * (C + 2 * nv) +
                           nv * size_t(c.d_k * c.d_v);
  const size_t hidden_rows = mtp ? size_t(kMaxVerifyRows * c.hidden) : 0;
  return (n_gdn * per_layer + hidden_rows) * sizeof(float);
}

void SequenceState::end_verify(int64_t rows) {
  QWEN35_CHECK(verify_rows_ > 0 && rows >= 1 && rows <= verify_rows_);
  pos_ -= verify_rows_ - rows;
  verify_rows_ = 0;
  trim_blocks();
}

void SequenceState::prepare_verify(const ModelConfig& c) {
  const int64_t rows = kMaxVerifyRows;
  const size_t C = size_t(c.conv_channels()), nv = size_t(c.n_v_heads);
  verify_.resize(conv_.size());
  if (has_mtp()) verify_hidden_.resize(size_t(rows * c.hidden));
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
  rope_delta_ = 0;
  verify_rows_ = 0;
  if (!own_pool_) release_blocks();
  for (auto& v : conv_) std::fill(v.begin(), v.end(), 0.0f);
  for (auto& v : delta_) std::fill(v.begin(), v.end(), 0.0f);
  std::fill(mtp_hidden_.begin(), mtp_hidden_.end(), 0.0f);
  mirror_.host_wrote();
}

size_t SequenceState::kv_bytes() const { return size_t(blocks_held()) * pool_->block_bytes(); }

void SequenceState::save_recurrent(float* out) const {
  QWEN35_CHECK(verify_rows_ == 0);
  mirror_.host_read();
  for (const auto& v : conv_) out = std::copy(v.begin(), v.end(), out);
  for (const auto& v : delta_) out = std::copy(v.begin(), v.end(), out);
  std::copy(mtp_hidden_.begin(), mtp_hidden_.end(), out);
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
  std::copy(in, in + mtp_hidden_.size(), mtp_hidden_.begin());
  mirror_.host_wrote();
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

bool SequenceState::fork_from(const SequenceState& src) {
  QWEN35_CHECK(pos_ == 0 && blocks_.empty() && !own_pool_ && src.pool_ == pool_);
  QWEN35_CHECK(src.verify_rows_ == 0 && src.pos_ <= capacity_);
  const int64_t whole = src.pos_ / kernels::kKvBlock, rest = src.pos_ % kernels::kKvBlock;
  adopt(std::span<const int32_t>(src.blocks_).first(size_t(whole)), whole * kernels::kKvBlock);
  if (rest > 0) {
    if (!reserve(src.pos_)) {
      reset();
      return false;
    }
    const int32_t from = src.blocks_[size_t(whole)], to = blocks_.back();
    // The rows [0, rest) of the block, every layer, byte for byte: on the device where the pool's
    // twin is current (model/mirror.h), else on the host.
    const size_t nk = size_t(rest * pool_->k_row_bytes()), nv = size_t(rest * pool_->v_row_bytes());
    std::vector<Mirror::Twin::Run> runs;
    for (int64_t l = 0; l < pool_->n_layers(); ++l) {
      runs.push_back({pool_->k(l, from), pool_->k(l, to), nk});
      runs.push_back({pool_->v(l, from), pool_->v(l, to), nv});
    }
    if (!pool_->mirror().device_copy(pool_->mirror(), runs.data(), runs.size(), false)) {
      pool_->mirror().host_read();
      for (const Mirror::Twin::Run& r : runs)
        std::memcpy(r.dst, r.src, r.bytes);
      pool_->mirror().host_wrote();
    }
  }
  pos_ = src.pos_;
  rope_delta_ = src.rope_delta_;
  // The conv and recurrent state and the MTP row, all that matters of a state without pending
  // verification (its records are scratch): on the device where the source's twin is current.
  std::vector<std::span<const float>> from, to;
  src.recurrent_buffers(&from);
  recurrent_buffers(&to);
  QWEN35_CHECK(from.size() == to.size());
  std::vector<Mirror::Twin::Run> runs;
  for (size_t i = 0; i < from.size(); ++i) {
    QWEN35_CHECK(from[i].size() == to[i].size());
    runs.push_back({from[i].data(), const_cast<float*>(to[i].data()), from[i].size_bytes()});
  }
  if (!mirror_.device_copy(src.mirror_, runs.data(), runs.size(), true)) {
    src.mirror_.host_read();
    conv_ = src.conv_;  // same sizes: assignment copies in place, allocating nothing
    delta_ = src.delta_;
    mtp_hidden_ = src.mtp_hidden_;
    mirror_.host_wrote();
  }
  return true;
}

void SequenceState::regions(std::vector<std::span<float>>* out) {
  out->clear();
  for (auto& v : conv_) out->emplace_back(v);
  for (auto& v : delta_) out->emplace_back(v);
  for (VerifyRecord& r : verify_)
    for (std::vector<float>* v : {&r.conv0, &r.qkv, &r.a, &r.b, &r.after})
      if (!v->empty()) out->emplace_back(*v);
  if (!mtp_hidden_.empty()) out->emplace_back(mtp_hidden_);
  if (!verify_hidden_.empty()) out->emplace_back(verify_hidden_);
}

void SequenceState::recurrent_buffers(std::vector<std::span<const float>>* out) const {
  out->clear();
  for (const auto& v : conv_) out->emplace_back(v);
  for (const auto& v : delta_) out->emplace_back(v);
  if (!mtp_hidden_.empty()) out->emplace_back(mtp_hidden_);
}

size_t SequenceState::recurrent_bytes() const {
  size_t n = 0;
  for (const auto& v : conv_) n += v.size() * 4;
  for (const auto& v : delta_) n += v.size() * 4;
  return n + mtp_hidden_.size() * 4;
}

}  // namespace qwen35::model
