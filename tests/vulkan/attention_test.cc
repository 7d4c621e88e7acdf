// Gated full attention on the device against the reference (kernels/ref) over a paged fp32
// cache: outputs within 2e-5 and cached keys within 1e-5, as the CPU's op tests; and the same
// bits whatever the chunking of the prompt (one call, or chunks, or token by token), since a
// row's keys and their order are fixed by its position.
#include <gtest/gtest.h>

#include <vector>

#include "../kernels/test_kv.h"
#include "../kernels/test_matrices.h"
#include "kernels/ops.h"
#include "vk_test.h"
#include "vulkan/attention.h"
#include "vulkan/ops.h"

// A namespace of its own: the test binary compiles as one unit (tests/CMakeLists.txt).
namespace qwen35::vulkan::attention_test {
namespace {

using kernels::expect_close;
using kernels::randn;

constexpr int64_t kNh = 4, kNkv = 2, kHd = 32, kRot = 16, kRows = 73, kCap = 128;
constexpr double kTheta = 1e7;

struct Inputs {
  std::vector<float> qg, k, v, qn, kn;
};

Inputs make_inputs(bool gated) {
  const int64_t q_row = gated ? 2 * kHd : kHd;
  return {randn(size_t(kRows * kNh * q_row), 1), randn(size_t(kRows * kNkv * kHd), 2),
          randn(size_t(kRows * kNkv * kHd), 3), randn(size_t(kHd), 4), randn(size_t(kHd), 5)};
}

Buffer put(Device& dev, const void* data, uint64_t bytes) {
  auto b = dev.buffer(bytes, MemoryKind::kDevice);
  EXPECT_TRUE(b.ok()) << b.message();
  if (!b.ok()) return Buffer();
  EXPECT_TRUE(dev.upload(*b, 0, data, bytes).ok());
  return std::move(*b);
}
template <typename T>
Buffer put(Device& dev, const std::vector<T>& v) {
  return put(dev, v.data(), v.size() * sizeof(T));
}
template <typename T>
std::vector<T> slice(const std::vector<T>& v, int64_t row0, int64_t rows, int64_t width) {
  return std::vector<T>(v.begin() + row0 * width, v.begin() + (row0 + rows) * width);
}

struct Result {
  std::vector<float> out, keys;  // [rows, nh·hd]; the cache's keys of positions [0, rows)
};

// The rows in chunks of the given sizes, each chunk its own submission; the cache's blocks in
// reverse physical order (paged). Keys: those of the rows' positions, in order.
Result run_device(Device& dev, const Inputs& in, bool gated, int64_t first_key, const std::vector<int64_t>& chunks) {
  const int64_t q_row = gated ? 2 * kHd : kHd, row = kNkv * kHd, blocks = kCap / 64;
  auto table = std::vector<int32_t>(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[size_t(b)] = int32_t(blocks - 1 - b);
  Buffer kp = put(dev, std::vector<float>(size_t(kCap * row), 0.0f)), vp = put(dev, std::vector<float>(size_t(kCap * row), 0.0f));
  Buffer bt = put(dev, table), qn = put(dev, in.qn), kn = put(dev, in.kn);
  Buffer rt = put(dev, rope_table(kTheta, kRot, kCap));
  Result r;
  // Row r at position first_key + r: the MTP head's cache starts at position 1 (model/state.h).
  int64_t done = 0;
  for (int64_t n : chunks) {
    const int64_t pos0 = first_key + done;
    std::vector<int32_t> pos(size_t(n * 3));
    for (int64_t t = 0; t < n; ++t) pos[size_t(3 * t)] = pos[size_t(3 * t + 1)] = pos[size_t(3 * t + 2)] = int32_t(pos0 + t);
    Buffer qg = put(dev, slice(in.qg, done, n, kNh * q_row)), k = put(dev, slice(in.k, done, n, row));
    Buffer v = put(dev, slice(in.v, done, n, row)), bp = put(dev, pos);
    Buffer qt = put(dev, std::vector<float>(size_t(n * kNh * kHd))), kt = put(dev, std::vector<float>(size_t(n * row)));
    Buffer out = put(dev, std::vector<float>(size_t(n * kNh * kHd)));
    AttentionShape s{kNh, kNkv, kHd, kRot, 1e-6f, first_key, gated};
    AttentionInputs ai{{&qg}, {&k}, {&v}, {&qn}, {&kn}, {&bp}, nullptr, {&rt}, kCap, {&qt}, {&kt}};
    Recorder rec(dev);
    EXPECT_TRUE(rec.begin().ok());
    record_attention(rec, s, ai, n, pos0, {{&kp}, {&vp}, {&bt}, kCap}, {&out});
    std::vector<float> o(size_t(n * kNh * kHd));
    rec.stage_out({&out}, o.size() * 4, o.data());
    auto st = rec.submit();
    EXPECT_TRUE(st.ok()) << st.message();
    r.out.insert(r.out.end(), o.begin(), o.end());
    done += n;
  }
  std::vector<float> pool(size_t(kCap * row));
  EXPECT_TRUE(dev.download(kp, 0, pool.data(), pool.size() * 4).ok());
  for (int64_t p = first_key; p < first_key + done; ++p) {
    const float* at = pool.data() + (table[size_t(p / 64)] * 64 + p % 64) * row;
    r.keys.insert(r.keys.end(), at, at + row);
  }
  return r;
}

TEST(VulkanAttention, MatchesTheReferenceAndIgnoresTheChunking) {
  QWEN35_VK_DEVICE_OR_SKIP(dev, {});
  const kernels::Ops& ref = kernels::ref_ops();
  for (bool gated : {true, false})
    for (int64_t first_key : {0, 1}) {
      SCOPED_TRACE(std::string(gated ? "gated" : "ungated") + " first_key " + std::to_string(first_key));
      const Inputs in = make_inputs(gated);
      const int64_t q_row = gated ? 2 * kHd : kHd, row = kNkv * kHd;
      // The reference: a 70-row prefill (across a block boundary), then three decode rows.
      kernels::TestKv cache(kCap, row, true);
      std::vector<float> want(size_t(kRows * kNh * kHd));
      kernels::Ops::AttentionParams ap{kNh, kNkv, kHd, kRot, float(kTheta), 1e-6f, in.qn.data(), in.kn.data(), first_key};
      ap.gated = gated;
      int64_t done = 0;
      for (int64_t n : {70, 1, 1, 1}) {
        ref.attention({}, ap, in.qg.data() + done * kNh * q_row, in.k.data() + done * row, in.v.data() + done * row, n,
                      first_key + done, cache.view(), want.data() + done * kNh * kHd);
        done += n;
      }
      const Result a = run_device(*dev, in, gated, first_key, {70, 1, 1, 1});
      expect_close(a.out.data(), want.data(), want.size(), 2e-5f, "attention");
      std::vector<float> keys = cache.keys(first_key + kRows);
      keys.erase(keys.begin(), keys.begin() + first_key * row);
      expect_close(a.keys.data(), keys.data(), keys.size(), 1e-5f, "k cache");
      const Result b = run_device(*dev, in, gated, first_key, {kRows});
      const Result c = run_device(*dev, in, gated, first_key, {40, 24, 9});
      EXPECT_EQ(a.out, b.out) << "chunking changed a bit";
      EXPECT_EQ(a.out, c.out) << "chunking changed a bit";
      EXPECT_EQ(a.keys, b.keys);
    }
}

}  // namespace
}  // namespace qwen35::vulkan::attention_test
