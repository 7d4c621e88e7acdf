#include "model/kv_pool.h"

#include <sys/mman.h>

#include <new>

#include "core/check.h"
#include "kernels/ops.h"

namespace qwen35::model {
namespace {

float* map_floats(int64_t n) {
  if (n == 0) return nullptr;
  void* p = mmap(nullptr, size_t(n) * sizeof(float), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return static_cast<float*>(p);  // zero-filled pages, resident once written
}

}  // namespace

KvPool::KvPool(const ModelConfig& c, int64_t n_blocks, bool mtp) : n_blocks_(n_blocks), mtp_(mtp) {
  QWEN35_CHECK(n_blocks >= 0 && n_blocks < (int64_t(1) << 31));
  stride_ = kernels::kKvBlock * c.n_kv_heads * c.head_dim;
  for (int64_t l = 0; l < int64_t(c.layers.size()) + (mtp ? 1 : 0); ++l) {
    if (l < int64_t(c.layers.size()) && c.layers[size_t(l)] != LayerKind::kFullAttention) continue;
    k_.push_back(map_floats(n_blocks * stride_));
    v_.push_back(map_floats(n_blocks * stride_));
  }
  refs_.assign(size_t(n_blocks), 0);
  free_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) free_.push_back(int32_t(b));  // block 0 first
}

KvPool::~KvPool() {
  const size_t bytes = size_t(n_blocks_ * stride_) * sizeof(float);
  for (float* p : k_)
    if (p) munmap(p, bytes);
  for (float* p : v_)
    if (p) munmap(p, bytes);
}

int32_t KvPool::allocate() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  refs_[size_t(b)] = 1;
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

size_t KvPool::block_bytes() const { return size_t(2 * stride_) * sizeof(float) * k_.size(); }

}  // namespace qwen35::model
