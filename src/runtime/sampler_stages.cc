#include "runtime/sampler_stages.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qwen35::runtime::sampling {

void repetition_penalty(std::span<float> w, std::span<const uint8_t> seen, float penalty) {
  if (penalty == 1.0f) return;
  for (size_t i = 0; i < w.size(); ++i)
    if (seen[i]) w[i] = w[i] > 0 ? w[i] / penalty : w[i] * penalty;
}

void frequency_presence_penalty(std::span<float> w,
                                const std::unordered_map<int32_t, int32_t>& counts, float frequency,
                                float presence) {
  if (frequency == 0.0f && presence == 0.0f) return;
  for (const auto& [tok, cnt] : counts) w[size_t(tok)] -= frequency * float(cnt) + presence;
}

int64_t best_allowed(grammar::Automaton::Session& g, int32_t state, int64_t limit,
                     std::span<const float> w, int64_t want, std::span<int32_t> order) {
  // A prefix of the best tokens, checked one by one, keeps their order: its allowed tokens are
  // the best allowed ones as long as `want` of them turn up inside it.
  const int64_t V = int64_t(w.size());
  const int64_t scan = std::min<int64_t>(V, std::max<int64_t>(64, 4 * want));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + scan, order.end(),
                    [&](int32_t a, int32_t b) { return ranks_before(w.data(), a, b); });
  int64_t k = 0;
  for (int64_t i = 0; i < scan && k < want; ++i)
    if (g.allows(state, order[size_t(i)], limit)) order[size_t(k++)] = order[size_t(i)];
  return k == want ? want : 0;
}

void mask_refused(grammar::Automaton::Session& g, int32_t state, int64_t limit, std::span<float> w,
                  std::vector<uint64_t>* words) {
  g.mask(state, limit, words);
  const int64_t V = int64_t(w.size());
  for (int64_t wi = 0; wi * 64 < V; ++wi) {
    const uint64_t bits = wi < int64_t(words->size()) ? (*words)[size_t(wi)] : 0;
    if (bits == ~uint64_t(0)) continue;
    for (int64_t i = wi * 64; i < std::min(V, wi * 64 + 64); ++i)
      if (!((bits >> (i - wi * 64)) & 1)) w[size_t(i)] = -INFINITY;
  }
}

int32_t argmax(std::span<const float> w) {
  return int32_t(std::max_element(w.begin(), w.end()) - w.begin());
}

int64_t gather(std::span<const float> w, bool finite_only, std::span<int32_t> order) {
  if (!finite_only) {
    std::iota(order.begin(), order.begin() + int64_t(w.size()), 0);
    return int64_t(w.size());
  }
  int64_t n = 0;
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i] != -INFINITY) order[size_t(n++)] = int32_t(i);
  return n;
}

int64_t top_k(const float* w, std::span<int32_t> order, int64_t n, int32_t k) {
  auto better = [w](int32_t a, int32_t b) { return ranks_before(w, a, b); };
  if (k > 0 && k < n) {
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + n, better);
    return k;
  }
  std::sort(order.begin(), order.begin() + n, better);
  return n;
}

void softmax(const float* w, std::span<const int32_t> candidates, float temperature,
             std::vector<double>* probs) {
  // Shifted by the best candidate's logit: every exponent is <= 0.
  const double inv_t = 1.0 / temperature;
  const double top = w[candidates[0]];
  probs->resize(candidates.size());
  double sum = 0;
  for (size_t i = 0; i < candidates.size(); ++i)
    sum += ((*probs)[i] = std::exp((double(w[candidates[i]]) - top) * inv_t));
  for (double& p : *probs) p /= sum;
}

int64_t top_p(std::span<const double> probs, float top_p) {
  if (top_p >= 1.0f) return int64_t(probs.size());
  double c = 0;
  int64_t keep = 0;
  while (keep < int64_t(probs.size())) {
    c += probs[size_t(keep++)];
    if (c >= top_p) break;
  }
  return keep;
}

int64_t min_p(std::span<const double> probs, float min_p) {
  if (min_p <= 0.0f) return int64_t(probs.size());
  const double floor = min_p * probs[0];
  int64_t keep = 1;
  while (keep < int64_t(probs.size()) && probs[size_t(keep)] >= floor) ++keep;
  return keep;
}

int64_t draw(std::span<const double> probs, double u) {
  double mass = 0;
  for (double p : probs) mass += p;
  const double x = u * mass;
  double c = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    c += probs[i];
    if (x < c) return int64_t(i);
  }
  return int64_t(probs.size()) - 1;
}

}  // namespace qwen35::runtime::sampling
