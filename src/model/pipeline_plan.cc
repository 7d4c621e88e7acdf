#include "model/pipeline_plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "model/tensor_table.h"

namespace qwen35::model {
namespace {

size_t slot_bytes(const Tensor& t, const Slot& s) {
  if (s.present != nullptr && !*s.present) return 0;
  if (s.matrix != nullptr) return s.matrix->bytes();
  if (s.floats != nullptr) return s.floats->size() * sizeof(float);
  size_t b = 0;
  if (s.experts != nullptr)
    for (const MlpWeights& e : *s.experts) b += (e.*t.expert).bytes();
  return b;
}

std::string mib(size_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / double(1 << 20));
  return b;
}

// The bytes of layers [first, end) and the ends a rank of that range holds.
RankShare share(const PipelineCosts& c, int64_t first, int64_t end) {
  RankShare r;
  r.first = first;
  r.end = end;
  r.embedding = first == 0;
  r.head = end == int64_t(c.layer_weights.size());
  for (int64_t l = first; l < end; ++l) {
    r.weights += c.layer_weights[size_t(l)];
    r.state += c.layer_state[size_t(l)];
  }
  if (r.embedding) r.weights += c.embedding;
  if (r.head) {
    r.weights += c.head + c.mtp;
    r.state += c.mtp_state;
  }
  return r;
}

}  // namespace

PipelineCosts pipeline_costs(ModelWeights& w, int64_t context, int64_t slots) {
  const ModelConfig& c = w.config;
  PipelineCosts p;
  p.layer_weights.assign(w.layers.size(), 0);
  for (const Tensor& t : tensor_table()) {
    if (!t.is_layer()) continue;
    for (size_t i = 0; i < w.layers.size(); ++i)
      if (in_layer(t, c, w.layers[i].kind)) p.layer_weights[i] += slot_bytes(t, t.slot(w, &w.layers[i]));
  }
  const size_t kv = size_t(2 * c.n_kv_heads * c.head_dim) * sizeof(float) * size_t(context * slots);
  const size_t rec = (size_t((c.conv_kernel - 1) * c.conv_channels()) + size_t(c.n_v_heads * c.d_k * c.d_v)) *
                     sizeof(float) * size_t(slots);
  for (const LayerWeights& l : w.layers) {
    p.kinds.push_back(l.kind);
    p.layer_state.push_back(l.kind == LayerKind::kFullAttention ? kv : rec);
  }
  p.embedding = w.embed.bytes();
  p.head = (w.tied ? w.embed.bytes() : w.head.bytes()) + w.final_norm.size() * sizeof(float);
  if (w.mtp) {
    // The MTP head reads embedding rows (of each row's next token): the last rank holds the
    // table as well, a second copy when the head is untied.
    // Its tensors as the layers' are counted (the loader's mtp_bytes counts vectors as stored).
    size_t mtp = 0;
    for (const Tensor& t : tensor_table()) {
      if (t.block == Block::kMtp) mtp += slot_bytes(t, t.slot(w, nullptr));
      else if (t.is_layer() && in_layer(t, c, LayerKind::kFullAttention)) mtp += slot_bytes(t, t.slot(w, &w.mtp->layer));
    }
    p.mtp = mtp + (w.tied ? 0 : w.embed.bytes());
    p.mtp_state = kv;  // its own attention layer's cache
  }
  return p;
}

size_t PipelinePlan::largest() const {
  size_t m = 0;
  for (const RankShare& r : ranks) m = std::max(m, r.total());
  return m;
}

core::Result<PipelinePlan> plan_pipeline(const PipelineCosts& costs, int ranks, const std::vector<int64_t>& starts,
                                         size_t budget) {
  const int64_t L = int64_t(costs.layer_weights.size());
  if (ranks < 1) return core::error("the pipeline needs at least one rank, got " + std::to_string(ranks));
  if (ranks > L)
    return core::error(std::to_string(ranks) + " ranks for a model of " + std::to_string(L) +
                       " layers: a rank holds at least one layer, so at most " + std::to_string(L) + " ranks");
  std::vector<int64_t> cut;  // where each rank begins, then L
  if (!starts.empty()) {
    if (int64_t(starts.size()) != ranks - 1)
      return core::error("the split names " + std::to_string(starts.size()) + " starts for " + std::to_string(ranks) +
                         " ranks (it needs ranks - 1: where ranks 1.. begin)");
    cut.push_back(0);
    for (int64_t s : starts) {
      if (s <= cut.back() || s >= L)
        return core::error("the split's starts must increase within (0, " + std::to_string(L) + "), got " +
                           std::to_string(s) + " after " + std::to_string(cut.back()));
      cut.push_back(s);
    }
  } else {
    // best[r][i]: the smallest largest total of ranks 0..r over layers [0, i), rank r ending at i.
    constexpr size_t kInf = std::numeric_limits<size_t>::max();
    std::vector<std::vector<size_t>> best(size_t(ranks), std::vector<size_t>(size_t(L + 1), kInf));
    std::vector<std::vector<int64_t>> from(size_t(ranks), std::vector<int64_t>(size_t(L + 1), 0));
    for (int64_t i = 1; i <= L; ++i) best[0][size_t(i)] = share(costs, 0, i).total();
    for (int r = 1; r < ranks; ++r)
      for (int64_t i = r + 1; i <= L; ++i)
        for (int64_t j = r; j < i; ++j) {
          if (best[size_t(r - 1)][size_t(j)] == kInf) continue;
          const size_t m = std::max(best[size_t(r - 1)][size_t(j)], share(costs, j, i).total());
          if (m < best[size_t(r)][size_t(i)]) {
            best[size_t(r)][size_t(i)] = m;
            from[size_t(r)][size_t(i)] = j;
          }
        }
    cut.assign(size_t(ranks), 0);
    int64_t at = L;
    for (int r = ranks - 1; r > 0; --r) at = cut[size_t(r)] = from[size_t(r)][size_t(at)];
  }
  cut.push_back(L);
  PipelinePlan plan;
  for (int r = 0; r < ranks; ++r) plan.ranks.push_back(share(costs, cut[size_t(r)], cut[size_t(r + 1)]));
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    if (budget > 0 && plan.ranks[r].total() > budget)
      return core::error("rank " + std::to_string(r) + " of the plan needs " + mib(plan.ranks[r].total()) +
                         ", over the budget of " + mib(budget) + " a rank");
  return plan;
}

void keep_share(ModelWeights& w, const RankShare& s) {
  for (int64_t l = 0; l < int64_t(w.layers.size()); ++l)
    if (l < s.first || l >= s.end) {
      const LayerKind kind = w.layers[size_t(l)].kind;
      w.layers[size_t(l)] = LayerWeights{};
      w.layers[size_t(l)].kind = kind;
    }
  w.held_first = s.first;
  w.held_end = s.end;
  if (!s.head) {
    w.head = kernels::Matrix{};
    w.final_norm.clear();
    w.final_norm.shrink_to_fit();
    if (w.mtp) w.mtp_problem = "the MTP head is held by the last rank of the pipeline";
    w.mtp.reset();
  }
  if (!s.embedding && !(s.head && (w.tied || w.mtp))) w.embed = kernels::Matrix{};
  if (!s.embedding && w.vision) {
    w.vision.reset();
    w.vision_problem = "the vision tower is held by rank 0 of the pipeline";
  }
}

std::string describe(const PipelinePlan& plan, const PipelineCosts& costs) {
  std::string out;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankShare& s = plan.ranks[r];
    int64_t full = 0;
    for (int64_t l = s.first; l < s.end; ++l) full += costs.kinds[size_t(l)] == LayerKind::kFullAttention;
    char line[256];
    std::snprintf(line, sizeof line, "rank %zu: layers %lld-%lld (%lld linear, %lld full)%s%s: weights %s, state %s, total %s\n",
                  r, (long long)s.first, (long long)(s.end - 1), (long long)(s.end - s.first - full), (long long)full,
                  s.embedding ? " + embedding" : "", s.head ? " + head" : "", mib(s.weights).c_str(),
                  mib(s.state).c_str(), mib(s.total()).c_str());
    out += line;
  }
  return out;
}

namespace {
// Where `groups` groups begin: each cut where the rows so far first reach its share of `total`.
std::vector<size_t> group_starts(std::span<const int64_t> rows, size_t groups, int64_t total) {
  std::vector<size_t> starts{0};
  int64_t so_far = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t k = starts.size();
    if (k < groups && i > starts.back() &&
        (so_far * int64_t(groups) >= total * int64_t(k) || rows.size() - i <= groups - k))
      starts.push_back(i);
    so_far += rows[i];
  }
  return starts;
}
}  // namespace

std::vector<size_t> microbatch_starts(std::span<const int64_t> rows, int m, int64_t min_rows) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  for (size_t groups = std::min(rows.size(), size_t(std::max(m, 1))); groups > 1; --groups) {
    std::vector<size_t> starts = group_starts(rows, groups, total);
    bool full = true;
    for (size_t k = 0; k < starts.size() && full; ++k) {
      const size_t end = k + 1 < starts.size() ? starts[k + 1] : rows.size();
      int64_t n = 0;
      for (size_t i = starts[k]; i < end; ++i) n += rows[i];
      full = n >= min_rows;
    }
    if (full) return starts;
  }
  return {0};
}

}  // namespace qwen35::model
