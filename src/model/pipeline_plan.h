// How a model is split by layers over the ranks of a pipeline (docs/design.md "Past one
// machine"): each rank holds a contiguous range of layers, at least one; rank 0 also holds the
// embedding, the last rank the final norm, the head and the MTP head (with the embedding table it
// reads). The split balances the bytes a rank holds: its layers' weights as stored, their
// per-sequence state (conv and recurrent state of linear-attention layers, KV of full-attention
// layers at the configured context) for every slot, and the extras of the first and last rank. A
// tied embedding is held by both ends (rank 0 reads its rows, the last rank multiplies by it).
//
// Every layer's arithmetic stays whole on one rank, which is what makes a split run bit-identical
// to one process.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/weights.h"

namespace qwen35::model {

// What each piece of the model costs a rank, in bytes.
struct PipelineCosts {
  std::vector<size_t> layer_weights;  // per layer
  std::vector<size_t> layer_state;    // per layer: state for every slot at the context
  std::vector<LayerKind> kinds;       // per layer
  size_t embedding = 0;               // rank 0
  size_t head = 0;                    // the last rank: final norm, head (the embedding when tied)
  size_t mtp = 0, mtp_state = 0;      // the last rank: the MTP head's weights, its KV
};

// The costs of `w` for `slots` sequences of `context` positions each (fp32 state and KV).
PipelineCosts pipeline_costs(ModelWeights& w, int64_t context, int64_t slots);

struct RankShare {
  int64_t first = 0, end = 0;  // layers [first, end)
  bool embedding = false, head = false;
  size_t weights = 0, state = 0;  // the layers' and the ends' extras included
  size_t total() const { return weights + state; }
};

struct PipelinePlan {
  std::vector<RankShare> ranks;
  size_t largest() const;  // the largest rank's total
};

// The split of `costs` over `ranks` ranks that makes the largest rank's total as small as it can
// be (ties: earlier cuts). With `starts` (ranks - 1 layer indices where ranks 1.. begin,
// increasing), that split instead. With `budget` > 0, a rank over it is an error. Errors are one
// line for the user: ranks < 1, more ranks than layers, bad starts, a rank over the budget.
core::Result<PipelinePlan> plan_pipeline(const PipelineCosts& costs, int ranks,
                                         const std::vector<int64_t>& starts = {}, size_t budget = 0);

// Makes `w` a rank's share: the layers outside [s.first, s.end) are unbound (their matrices views
// of nothing, their vectors freed), and so are the ends it does not hold (the embedding unless it
// is rank 0's, a tied head's or the MTP head's), the head, final norm and MTP head unless last, the vision tower
// unless rank 0's). The weights must be file-backed mappings (LoadMode::kMmap) for the pages of
// the tensors let go never to be read.
void keep_share(ModelWeights& w, const RankShare& s);

// One line per rank: its layers (how many of each kind), the ends it holds, and its bytes.
std::string describe(const PipelinePlan& plan, const PipelineCosts& costs);

// How a step of sequences with these row counts is cut into micro-batches (dist/pipeline.h):
// where each group begins (the first is 0). Sequences stay whole and in order, no group is
// empty; g groups are cut where the rows so far first reach k/g of the step's rows (or where the
// sequences left are just enough for the groups left). The most groups, at most m, in which
// every group has at least min_rows rows (a group costs each rank a read of its weights, which
// a few rows do not pay for); one group when none do.
std::vector<size_t> microbatch_starts(std::span<const int64_t> rows, int m, int64_t min_rows);

}  // namespace qwen35::model
