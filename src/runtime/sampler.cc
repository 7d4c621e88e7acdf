#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace qwen35::runtime {

core::Status SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return core::error("[sampling] " + what); };
  if (!(temperature >= 0) || !std::isfinite(temperature)) return bad("temperature must be >= 0, got " + std::to_string(temperature));
  if (top_k < -1) return bad("top_k must be -1, 0 (off) or positive, got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) return bad("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty)) return bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (logprobs > 20) return bad("logprobs must be at most 20, got " + std::to_string(logprobs));
  if (reasoning_budget < -1) return bad("the reasoning budget must be >= 0 (or -1: none), got " + std::to_string(reasoning_budget));
  if (reasoning_budget >= 0 && think_end < 0) return bad("a reasoning budget needs the model's end-of-thinking token");
  if (grammar && reasoning_open && think_end < 0)
    return bad("a grammar after an open thinking block needs the model's end-of-thinking token");
  return core::Status();
}

SamplingParams sampling_defaults(const formats::GenerationConfig& g) {
  SamplingParams p;
  if (g.temperature) p.temperature = float(*g.temperature);
  if (g.top_k) p.top_k = int32_t(*g.top_k);
  if (g.top_p) p.top_p = float(*g.top_p);
  if (g.min_p) p.min_p = float(*g.min_p);
  if (g.repetition_penalty) p.repetition_penalty = float(*g.repetition_penalty);
  if (g.presence_penalty) p.presence_penalty = float(*g.presence_penalty);
  if (g.do_sample && !*g.do_sample) p.temperature = 0;
  return p;
}

Sampler::Sampler(const SamplingParams& params, int64_t vocab)
    : p_(params),
      vocab_(vocab),
      key_(p_.seed ? *p_.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()),
      in_think_(p_.reasoning_open),
      gstate_(p_.grammar ? p_.grammar->initial() : -1),
      grammar_need_(p_.grammar ? p_.grammar->finish_tokens(gstate_) : 0),
      seen_(size_t(vocab), 0),
      work_(size_t(vocab)),
      order_(size_t(vocab)) {
}

void Sampler::add_prompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens)
    if (t >= 0 && t < vocab_) seen_[size_t(t)] = 1;
}

SampleResult Sampler::sample(const float* logits) {
  const int64_t V = vocab_;
  SampleResult res;
  // Raw log-probabilities for callers.
  if (p_.logprobs >= 0) {
    const float mx = *std::max_element(logits, logits + V);
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(logits[i] - mx));
    const float lse = mx + float(std::log(sum));
    const int32_t n = std::min<int32_t>(p_.logprobs, int32_t(V));
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int32_t i = 0; i < n; ++i) res.top.push_back({order_[size_t(i)], logits[order_[size_t(i)]] - lse});
    res.logprob = -lse;  // completed below with the chosen token's logit
  }
  // Penalties.
  float* w = work_.data();
  std::copy(logits, logits + V, w);
  if (p_.repetition_penalty != 1.0f)
    for (int64_t i = 0; i < V; ++i)
      if (seen_[size_t(i)]) w[i] = w[i] > 0 ? w[i] / p_.repetition_penalty : w[i] * p_.repetition_penalty;
  if (p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f)
    for (const auto& [tok, cnt] : output_counts_) w[tok] -= p_.frequency_penalty * float(cnt) + p_.presence_penalty;

  // Constrained decoding: the grammar's mask, or inside a thinking block no end token.
  const grammar::Automaton* g = p_.grammar.get();
  const bool masked = g && !in_think_;
  const int64_t left = p_.max_output < 0 ? grammar::Automaton::kInf : p_.max_output - int64_t(drawn_);
  const int64_t limit = left >= grammar::Automaton::kInf ? left : left - 2;
  const bool budget_spent = p_.reasoning_budget >= 0 && in_think_ && think_tokens_ >= p_.reasoning_budget;
  auto better = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  bool force_end = false;
  int64_t found = -1;  // >= 0: order_[0, found) are already the candidates, best first
  if (g && in_think_) {
    // What is left just covers </think>, the shortest value and the end token.
    force_end = p_.think_end >= 0 && left <= grammar_need_ + 2;
    for (int32_t e : g->end_ids())
      if (e >= 0 && e < V) w[e] = -INFINITY;
  } else if (masked) {
    // Greedy and top-k draw from the best few allowed tokens only. Where the mask is not cached
    // yet (computing it is a pass over the vocabulary), they are looked for among the best
    // tokens, checked one by one, which gives the very candidates masking the whole vocabulary
    // first would, in the same order; the mask is computed only when fewer turn up.
    const int64_t want = p_.temperature == 0.0f ? 1 : p_.top_k > 0 ? std::min<int64_t>(p_.top_k, V) : 0;
    if (want > 0 && !p_.grammar->has_mask(gstate_)) {
      const int64_t scan = std::min<int64_t>(V, std::max<int64_t>(64, 4 * want));
      std::iota(order_.begin(), order_.end(), 0);
      std::partial_sort(order_.begin(), order_.begin() + scan, order_.end(), better);
      int64_t k = 0;
      for (int64_t i = 0; i < scan && k < want; ++i)
        if (p_.grammar->allows(gstate_, order_[size_t(i)], limit)) order_[size_t(k++)] = order_[size_t(i)];
      if (k == want) found = want;
    }
    if (found < 0) {
      p_.grammar->mask(gstate_, limit, &mask_);
      for (int64_t wi = 0; wi * 64 < V; ++wi) {
        const uint64_t bits = wi < int64_t(mask_.size()) ? mask_[size_t(wi)] : 0;
        if (bits == ~uint64_t(0)) continue;
        for (int64_t i = wi * 64; i < std::min(V, wi * 64 + 64); ++i)
          if (!((bits >> (i - wi * 64)) & 1)) w[i] = -INFINITY;
      }
    }
  }

  int32_t chosen = -1;
  if (budget_spent || force_end) {
    chosen = p_.think_end;  // the budget is spent: the thinking block ends here
  } else if (p_.temperature == 0.0f) {
    if (found > 0) {
      chosen = order_[0];
    } else {
      chosen = int32_t(std::max_element(w, w + V) - w);
      if (g && w[chosen] == -INFINITY) chosen = -1;
    }
  } else {
    // Candidates (the tokens a grammar allows) sorted by adjusted logit (ties to the lower id),
    // truncated by top-k.
    int64_t n = V;
    if (found > 0) {
      n = found;
    } else if (g) {
      n = 0;
      for (int64_t i = 0; i < V; ++i)
        if (w[i] != -INFINITY) order_[size_t(n++)] = int32_t(i);
    } else {
      std::iota(order_.begin(), order_.end(), 0);
    }
    if (found > 0) {
      // sorted already
    } else if (p_.top_k > 0 && p_.top_k < n) {
      std::partial_sort(order_.begin(), order_.begin() + p_.top_k, order_.begin() + n, better);
      n = p_.top_k;
    } else {
      std::sort(order_.begin(), order_.begin() + n, better);
    }
    if (n > 0) {
      // Softmax at temperature over the candidates (highest first).
      const double inv_t = 1.0 / p_.temperature;
      const double top = w[order_[0]];
      std::vector<double>& pr = probs_;
      pr.resize(size_t(n));
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) sum += (pr[size_t(i)] = std::exp((double(w[order_[size_t(i)]]) - top) * inv_t));
      for (int64_t i = 0; i < n; ++i) pr[size_t(i)] /= sum;
      // top-p: the smallest prefix whose mass reaches top_p.
      if (p_.top_p < 1.0f) {
        double c = 0;
        int64_t keep = 0;
        while (keep < n) {
          c += pr[size_t(keep++)];
          if (c >= p_.top_p) break;
        }
        n = keep;
      }
      // min-p: drop candidates below min_p x the most likely one.
      if (p_.min_p > 0.0f) {
        const double floor = p_.min_p * pr[0];
        int64_t keep = 1;
        while (keep < n && pr[size_t(keep)] >= floor) ++keep;
        n = keep;
      }
      double mass = 0;
      for (int64_t i = 0; i < n; ++i) mass += pr[size_t(i)];
      double u = core::Xoshiro256(key_ ^ core::splitmix64_of(drawn_)).uniform() * mass, c = 0;
      chosen = order_[size_t(n - 1)];
      for (int64_t i = 0; i < n; ++i) {
        c += pr[size_t(i)];
        if (u < c) {
          chosen = order_[size_t(i)];
          break;
        }
      }
    }
  }
  if (chosen < 0) {
    // The grammar allows nothing: only a vocabulary without some single-byte token can get
    // here. The output ends (with the end token when the request has one).
    chosen = g->end_ids().empty() ? 0 : g->end_ids()[0];
  }
  if (masked && !g->is_end(chosen)) gstate_ = p_.grammar->step(gstate_, chosen);
  res.token = chosen;
  if (p_.logprobs >= 0) res.logprob += logits[chosen];
  output_counts_[chosen]++;
  seen_[size_t(chosen)] = 1;
  ++drawn_;
  if (in_think_) {
    if (chosen == p_.think_end) in_think_ = false;
    else ++think_tokens_;
  } else if (chosen == p_.think_start && p_.think_start >= 0 && !masked) {
    // (Under a grammar the output is the value now: a <think> inside it is text.)
    in_think_ = true;
    think_tokens_ = 0;
  }
  return res;
}

}  // namespace qwen35::runtime

namespace qwen35::runtime {

size_t Sampler::allowed_prefix(std::span<const int32_t> draft) const {
  if (!p_.grammar) return draft.size();
  grammar::Automaton& g = *p_.grammar;
  bool think = in_think_;
  int32_t st = gstate_;
  size_t k = 0;
  for (; k < draft.size(); ++k) {
    const int32_t t = draft[k];
    if (think) {
      if (g.is_end(t)) break;
      if (t == p_.think_end) think = false;
      continue;
    }
    if (g.is_end(t)) {
      if (g.complete(st)) ++k;
      break;
    }
    st = g.step(st, t);
    if (st == grammar::Automaton::kDead) break;
  }
  return k;
}

bool Sampler::grammar_complete() const {
  return !p_.grammar || (!in_think_ && p_.grammar->complete(gstate_));
}

}  // namespace qwen35::runtime
