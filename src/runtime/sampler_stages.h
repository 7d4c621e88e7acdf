// The stages of the sampler's chain (runtime/sampler.h composes them), each a function of the
// logits it adjusts or the candidates it narrows, so each can be checked on its own:
//
//   penalties -> grammar mask -> reasoning budget -> top-k -> temperature softmax -> top-p
//   -> min-p -> draw
//
// The reasoning budget is the Sampler's own stage (Sampler::forced_end): it reads the state of the
// thinking block, which the Sampler keeps. Candidates are token ids in `order`, best first: a
// higher adjusted logit first, ties to the lower id (a total order, so every sort of them gives the
// same sequence). A refused token has the logit -inf.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/matcher.h"

namespace qwen35::runtime::sampling {

// Whether token a ranks before token b under logits w.
inline bool ranks_before(const float* w, int32_t a, int32_t b) {
  return w[a] > w[b] || (w[a] == w[b] && a < b);
}

// Repetition penalty (CTRL's, as vLLM and llama.cpp apply it): each token in `seen` has its logit
// divided by `penalty` when positive and multiplied by it otherwise.
void repetition_penalty(std::span<float> w, std::span<const uint8_t> seen, float penalty);
// OpenAI's frequency and presence penalties: logit -= frequency * count + presence, for each
// token generated `count` > 0 times.
void frequency_presence_penalty(std::span<float> w,
                                const std::unordered_map<int32_t, int32_t>& counts, float frequency,
                                float presence);

// Grammar mask, fast path: the best `want` tokens that `g` allows at `state` (within `limit`
// tokens), looked for among the best max(64, 4 * want) logits. Returns want with them in
// order[0, want), best first, exactly the candidates masking the whole vocabulary would give;
// 0 when fewer turn up (then mask_refused is needed). `order` has [w.size()] entries.
// Both read the automaton through an open session (grammar::Unavailable passes through).
int64_t best_allowed(grammar::Automaton::Session& g, int32_t state, int64_t limit,
                     std::span<const float> w, int64_t want, std::span<int32_t> order);
// Grammar mask: the logits of the tokens `g` refuses at `state` become -inf. `words` is scratch.
void mask_refused(grammar::Automaton::Session& g, int32_t state, int64_t limit, std::span<float> w,
                  std::vector<uint64_t>* words);

// Greedy: the best token (ties to the lower id).
int32_t argmax(std::span<const float> w);
// All ids, or with `finite_only` those whose logit is not -inf, into order; returns the count.
int64_t gather(std::span<const float> w, bool finite_only, std::span<int32_t> order);
// top-k: sorts order[0, n) best first, keeping the best k when 0 < k < n; returns the count kept.
int64_t top_k(const float* w, std::span<int32_t> order, int64_t n, int32_t k);
// Softmax at `temperature` > 0 of the candidates' logits (best first, so probs[0] is the largest).
void softmax(const float* w, std::span<const int32_t> candidates, float temperature,
             std::vector<double>* probs);
// top-p: the length of the smallest prefix of probs (best first) whose mass reaches top_p.
int64_t top_p(std::span<const double> probs, float top_p);
// min-p: the length of the prefix of probs (best first) at or above min_p x probs[0]; at least 1.
int64_t min_p(std::span<const double> probs, float min_p);
// The draw: the index i whose cumulative interval [sum(probs[0, i)), sum(probs[0, i])) holds
// u x sum(probs), for u in [0, 1); the last index where rounding leaves u past every interval.
int64_t draw(std::span<const double> probs, double u);

}  // namespace qwen35::runtime::sampling
