// The device's top-k of logits rows (vulkan/topk.h) against the ranking the sampler and the
// pipeline's top-k message use (dist/pipeline.cc: by value, then the lower id), computed here by
// a plain sort: ties across the k-th value, -0 against +0, infinities, rows of one value, k of 1
// and of a quarter of the vocabulary, vocabularies not a multiple of the workgroup, rows of
// different k in one dispatch, and rows cut over several dispatches.
#include "vulkan/topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "vk_test.h"

namespace qwen35::vulkan {
namespace {

// The k pairs in the shader's documented order: the values above the k-th largest in increasing
// id, then the k-th's ties in increasing id. Rows here hold no NaN, so float comparison ranks.
void expected(const float* row, int64_t vocab, int64_t k, std::vector<uint32_t>* out) {
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [row](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  const float kth = row[order[size_t(k - 1)]];
  std::vector<int32_t> above, ties;
  for (int64_t j = 0; j < k; ++j) (row[order[size_t(j)]] > kth ? above : ties).push_back(order[size_t(j)]);
  std::sort(above.begin(), above.end());
  std::sort(ties.begin(), ties.end());
  above.insert(above.end(), ties.begin(), ties.end());
  for (int32_t i : above) {
    float v = row[i];
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    out->push_back(bits);
  }
  for (int32_t i : above) out->push_back(uint32_t(i));
}

// Rows of `vocab` logits, the top k of row r taken per ks[r] (0: skipped), in one submission
// whose grid is cut into dispatches of `per_dispatch` workgroups (0: the device's limit).
void check(const std::vector<float>& rows, int64_t vocab, const std::vector<uint32_t>& ks,
           uint32_t per_dispatch = 0) {
  DeviceOptions o;
  o.max_groups = per_dispatch;
  QWEN35_VK_DEVICE_OR_SKIP(dev, o);
  const int64_t n = int64_t(ks.size());
  std::vector<uint32_t> tasks, want;
  uint32_t words = 0;
  for (int64_t r = 0; r < n; ++r) {
    tasks.push_back(ks[size_t(r)]);
    tasks.push_back(words);
    words += 2 * ks[size_t(r)];
    if (ks[size_t(r)]) expected(rows.data() + r * vocab, vocab, ks[size_t(r)], &want);
  }
  Buffer bl = put(*dev, rows.data(), rows.size() * 4), bt = put(*dev, tasks.data(), tasks.size() * 4);
  std::vector<uint32_t> got(std::max<uint32_t>(words, 1), 0xDEADBEEFu);
  Buffer bo = put(*dev, got.data(), got.size() * 4);
  Recorder rec(*dev);
  ASSERT_TRUE(rec.begin().ok());
  record_top_k(rec, {&bl}, n, vocab, {&bt}, {&bo});
  rec.stage_out({&bo}, got.size() * 4, got.data());
  ASSERT_TRUE(rec.submit().ok()) << rec.status().message();
  got.resize(words);
  EXPECT_EQ(got, want);
}

TEST(VulkanTopK, RanksByValueThenIdAsTheSamplerDoes) {
  std::mt19937 g(7);
  for (int64_t vocab : {1, 5, 64, 1000, 4096, 151936 / 16 + 3}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> rows;
    std::vector<uint32_t> ks;
    for (uint32_t k : {1u, 2u, 40u, uint32_t(vocab / 4), uint32_t(vocab)}) {
      k = std::clamp<uint32_t>(k, 1, uint32_t(vocab));
      for (int64_t i = 0; i < vocab; ++i) rows.push_back(d(g));
      ks.push_back(k);
    }
    // Ties across the k-th value: values rounded to a coarse grid, so most appear many times.
    for (int64_t i = 0; i < vocab; ++i) rows.push_back(std::round(d(g)));
    ks.push_back(uint32_t(std::min<int64_t>(vocab, 7)));
    // One value everywhere: the k lowest ids.
    rows.insert(rows.end(), size_t(vocab), 0.5f);
    ks.push_back(uint32_t(std::min<int64_t>(vocab, 3)));
    // A row that is skipped (k = 0) between the others.
    rows.insert(rows.end(), size_t(vocab), 1.0f);
    ks.push_back(0);
    // -0 and +0, infinities and the extremes of the floats.
    std::vector<float> s(size_t(vocab), -std::numeric_limits<float>::infinity());
    const float special[] = {-0.0f, 0.0f, std::numeric_limits<float>::infinity(), -1e-45f, 1e-45f,
                             std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(), 0.0f, -0.0f};
    for (size_t i = 0; i < s.size(); ++i) s[i] = special[(i * 7) % 9];
    rows.insert(rows.end(), s.begin(), s.end());
    ks.push_back(uint32_t(std::min<int64_t>(vocab, 6)));
    check(rows, vocab, ks);
  }
}

TEST(VulkanTopK, RowsCutOverDispatchesGiveTheSamePairs) {
  const int64_t vocab = 777;
  std::mt19937 g(11);
  std::uniform_int_distribution<int> d(-20, 20);  // many ties
  std::vector<float> rows(size_t(vocab * 9));
  for (float& v : rows) v = float(d(g)) * 0.25f;
  std::vector<uint32_t> ks = {1, 3, 50, 0, 194, 1, 9, 100, 2};
  check(rows, vocab, ks, 2);
}

}  // namespace
}  // namespace qwen35::vulkan
