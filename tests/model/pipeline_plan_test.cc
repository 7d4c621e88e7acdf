// The pipeline plan (model/pipeline_plan.h): the per-layer costs count every tensor of a layer
// (against the geometry of a bf16 fixture) and cover the loader's count on dense, MoE, tied and
// untied fixtures; the
// balanced split is the best contiguous split, found by trying every split; forced splits,
// including one that leaves a rank a single layer and one that cuts between a linear-attention
// and a full-attention layer; and the refusals, one line each.
#include "model/pipeline_plan.h"

#include <gtest/gtest.h>

#include <functional>

#include "model/resident.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

std::unique_ptr<ModelWeights> load(const std::string& name) {
  auto w = load_weights(qwen35::testing::source_dir() + "/tests/fixtures/models/" + name + "/ckpt");
  EXPECT_TRUE(w.ok()) << w.message();
  return w.ok() ? std::move(*w) : nullptr;
}

// A bf16 dense layer from the geometry alone: matrices as stored (2 bytes a value), vectors and
// conv taps as the fp32 copies the loader keeps.
size_t bf16_layer_bytes(const ModelConfig& c, LayerKind kind) {
  const size_t h = size_t(c.hidden);
  size_t matrices = 3 * h * size_t(c.intermediate), floats = 2 * h;  // MLP; the two norms
  if (kind == LayerKind::kFullAttention) {
    const size_t q = size_t(c.n_heads * c.head_dim), kv = size_t(c.n_kv_heads * c.head_dim);
    matrices += h * 2 * q + 2 * h * kv + q * h;  // q with its gate, k, v, o
    floats += 2 * size_t(c.head_dim);             // q and k norms
  } else {
    const size_t nv = size_t(c.n_v_heads), v = nv * size_t(c.d_v);
    matrices += h * size_t(c.conv_channels()) + h * v + 2 * h * nv + v * h;  // qkv, z, b, a, out
    floats += size_t(c.conv_channels() * c.conv_kernel) + 2 * nv + size_t(c.d_v);  // taps, A, dt, norm
  }
  return 2 * matrices + 4 * floats;
}

TEST(PipelinePlan, CostsCountEveryTensorOfALayer) {
  auto w = load("dense_bf16_tied");
  ASSERT_NE(w, nullptr);
  const PipelineCosts c = pipeline_costs(*w, 256, 2);
  const ModelConfig& cfg = w->config;
  ASSERT_EQ(c.kinds.size(), size_t(cfg.n_layers));
  for (size_t l = 0; l < c.kinds.size(); ++l) {
    EXPECT_EQ(c.layer_weights[l], bf16_layer_bytes(cfg, c.kinds[l])) << "layer " << l;
    // State: KV of a full-attention layer, conv and recurrent state of the others, per slot.
    const size_t want = c.kinds[l] == LayerKind::kFullAttention
                            ? size_t(2 * cfg.n_kv_heads * cfg.head_dim * 4 * 256 * 2)
                            : size_t(((cfg.conv_kernel - 1) * cfg.conv_channels() + cfg.n_v_heads * cfg.d_k * cfg.d_v) * 4 * 2);
    EXPECT_EQ(c.layer_state[l], want) << "layer " << l;
  }
  EXPECT_EQ(c.embedding, size_t(cfg.vocab * cfg.hidden) * 2);
  EXPECT_EQ(c.head, size_t(cfg.vocab * cfg.hidden) * 2 + size_t(cfg.hidden) * 4);  // tied, + final norm
}

TEST(PipelinePlan, CostsCoverWhatTheLoaderCounts) {
  // The loader counts stored bytes; the plan counts vectors at their fp32 copies: at least as much.
  for (const char* name : {"dense_bf16_tied", "dense_q4_untied", "moe_bf16", "moe_q4"}) {
    auto w = load(name);
    ASSERT_NE(w, nullptr);
    const PipelineCosts c = pipeline_costs(*w, 256, 2);
    size_t layers = 0;
    for (size_t b : c.layer_weights) layers += b;
    const size_t head_only = c.head - (w->tied ? w->embed.bytes() : 0);
    EXPECT_GE(layers + c.embedding + head_only, w->weight_bytes) << name;
  }
}

// Costs of made-up sizes, to compare the planner with every split tried in turn.
PipelineCosts made_up(const std::vector<size_t>& weights, size_t embedding, size_t head) {
  PipelineCosts c;
  c.layer_weights = weights;
  c.layer_state.assign(weights.size(), 3);
  for (size_t l = 0; l < weights.size(); ++l)
    c.kinds.push_back(l % 4 == 3 ? LayerKind::kFullAttention : LayerKind::kLinearAttention);
  c.embedding = embedding;
  c.head = head;
  return c;
}

// The smallest largest rank over every way to cut `n` layers into `ranks` non-empty ranges.
size_t best_by_trying(const PipelineCosts& c, int ranks) {
  const int64_t n = int64_t(c.layer_weights.size());
  size_t best = SIZE_MAX;
  std::vector<int64_t> starts;
  std::function<void(int64_t)> go = [&](int64_t from) {
    if (int64_t(starts.size()) == ranks - 1) {
      auto p = plan_pipeline(c, ranks, starts);
      EXPECT_TRUE(p.ok()) << p.message();
      if (p.ok()) best = std::min(best, p->largest());
      return;
    }
    for (int64_t s = from; s < n; ++s) {
      starts.push_back(s);
      go(s + 1);
      starts.pop_back();
    }
  };
  go(1);
  return best;
}

TEST(PipelinePlan, TheBalancedSplitIsTheBestContiguousOne) {
  const std::vector<std::vector<size_t>> cases = {
      {10, 10, 10, 10, 10, 10, 10, 10}, {1, 50, 2, 2, 40, 3, 3, 9, 30}, {100, 1, 1, 1, 1, 1, 1}, {5, 7, 9, 11, 13, 15}};
  for (const auto& weights : cases)
    for (size_t embedding : {size_t(0), size_t(25)})
      for (int ranks = 1; ranks <= int(weights.size()); ++ranks) {
        const PipelineCosts c = made_up(weights, embedding, 20);
        auto p = plan_pipeline(c, ranks);
        ASSERT_TRUE(p.ok()) << p.message();
        ASSERT_EQ(int(p->ranks.size()), ranks);
        EXPECT_EQ(p->largest(), best_by_trying(c, ranks)) << "ranks " << ranks;
        // Contiguous, every layer once, the ends where they belong.
        EXPECT_EQ(p->ranks.front().first, 0);
        EXPECT_EQ(p->ranks.back().end, int64_t(weights.size()));
        for (size_t r = 0; r < p->ranks.size(); ++r) {
          EXPECT_LT(p->ranks[r].first, p->ranks[r].end);
          if (r > 0) {
            EXPECT_EQ(p->ranks[r].first, p->ranks[r - 1].end);
          }
          EXPECT_EQ(p->ranks[r].embedding, r == 0);
          EXPECT_EQ(p->ranks[r].head, r + 1 == p->ranks.size());
        }
      }
}

TEST(PipelinePlan, ForcedSplits) {
  auto w = load("dense_bf16_tied");
  ASSERT_NE(w, nullptr);
  const PipelineCosts c = pipeline_costs(*w, 128, 1);
  const int64_t n = int64_t(c.kinds.size());
  ASSERT_GE(n, 4);
  // A rank of one layer, and a cut between a linear-attention and a full-attention layer.
  int64_t boundary = -1;
  for (int64_t l = 1; l < n; ++l)
    if (c.kinds[size_t(l - 1)] != c.kinds[size_t(l)]) boundary = l;
  ASSERT_GT(boundary, 0);
  for (const std::vector<int64_t>& starts : {std::vector<int64_t>{1}, {n - 1}, {boundary}, {1, 2}}) {
    auto p = plan_pipeline(c, int(starts.size()) + 1, starts);
    ASSERT_TRUE(p.ok()) << p.message();
    for (size_t r = 1; r < p->ranks.size(); ++r) EXPECT_EQ(p->ranks[r].first, starts[r - 1]);
    size_t total = 0;
    for (const RankShare& s : p->ranks) total += s.weights;
    size_t layers = 0;
    for (size_t b : c.layer_weights) layers += b;
    EXPECT_EQ(total, layers + c.embedding + c.head + c.mtp);
  }
  EXPECT_NE(describe(*plan_pipeline(c, 2, {1}), c).find("rank 0: layers 0-0"), std::string::npos);
}

// A rank's share in memory (model/resident.h): after keep_share and drop_mapped_pages none of
// the checkpoint's pages is resident; fault_in_held reads back the tensors held, which are the
// plan's bytes for the rank exactly (matrices as stored, fp32 copies), and the pages mapped again
// (Rss from /proc/self/smaps) cover those bytes, with at most a page more at either end of each
// array.
TEST(PipelinePlan, ARankHoldsItsShareInMemory) {
  for (const char* name : {"dense_bf16_tied", "dense_q4_untied", "moe_bf16"}) {
    SCOPED_TRACE(name);
    auto whole = load(name);
    ASSERT_NE(whole, nullptr);
    const PipelineCosts c = pipeline_costs(*whole, 128, 1);
    auto plan = plan_pipeline(c, 2);
    ASSERT_TRUE(plan.ok()) << plan.message();
    for (const RankShare& s : plan->ranks) {
      auto w = load(name);
      ASSERT_NE(w, nullptr);
      keep_share(*w, s);
      drop_mapped_pages(*w);
      EXPECT_EQ(mapped_resident_bytes(*w), 0u);
      const HeldBytes held = fault_in_held(*w);
      EXPECT_EQ(held.mapped + held.copies, s.weights);
      const size_t resident = mapped_resident_bytes(*w);
      EXPECT_GE(resident, held.mapped);
      EXPECT_LE(resident, held.mapped + held.mapped_ranges * 2 * 4096);
    }
  }
}

TEST(PipelinePlan, RefusalsAreOneLine) {
  const PipelineCosts c = made_up({4, 4, 4}, 1, 1);
  const auto message = [&](int ranks, std::vector<int64_t> starts, size_t budget) {
    auto p = plan_pipeline(c, ranks, starts, budget);
    EXPECT_FALSE(p.ok());
    return p.ok() ? std::string() : p.message();
  };
  EXPECT_NE(message(4, {}, 0).find("at most 3 ranks"), std::string::npos);
  EXPECT_NE(message(0, {}, 0).find("at least one rank"), std::string::npos);
  EXPECT_NE(message(2, {0}, 0).find("must increase"), std::string::npos);
  EXPECT_NE(message(2, {3}, 0).find("must increase"), std::string::npos);
  EXPECT_NE(message(3, {2, 1}, 0).find("must increase"), std::string::npos);
  EXPECT_NE(message(3, {1}, 0).find("needs ranks - 1"), std::string::npos);
  EXPECT_NE(message(1, {}, 10).find("over the budget"), std::string::npos);
  for (const std::string& m : {message(4, {}, 0), message(1, {}, 10)}) EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_TRUE(plan_pipeline(c, 3, {}, 20).ok());
}

// A step's micro-batches (dist/pipeline.h), cuts worked out by hand from the rule: whole
// sequences in order, g groups cut where the rows so far first reach k/g of the step's, the most
// groups (at most m) whose every group has min_rows rows.
TEST(PipelinePlan, MicrobatchCuts) {
  using V = std::vector<size_t>;
  const auto cuts = [](std::vector<int64_t> rows, int m, int64_t min_rows) {
    return microbatch_starts(rows, m, min_rows);
  };
  const std::vector<int64_t> decode8(8, 1);
  EXPECT_EQ(cuts(decode8, 1, 1), V({0}));
  EXPECT_EQ(cuts(decode8, 2, 1), V({0, 4}));
  EXPECT_EQ(cuts(decode8, 4, 1), V({0, 2, 4, 6}));
  EXPECT_EQ(cuts(decode8, 2, 32), V({0}));  // 4 rows a group: a step of decode stays whole
  EXPECT_EQ(cuts({5, 5, 5}, 2, 1), V({0, 2}));  // 10 rows reach half of 15 at the third
  EXPECT_EQ(cuts({48, 48, 48, 48}, 2, 32), V({0, 2}));
  EXPECT_EQ(cuts({48, 48, 48, 48}, 4, 32), V({0, 1, 2, 3}));
  EXPECT_EQ(cuts({48, 48, 48, 48}, 4, 64), V({0, 2}));  // 3 groups: 96, 48, 48; 2: 96, 96
  EXPECT_EQ(cuts({100, 1, 1, 1}, 2, 1), V({0, 1}));
  EXPECT_EQ(cuts({100, 1, 1, 1}, 2, 32), V({0}));  // a prefill chunk and decode rows: 100 | 3
  EXPECT_EQ(cuts({1, 1, 1, 1, 1, 1, 10}, 2, 1), V({0, 6}));  // the last sequence left for the last group
  EXPECT_EQ(cuts({10, 10}, 8, 1), V({0, 1}));  // no more groups than sequences
  EXPECT_EQ(cuts({7}, 2, 1), V({0}));
  EXPECT_EQ(cuts({}, 2, 1), V({0}));
  EXPECT_EQ(cuts({3, 3}, 0, 1), V({0}));
}

}  // namespace
}  // namespace qwen35::model
