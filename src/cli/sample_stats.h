#pragma once
// Order statistics of measured samples (times, gaps, rates), shared by the benches and the load
// tests of the CLI: one definition, so that the command files can compile in unity batches.

#include <algorithm>
#include <cstddef>
#include <vector>

namespace qwen35::cli {

// The median: the middle sample, or the mean of the middle two for an even count; 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The p-quantile (p in [0, 1]) as the sample at the nearest rank of the sorted samples; 0 for none.
inline double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5))];
}

// Median, minimum and maximum of repeated measurements (all 0 for none).
struct Stats {
  double median = 0, min = 0, max = 0;
};

inline Stats stats(const std::vector<double>& v) {
  if (v.empty()) return {};
  return {median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

}  // namespace qwen35::cli
