// Decoding a token performs no heap allocation once the engine is warm (issue: "no heap
// allocation per decoded token"). Counts every operator new in this process.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/vision.h"
#include "test_util.h"

namespace {
std::atomic<long> g_allocs{0};
}

// These replace the global operator new and delete, so free() on what this new returns is the
// matching call; GCC, seeing the replacement inlined into a call of the standard new, warns
// otherwise.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace qwen35::model {
namespace {

// Heap allocations over 50 decode steps of a fresh state after a 10-token prompt and 3 warm-up
// steps (workspaces reach their decode size).
long decode_allocations(Model& m) {
  auto st = m.new_state(256);
  std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<float> logits;
  SequenceRows r{st.get(), prompt, false};
  EXPECT_TRUE(m.forward(std::span<const SequenceRows>(&r, 1), &logits).ok());
  int32_t tok = 5;
  auto step = [&] {
    SequenceRows d{st.get(), std::span<const int32_t>(&tok, 1), false};
    EXPECT_TRUE(m.forward(std::span<const SequenceRows>(&d, 1), &logits).ok());
    tok = (tok * 31 + 7) % 1000;
  };
  for (int i = 0; i < 3; ++i) step();
  const long before = g_allocs.load();
  for (int i = 0; i < 50; ++i) step();
  return g_allocs.load() - before;
}

TEST(Alloc, DecodeStepsDoNotAllocate) {
  for (const char* name : {"dense_q4_untied", "moe_bf16"}) {
    auto w = load_weights(qwen35::testing::fixture_models_dir() + "/" + name + "/ckpt");
    ASSERT_TRUE(w.ok());
    core::ThreadPool pool(2);
    Model m(std::move(*w), kernels::cpu_ops(), &pool);
    EXPECT_EQ(decode_allocations(m), 0) << name << ": heap allocations while decoding";
  }
}

// The same with every compressed KV cache type: its rows are encoded in place, the queries
// prepared and scored in per-thread scratch that keeps its size (kv_attend.h).
TEST(Alloc, DecodeStepsDoNotAllocateWithCompressedKv) {
  auto w = load_weights(qwen35::testing::fixture_models_dir() + "/dense_q4_untied/ckpt");
  ASSERT_TRUE(w.ok());
  core::ThreadPool pool(2);
  Model m(std::move(*w), kernels::cpu_ops(), &pool);
  using kernels::KvType;
  for (KvType t : {KvType::kBF16, KvType::kQ8_0, KvType::kQ4_0, KvType::kTurbo4, KvType::kTurbo3}) {
    ASSERT_TRUE(m.set_kv_types({t, t}).ok());
    EXPECT_EQ(decode_allocations(m), 0) << kernels::kv_type_name(t) << ": heap allocations while decoding";
  }
}

// The vision tower: once warm for a grid, encoding another image of it allocates nothing.
TEST(Alloc, VisionEncodesDoNotAllocate) {
  auto w = load_vision_weights(qwen35::testing::source_dir() + "/tests/fixtures/vision/ckpt_tiny");
  ASSERT_TRUE(w.ok()) << w.message();
  core::ThreadPool pool(2);
  auto ws = kernels::cpu_ops().new_workspace();
  kernels::Context ctx;
  ctx.pool = &pool;
  ctx.workspace = ws.get();
  VisionTower tower(**w, kernels::cpu_ops());
  std::vector<float> rows(size_t(24 * 1536), 0.25f), out(size_t(6 * 48));
  ASSERT_TRUE(tower.encode(ctx, rows.data(), 1, 4, 6, out.data()).ok());  // warm-up
  const long before = g_allocs.load();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(tower.encode(ctx, rows.data(), 1, 4, 6, out.data()).ok());
  EXPECT_EQ(g_allocs.load() - before, 0) << "heap allocations while encoding";
}

}  // namespace
}  // namespace qwen35::model
