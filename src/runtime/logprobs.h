// Log-probabilities as callers see them: the log-softmax of the model's raw logits at a token, and
// the most likely tokens. One function serves the sampler (logprobs of sampled tokens) and the
// engine (prompt logprobs), so the same logits give the same bits wherever they are reported.
#pragma once

#include <cstdint>
#include <vector>

namespace qwen35::runtime {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;           // of the chosen token (when logprobs >= 0)
  std::vector<TokenLogprob> top;  // the N most likely tokens, most likely first
};

// log(sum_i exp(logits[i])) over [vocab] logits, shifted by their maximum so that no exp
// overflows; accumulated in double.
double log_sum_exp(const float* logits, int64_t vocab);

// The log-softmax of logits [vocab] at `token` and at the `top` most likely tokens (ties to the
// lower id; at most vocab). `order` is scratch (resized to vocab when top > 0).
SampleResult token_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top,
                            std::vector<int32_t>* order);

}  // namespace qwen35::runtime
