// Encode throughput of the tokenizer (not a test; see docs/design.md §8: quote medians and ratios).
//   tokenizer_bench DIR TEXT_FILE [ITERS]
// Prints the first (cold merge cache) run and the median of ITERS warm runs, in MB/s of input.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  using Clock = std::chrono::steady_clock;
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench DIR TEXT_FILE [ITERS]\n");
    return 2;
  }
  const int iters = argc > 3 ? std::atoi(argv[3]) : 20;
  std::ifstream f(argv[2], std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  const std::string text = std::move(ss).str();
  const auto t0 = Clock::now();
  auto tok = qwen35::tokenizer::Tokenizer::load(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", tok.message().c_str());
    return 1;
  }
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::vector<double> secs;
  size_t n_tokens = 0;
  for (int i = 0; i <= iters; ++i) {
    const auto a = Clock::now();
    auto ids = tok->encode(text);
    secs.push_back(std::chrono::duration<double>(Clock::now() - a).count());
    if (!ids.ok()) return 1;
    n_tokens = ids->size();
  }
  const double cold = secs[0];
  std::vector<double> warm(secs.begin() + 1, secs.end());
  std::sort(warm.begin(), warm.end());
  const double med = warm.empty() ? cold : warm[warm.size() / 2];
  const double mb = double(text.size()) / 1e6;
  std::printf(
      "load %.3f s; %zu bytes -> %zu tokens; cold %.2f MB/s; warm median %.2f MB/s (%d runs)\n",
      load_s, text.size(), n_tokens, mb / cold, mb / med, iters);
  return 0;
}
