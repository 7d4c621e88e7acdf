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

  int32_t chosen;
  if (p_.reasoning_budget >= 0 && in_think_ && think_tokens_ >= p_.reasoning_budget) {
    chosen = p_.think_end;  // the budget is spent: the thinking block ends here
  } else if (p_.temperature == 0.0f) {
    chosen = int32_t(std::max_element(w, w + V) - w);
  } else {
    // Candidates sorted by adjusted logit (ties to the lower id), truncated by top-k.
    int64_t n = V;
    auto better = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    std::iota(order_.begin(), order_.end(), 0);
    if (p_.top_k > 0 && p_.top_k < V) {
      n = p_.top_k;
      std::partial_sort(order_.begin(), order_.begin() + n, order_.end(), better);
    } else {
      std::sort(order_.begin(), order_.end(), better);
    }
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
  res.token = chosen;
  if (p_.logprobs >= 0) res.logprob += logits[chosen];
  output_counts_[chosen]++;
  seen_[size_t(chosen)] = 1;
  ++drawn_;
  if (in_think_) {
    if (chosen == p_.think_end) in_think_ = false;
    else ++think_tokens_;
  } else if (chosen == p_.think_start && p_.think_start >= 0) {
    in_think_ = true;
    think_tokens_ = 0;
  }
  return res;
}

}  // namespace qwen35::runtime
