#include "model/kv_pool.h"

#include <sys/mman.h>

#include <cstring>
#include <new>

#include "core/check.h"
#include "kernels/ops.h"

namespace qwen35::model {
namespace {

uint8_t* map_bytes(size_t n) {
  if (n == 0) return nullptr;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<uint8_t*>(p);  // zero-filled pages, resident once written
}

// The pool's format of one cache: the fp32 exact path's (unrotated, head_dim kept) for f32.
kernels::KvFormat format_of(const ModelConfig& c, kernels::KvType t) {
  return kernels::kv_cache_format(t, c.head_dim);
}

int64_t n_attention_layers(const ModelConfig& c, bool mtp) {
  int64_t n = mtp ? 1 : 0;
  for (auto kind : c.layers) n += kind == LayerKind::kFullAttention ? 1 : 0;
  return n;
}

}  // namespace

core::Status check_kv_types(const ModelConfig& c, kernels::KvTypes types) {
  return kernels::kv_types_check(types, c.head_dim);
}

size_t kv_bytes_per_token(const ModelConfig& c, kernels::KvTypes types, bool mtp) {
  const size_t row = kernels::kv_row_bytes(format_of(c, types.k)) +
                     kernels::kv_row_bytes(format_of(c, types.v));
  return row * size_t(c.n_kv_heads) * size_t(n_attention_layers(c, mtp));
}

KvPool::KvPool(const ModelConfig& c, int64_t n_blocks, bool mtp, kernels::KvTypes types)
    : n_blocks_(n_blocks), mtp_(mtp), types_(types) {
  QWEN35_CHECK(n_blocks >= 0 && n_blocks < (int64_t(1) << 31));
  QWEN35_CHECK(check_kv_types(c, types).ok());
  values_ = kernels::kKvBlock * c.n_kv_heads * c.head_dim;
  k_format_ = format_of(c, types.k);
  v_format_ = format_of(c, types.v);
  k_row_ = c.n_kv_heads * int64_t(kernels::kv_row_bytes(k_format_));
  v_row_ = c.n_kv_heads * int64_t(kernels::kv_row_bytes(v_format_));
  for (int64_t l = 0; l < n_attention_layers(c, mtp); ++l) {
    k_.push_back(map_bytes(size_t(n_blocks) * k_block_bytes()));
    v_.push_back(map_bytes(size_t(n_blocks) * v_block_bytes()));
  }
  refs_.assign(size_t(n_blocks), 0);
  used_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 first
}

KvPool::~KvPool() {
  for (uint8_t* p : k_)
    if (p) munmap(p, size_t(n_blocks_) * k_block_bytes());
  for (uint8_t* p : v_)
    if (p) munmap(p, size_t(n_blocks_) * v_block_bytes());
}

int32_t KvPool::allocate() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[size_t(b)] = 1;
  if (used_[size_t(b)]) {
    for (int64_t l = 0; l < n_layers(); ++l) {
      std::memset(k(l, b), 0, k_block_bytes());
      std::memset(v(l, b), 0, v_block_bytes());
    }
  }
  used_[size_t(b)] = 1;
  return b;
}

void KvPool::retain(int32_t block) {
  QWEN35_CHECK(block >= 0 && block < n_blocks_ && refs_[size_t(block)] > 0);
  ++refs_[size_t(block)];
}

void KvPool::release(int32_t block) {
  QWEN35_CHECK(block >= 0 && block < n_blocks_ && refs_[size_t(block)] > 0);
  if (--refs_[size_t(block)] == 0) free_.push_back(block);
}

void KvPool::regions(std::vector<std::span<uint8_t>>* out) const {
  out->clear();
  for (size_t l = 0; l < k_.size(); ++l) {
    out->emplace_back(k_[l], size_t(n_blocks_) * k_block_bytes());
    out->emplace_back(v_[l], size_t(n_blocks_) * v_block_bytes());
  }
}

size_t KvPool::block_bytes() const { return (k_block_bytes() + v_block_bytes()) * k_.size(); }

float* KvPool::k_f32(int64_t attn_layer, int32_t block) const {
  QWEN35_CHECK(types_.k == kernels::KvType::kF32);
  return reinterpret_cast<float*>(k(attn_layer, block));
}

float* KvPool::v_f32(int64_t attn_layer, int32_t block) const {
  QWEN35_CHECK(types_.v == kernels::KvType::kF32);
  return reinterpret_cast<float*>(v(attn_layer, block));
}

}  // namespace qwen35::model
