#include "runtime/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace qwen35::runtime {

// Rounding: the shifted exponentials are summed in double and the logit minus the log-sum is
// taken in double, then rounded to float once. Summing a vocabulary (~250k terms) in float loses
// about log2(V) bits of the sum, and subtracting two float roundings (logit - lse) can be off by
// an ulp of the larger; in double both errors are far below the float result's last bit, so the
// reported value is the correctly rounded log-probability in all but rare halfway cases.
double log_sum_exp(const float* logits, int64_t vocab) {
  float mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(mx));
  return double(mx) + std::log(sum);
}

SampleResult token_logprobs(const float* logits, int64_t vocab, int32_t token, int32_t top,
                            std::vector<int32_t>* order) {
  const double lse = log_sum_exp(logits, vocab);
  SampleResult r;
  r.token = token;
  r.logprob = float(double(logits[token]) - lse);
  if (top <= 0) return r;
  order->resize(size_t(vocab));
  std::iota(order->begin(), order->end(), 0);
  const int64_t k = std::min<int64_t>(top, vocab);
  std::partial_sort(order->begin(), order->begin() + k, order->end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int64_t i = 0; i < k; ++i) {
    const int32_t t = (*order)[size_t(i)];
    r.top.push_back({t, float(double(logits[t]) - lse)});
  }
  return r;
}

}  // namespace qwen35::runtime
