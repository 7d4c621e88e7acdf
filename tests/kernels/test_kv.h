// A key/value cache as a block table, for the attention op tests (ops_test.cc,
// kv_cache_attention_test.cc).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kv_format.h"
#include "kernels/ops.h"

namespace qwen35::kernels {

// A key/value cache of `cap` positions as a block table; `scatter` lays the blocks out in reverse
// order with a gap between them, as a paged pool might. fp32 rows, or rows of `types` (the KV
// pool's formats at head_dim hd).
struct TestKv {
  TestKv(int64_t cap, int64_t row, bool scatter, KvTypes types = {}, int64_t hd = 0) : row_(row) {
    view_.capacity = cap;
    view_.row = row;
    if (!(types == KvTypes{})) {
      view_.k_format = kv_cache_format(types.k, hd);
      view_.v_format = kv_cache_format(types.v, hd);
      view_.k_bytes = row / hd * int64_t(kv_row_bytes(view_.k_format));
      view_.v_bytes = row / hd * int64_t(kv_row_bytes(view_.v_format));
    }
    const int64_t n = (cap + kKvBlock - 1) / kKvBlock, gap = scatter ? 28 : 0;
    const int64_t kspan = kKvBlock * view_.k_stride() + gap, vspan = kKvBlock * view_.v_stride() + gap;
    k_.assign(size_t(n * kspan), 0);
    v_.assign(size_t(n * vspan), 0);
    for (int64_t b = 0; b < n; ++b) {
      const int64_t at = scatter ? n - 1 - b : b;
      kb_.push_back(k_.data() + at * kspan);
      vb_.push_back(v_.data() + at * vspan);
    }
    view_.k_blocks = kb_.data();
    view_.v_blocks = vb_.data();
  }
  const KvView& view() const { return view_; }
  std::vector<float> keys(int64_t n) const {  // positions [0, n) in order (fp32)
    std::vector<float> out;
    for (int64_t p = 0; p < n; ++p) out.insert(out.end(), view_.k_at(p), view_.k_at(p) + row_);
    return out;
  }
  std::vector<uint8_t> bytes(int64_t n) const {  // K then V rows of positions [0, n)
    std::vector<uint8_t> out;
    for (int64_t p = 0; p < n; ++p) {
      out.insert(out.end(), view_.k_row(p), view_.k_row(p) + view_.k_stride());
      out.insert(out.end(), view_.v_row(p), view_.v_row(p) + view_.v_stride());
    }
    return out;
  }

 private:
  int64_t row_;
  std::vector<uint8_t> k_, v_;
  std::vector<uint8_t*> kb_, vb_;
  KvView view_;
};

}  // namespace qwen35::kernels
