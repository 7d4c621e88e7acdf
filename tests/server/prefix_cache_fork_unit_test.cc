// The pieces of branch points and forks on made-up state (issue 34), no model run: a tiny
// geometry (one Gated DeltaNet layer, one attention layer). PrefixCache::matched follows a
// prompt through the tree by KV blocks, snapshot or not, and leaves a token to compute;
// SequenceState::fork_from stands where its source stands with the same bits, shares the whole
// blocks, copies the partial one into a block of its own (a write to either leaves the other
// alone) and copies the recurrent state.
#include <gtest/gtest.h>

#include <vector>

#include "model/kv_pool.h"
#include "model/state.h"
#include "runtime/prefix_cache.h"

namespace qwen35::runtime {
namespace {

constexpr int64_t kB = kernels::kKvBlock;

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.n_k_heads = 1;
  c.n_v_heads = 1;
  c.d_k = 4;
  c.d_v = 4;
  c.layers = {model::LayerKind::kLinearAttention, model::LayerKind::kFullAttention};
  return c;
}

std::vector<int32_t> tokens(int s, int64_t n) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(s * 1000 + i % 997));
  return t;
}

// Fills positions [0, pos) of every K and V row and the recurrent state with values of `seed`.
void fill(model::SequenceState* st, int64_t pos, float seed) {
  ASSERT_TRUE(st->reserve(pos));
  auto kv = st->kv(1);
  for (int64_t p = 0; p < pos; ++p)
    for (int64_t j = 0; j < kv.row; ++j) {
      kv.k_at(p)[j] = seed + float(p) + 0.001f * float(j);
      kv.v_at(p)[j] = -seed - float(p);
    }
  std::vector<float> r(st->recurrent_bytes() / 4);
  for (size_t i = 0; i < r.size(); ++i) r[i] = seed * 0.5f + float(i);
  st->load_recurrent(r.data());
  st->advance(pos, false);
}

TEST(PrefixCacheBranchPoint, MatchedFollowsBlocksWithoutSnapshots) {
  const auto c = tiny_config();
  model::KvPool pool(c, 32);
  PrefixCache cache(&pool, 1 << 20);
  model::SequenceState st(c, 8 * kB, &pool);
  const auto a = tokens(1, 5 * kB + 10);
  fill(&st, 4 * kB, 1);
  cache.insert(a, st);  // a snapshot at 4 blocks only
  EXPECT_EQ(cache.matched(a), 4 * kB);
  auto b = a;
  b[size_t(2 * kB + 5)] = 7;  // parts inside block 3
  EXPECT_EQ(cache.matched(b), 2 * kB);
  // resume() finds no snapshot at or below 2 blocks: the branch point is where one is due.
  model::SequenceState fresh(c, 8 * kB, &pool);
  EXPECT_EQ(cache.resume(b, &fresh), 0);
  // The whole prompt on the path: at least one token is left to compute.
  EXPECT_EQ(cache.matched(std::vector<int32_t>(a.begin(), a.begin() + 4 * kB)), 3 * kB);
  EXPECT_EQ(cache.matched(tokens(2, 3 * kB)), 0);
}

// Provisional snapshots (a prefill's copies at its grid lines): missing() names the lines the
// tree lacks; a later prompt that parts between lines resumes from the provisional snapshot
// below, which becomes an ordinary one; over the bound, provisional ones go first (oldest
// first) and never push out an ordinary snapshot; an ordinary insert where a provisional one
// stands makes it ordinary.
TEST(PrefixCacheProvisional, ResumedPromotedAndDroppedFirst) {
  const auto c = tiny_config();
  model::KvPool pool(c, 64);
  model::SequenceState st(c, 16 * kB, &pool);
  const size_t snap = st.recurrent_bytes();
  const auto a = tokens(1, 6 * kB + 10);
  fill(&st, 6 * kB, 1);
  // Room for the 6 blocks, the ordinary snapshot at 6 and three provisional ones.
  PrefixCache cache(&pool, 6 * pool.block_bytes() + 4 * snap);
  cache.insert(a, st);
  EXPECT_EQ(cache.missing(a, 0, 6 * kB, snap),
            (std::vector<int64_t>{kB, 2 * kB, 3 * kB, 4 * kB, 5 * kB}));
  for (int64_t line = 1; line <= 5; ++line) {
    std::vector<float> r(snap / 4, float(line));
    cache.insert_provisional(std::span<const int32_t>(a).first(size_t(line * kB)), st, std::move(r));
  }
  auto s = cache.stats();
  EXPECT_EQ(s.snapshots, 4);  // the ordinary one and the three newest provisional ones
  EXPECT_EQ(s.provisional, 3);
  EXPECT_LE(s.bytes, int64_t(cache.max_bytes()));
  EXPECT_EQ(cache.missing(a, 0, 6 * kB, snap), (std::vector<int64_t>{kB, 2 * kB}));
  auto b = a;
  b[size_t(3 * kB + 20)] = 7;  // parts inside block 4: resumes at 3 blocks
  model::SequenceState r(c, 16 * kB, &pool);
  EXPECT_EQ(cache.resume(b, &r), 3 * kB);
  std::vector<float> got(snap / 4);
  r.save_recurrent(got.data());
  EXPECT_EQ(got, std::vector<float>(snap / 4, 3.0f));
  s = cache.stats();
  EXPECT_EQ(s.provisional, 2);
  EXPECT_EQ(s.promoted, 1);
  // An ordinary insert at 4 blocks takes over the provisional one there.
  model::SequenceState q(c, 16 * kB, &pool);
  fill(&q, 4 * kB, 9);
  cache.insert(a, q);
  s = cache.stats();
  EXPECT_EQ(s.provisional, 1);
  EXPECT_EQ(s.promoted, 2);
  // New provisional ones push out the last provisional one, never an ordinary snapshot.
  const auto d = tokens(2, 3 * kB);
  model::SequenceState w(c, 16 * kB, &pool);
  fill(&w, 2 * kB, 4);
  cache.insert_provisional(std::span<const int32_t>(d).first(size_t(kB)), w, std::vector<float>(snap / 4, 1));
  s = cache.stats();
  EXPECT_EQ(s.snapshots - s.provisional, 3);  // at 6, 3 and 4 blocks of a
  EXPECT_LE(s.bytes, int64_t(cache.max_bytes()));
  model::SequenceState e(c, 16 * kB, &pool);
  EXPECT_EQ(cache.resume(a, &e), 6 * kB);
}

TEST(SequenceStateFork, SameBitsSharedWholeBlocksOwnPartialBlock) {
  const auto c = tiny_config();
  model::KvPool pool(c, 16);
  model::SequenceState src(c, 8 * kB, &pool), dst(c, 8 * kB, &pool);
  const int64_t pos = 2 * kB + 17;
  fill(&src, pos, 3);
  const int64_t used = pool.used_blocks();
  ASSERT_TRUE(dst.fork_from(src));
  EXPECT_EQ(dst.pos(), pos);
  EXPECT_EQ(pool.used_blocks(), used + 1);  // the partial block's copy
  ASSERT_EQ(dst.blocks_held(), 3);
  EXPECT_EQ(dst.blocks()[0], src.blocks()[0]);
  EXPECT_EQ(dst.blocks()[1], src.blocks()[1]);
  EXPECT_NE(dst.blocks()[2], src.blocks()[2]);
  EXPECT_EQ(pool.refs(src.blocks()[0]), 2);
  EXPECT_EQ(pool.refs(src.blocks()[2]), 1);
  auto ks = src.kv(1), kd = dst.kv(1);
  for (int64_t p = 0; p < pos; ++p)
    for (int64_t j = 0; j < ks.row; ++j) {
      ASSERT_EQ(kd.k_at(p)[j], 3 + float(p) + 0.001f * float(j)) << p;
      ASSERT_EQ(kd.v_at(p)[j], -3 - float(p)) << p;
    }
  std::vector<float> rs(src.recurrent_bytes() / 4), rd(rs.size());
  src.save_recurrent(rs.data());
  dst.save_recurrent(rd.data());
  EXPECT_EQ(rs, rd);
  // The choices write their next rows differently: the partial block is not shared.
  kd.k_at(pos)[0] = 1234;
  kd.k_at(pos - 1)[0] = 99;
  EXPECT_NE(ks.k_at(pos - 1)[0], 99);
  dst.reset();
  EXPECT_EQ(pool.refs(src.blocks()[0]), 1);
  EXPECT_EQ(pool.used_blocks(), used);
}

TEST(SequenceStateFork, OnTheGridCopiesNoBlockAndAFullPoolRefuses) {
  const auto c = tiny_config();
  model::KvPool pool(c, 3);
  model::SequenceState src(c, 3 * kB, &pool), a(c, 3 * kB, &pool), b(c, 3 * kB, &pool);
  fill(&src, 2 * kB, 5);
  ASSERT_TRUE(a.fork_from(src));  // on the grid: nothing to copy
  EXPECT_EQ(pool.used_blocks(), 2);
  src.reset();
  a.reset();
  fill(&src, kB + 1, 5);  // 2 blocks; one left
  ASSERT_TRUE(a.fork_from(src));
  EXPECT_FALSE(b.fork_from(src));  // no block left for its partial block: nothing held
  EXPECT_EQ(b.pos(), 0);
  EXPECT_EQ(b.blocks_held(), 0);
  EXPECT_EQ(pool.refs(src.blocks()[0]), 2);
}

}  // namespace
}  // namespace qwen35::runtime
