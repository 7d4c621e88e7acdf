// Paged KV (model/kv_pool.h): the pool's bookkeeping, and attention over blocks taken from a
// shared pool gives the same bits as a state's own pool, on every fixture. Sequences that share
// a pool take their blocks in turns, so each one's table is scattered and interleaved with the
// other's, and blocks come back reused after a reset.
#include <gtest/gtest.h>

#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using qwen35::testing::fixture_model_names;
using qwen35::testing::fixture_models_dir;

ModelConfig one_attention_layer() {
  ModelConfig c;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.layers = {LayerKind::kLinearAttention, LayerKind::kFullAttention};
  return c;
}

TEST(KvPool, AllocatesReleasesAndCountsReferences) {
  KvPool pool(one_attention_layer(), 3);
  EXPECT_EQ(pool.n_blocks(), 3);
  EXPECT_EQ(pool.block_bytes(), size_t(2 * 64 * 2 * 8 * 4));
  const int32_t a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  EXPECT_EQ(pool.allocate(), -1);
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_NE(a, b);
  EXPECT_NE(b, c);
  // Blocks are distinct, writable memory, zero when new.
  EXPECT_EQ(pool.k_f32(0, a)[0], 0.0f);
  pool.k_f32(0, a)[0] = 1;
  pool.v_f32(0, c)[64 * 16 - 1] = 2;
  EXPECT_EQ(pool.k_f32(0, b)[0], 0.0f);
  pool.retain(b);
  EXPECT_EQ(pool.refs(b), 2);
  pool.release(b);
  EXPECT_EQ(pool.free_blocks(), 0);
  pool.release(b);
  EXPECT_EQ(pool.free_blocks(), 1);
  EXPECT_EQ(pool.allocate(), b);  // the block just released is the next one handed out
  pool.release(a);
  pool.release(b);
  pool.release(c);
  EXPECT_EQ(pool.used_blocks(), 0);
}

TEST(KvPool, StatesTakeBlocksAsTheyGrowAndGiveThemBack) {
  const ModelConfig c = one_attention_layer();
  KvPool pool(c, 4);
  SequenceState s(c, 1000, &pool), t(c, 1000, &pool);
  EXPECT_EQ(s.blocks_held(), 0);
  EXPECT_TRUE(s.reserve(65));
  EXPECT_EQ(s.blocks_held(), 2);
  EXPECT_TRUE(s.reserve(64));  // already covered
  EXPECT_EQ(s.blocks_held(), 2);
  EXPECT_TRUE(t.reserve(128));
  EXPECT_FALSE(s.reserve(129));  // the pool is empty
  EXPECT_EQ(s.kv(1).capacity, 128);
  s.reset();
  EXPECT_EQ(pool.free_blocks(), 2);
  {
    SequenceState u(c, 1000, &pool);
    EXPECT_TRUE(u.reserve(100));
    EXPECT_EQ(pool.free_blocks(), 0);
  }
  EXPECT_EQ(pool.free_blocks(), 2);  // a destroyed state gives its blocks back
  // A state without a pool owns one sized for its capacity, every block taken.
  SequenceState own(c, 130);
  EXPECT_EQ(own.blocks_held(), 3);
  EXPECT_EQ(own.kv(1).capacity, 192);
}

class PagedKvTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto w = load_weights(fixture_models_dir() + "/" + GetParam() + "/ckpt");
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), &pool_);
  }
  std::vector<int32_t> tokens(size_t n, size_t salt) const {
    std::vector<int32_t> t;
    for (size_t i = 0; i < n; ++i)
      t.push_back(int32_t((i * 7919 + salt * 104729 + 13) % size_t(model_->config().vocab)));
    return t;
  }
  // Feeds toks[from, to) to `st` in pieces of `step`, appending every row's logits.
  void feed(SequenceState& st, const std::vector<int32_t>& toks, size_t from, size_t to,
            size_t step, std::vector<float>* all) {
    std::vector<float> part;
    for (size_t p = from; p < to; p += step) {
      const size_t len = std::min(step, to - p);
      SequenceRows r{&st, std::span<const int32_t>(toks.data() + p, len), true};
      auto s = model_->forward(std::span<const SequenceRows>(&r, 1), &part);
      ASSERT_TRUE(s.ok()) << s.message();
      all->insert(all->end(), part.begin(), part.end());
    }
  }
  core::ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
};

TEST_P(PagedKvTest, SharedPoolGivesTheBitsOfAPrivateOne) {
  const ModelConfig& c = model_->config();
  const std::vector<int32_t> a = tokens(200, 1), b = tokens(170, 2), d = tokens(90, 3);
  // Alone, each with its own contiguous pool: prefill in grid chunks, then decode.
  std::vector<float> la, lb, ld;
  {
    SequenceState sa(c, 256), sb(c, 256), sd(c, 256);
    feed(sa, a, 0, 128, 64, &la);
    feed(sa, a, 128, 200, 1, &la);
    feed(sb, b, 0, 128, 64, &lb);
    feed(sb, b, 128, 170, 1, &lb);
    feed(sd, d, 0, 64, 64, &ld);
    feed(sd, d, 64, 90, 1, &ld);
  }
  // Sharing one pool, in turns: the blocks of a and b interleave; a third sequence reuses the
  // blocks of a reset one in another order.
  KvPool pool(c, 9);
  SequenceState ta(c, 256, &pool), tb(c, 256, &pool), tx(c, 256, &pool), td(c, 256, &pool);
  std::vector<float> ga, gb, gx, gd;
  feed(tx, b, 0, 64, 64, &gx);  // takes block 0; released below
  for (size_t p = 0; p < 128; p += 64) {
    feed(ta, a, p, p + 64, 64, &ga);
    feed(tb, b, p, p + 64, 64, &gb);
  }
  const int32_t reused = tx.blocks()[0];
  tx.reset();
  for (size_t p = 128; p < 200; ++p) {
    feed(ta, a, p, p + 1, 1, &ga);
    if (p < 170) feed(tb, b, p, p + 1, 1, &gb);
  }
  EXPECT_EQ(ta.blocks_held(), 4);
  EXPECT_EQ(tb.blocks_held(), 3);
  feed(td, d, 0, 64, 64, &gd);
  feed(td, d, 64, 90, 1, &gd);
  EXPECT_EQ(ga, la);
  EXPECT_EQ(gb, lb);
  EXPECT_EQ(gd, ld);
  EXPECT_EQ(pool.free_blocks(), 0);
  EXPECT_EQ(ta.blocks()[2], reused);  // a's third block was the reset sequence's
  EXPECT_EQ(ta.blocks()[1], tb.blocks()[0] + 1);  // and a's and b's blocks interleave
}

TEST_P(PagedKvTest, AnEmptyPoolIsAnErrorThatChangesNothing) {
  const ModelConfig& c = model_->config();
  KvPool pool(c, 2);
  SequenceState s(c, 1000, &pool);
  const std::vector<int32_t> t = tokens(129, 4);
  std::vector<float> out;
  SequenceRows r{&s, t, false};
  auto st = model_->forward(std::span<const SequenceRows>(&r, 1), &out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("KV pool is out of blocks"), std::string::npos) << st.message();
  EXPECT_EQ(s.pos(), 0);
  // What fits still runs.
  SequenceRows r2{&s, std::span<const int32_t>(t.data(), 128), false};
  EXPECT_TRUE(model_->forward(std::span<const SequenceRows>(&r2, 1), &out).ok());
  EXPECT_EQ(s.pos(), 128);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PagedKvTest, ::testing::ValuesIn(fixture_model_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace qwen35::model
