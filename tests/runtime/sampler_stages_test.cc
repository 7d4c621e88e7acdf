// The sampler's stages (runtime/sampler_stages.h) and the shared log-softmax (runtime/logprobs.h),
// each against a direct scalar computation; and the whole chain against a plain reference that
// masks, sorts and truncates the whole vocabulary every time.
#include "runtime/sampler_stages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "core/random.h"
#include "runtime/logprobs.h"
#include "runtime/sampler.h"

namespace qwen35::runtime::sampling {
namespace stages_test {

std::vector<float> normal_logits(std::mt19937& rng, int64_t n, float sd, bool ties) {
  std::normal_distribution<float> d(0, sd);
  std::vector<float> l(static_cast<size_t>(n));
  for (auto& x : l) x = ties ? std::round(d(rng) * 2) / 2 : d(rng);
  return l;
}

// Ids best first by a stable sort on descending logit: ties keep the lower id first.
std::vector<int32_t> ranked(const std::vector<float>& w) {
  std::vector<int32_t> ids(w.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return w[size_t(a)] > w[size_t(b)]; });
  return ids;
}

// Whether `got` is within one float step of the exact value `want`.
bool within_an_ulp(float got, long double want) {
  const float r = float(want);
  return got == r || got == std::nextafter(r, INFINITY) || got == std::nextafter(r, -INFINITY);
}

TEST(LogSoftmax, MatchesAWiderComputationAndRanksTiesToTheLowerId) {
  std::mt19937 rng(11);
  for (int64_t V : {1, 5, 1000, 150000})
    for (float offset : {0.0f, 80.0f, -300.0f}) {
      auto l = normal_logits(rng, V, 3.0f, V == 1000);
      for (auto& x : l) x += offset;  // exp(x) alone would overflow or underflow in float
      long double mx = l[0], sum = 0;
      for (float x : l) mx = std::max<long double>(mx, x);
      for (float x : l) sum += std::exp((long double)x - mx);
      const long double lse = mx + std::log(sum);
      EXPECT_NEAR(double(log_sum_exp(l.data(), V)), double(lse),
                  1e-12 * std::max(1.0, std::fabs(double(lse))));
      std::vector<int32_t> scratch;
      const int32_t token = int32_t(V / 2), top = 7;
      const SampleResult r = token_logprobs(l.data(), V, token, top, &scratch);
      EXPECT_EQ(r.token, token);
      EXPECT_TRUE(within_an_ulp(r.logprob, (long double)l[size_t(token)] - lse))
          << V << " " << r.logprob;
      const auto want = ranked(l);
      ASSERT_EQ(r.top.size(), size_t(std::min<int64_t>(top, V)));
      for (size_t i = 0; i < r.top.size(); ++i) {
        EXPECT_EQ(r.top[i].token, want[i]) << V << " rank " << i;
        EXPECT_TRUE(within_an_ulp(r.top[i].logprob, (long double)l[size_t(want[i])] - lse));
      }
    }
  std::vector<int32_t> scratch;
  const std::vector<float> l = {0.0f, 1.0f};
  EXPECT_TRUE(token_logprobs(l.data(), 2, 0, 0, &scratch).top.empty());
}

TEST(SamplerStages, RepetitionPenaltyDividesPositiveAndMultipliesNegativeLogits) {
  std::vector<float> w = {2.0f, -1.0f, 3.0f, 0.0f, -0.5f};
  const std::vector<uint8_t> seen = {1, 1, 0, 1, 0};
  repetition_penalty(w, seen, 2.0f);
  EXPECT_EQ(w, (std::vector<float>{1.0f, -2.0f, 3.0f, 0.0f, -0.5f}));
  repetition_penalty(w, seen, 0.5f);  // < 1 favours the seen tokens
  EXPECT_EQ(w, (std::vector<float>{2.0f, -1.0f, 3.0f, 0.0f, -0.5f}));
}

TEST(SamplerStages, FrequencyAndPresencePenaltiesFollowOpenAI) {
  std::vector<float> w = {1.0f, 1.0f, 1.0f};
  const std::unordered_map<int32_t, int32_t> counts = {{0, 3}, {2, 1}};
  frequency_presence_penalty(w, counts, 0.25f, 0.5f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 3 * 0.25f - 0.5f);
  EXPECT_FLOAT_EQ(w[1], 1.0f);  // never generated: untouched
  EXPECT_FLOAT_EQ(w[2], 1.0f - 0.25f - 0.5f);
}

TEST(SamplerStages, ArgmaxGatherAndTopKRankTiesToTheLowerId) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20; ++trial) {
    auto w = normal_logits(rng, 300, 1.0f, true);
    for (int i = 0; i < 30; ++i) w[size_t(rng() % 300)] = -INFINITY;
    const auto want = ranked(w);
    EXPECT_EQ(argmax(w), want[0]);
    std::vector<int32_t> order(w.size());
    const int64_t n = gather(w, true, order);
    std::vector<int32_t> finite;
    for (int32_t i = 0; i < 300; ++i)
      if (w[size_t(i)] != -INFINITY) finite.push_back(i);
    ASSERT_EQ(std::vector<int32_t>(order.begin(), order.begin() + n), finite);
    for (int32_t k : {0, 1, 7, 299, 400}) {
      gather(w, false, order);
      const int64_t kept = top_k(w.data(), order, 300, k);
      ASSERT_EQ(kept, k > 0 && k < 300 ? k : 300);
      EXPECT_EQ(std::vector<int32_t>(order.begin(), order.begin() + kept),
                std::vector<int32_t>(want.begin(), want.begin() + kept))
          << "k " << k;
    }
  }
}

TEST(SamplerStages, SoftmaxAtATemperature) {
  const std::vector<float> w = {3.0f, 1.0f, 2.0f, -1.0f};
  const std::vector<int32_t> cand = {0, 2, 1};  // best first; token 3 is not a candidate
  for (float t : {0.3f, 1.0f, 2.5f}) {
    std::vector<double> p;
    softmax(w.data(), cand, t, &p);
    double z = 0;
    for (int32_t c : cand) z += std::exp(double(w[size_t(c)]) / double(t));
    ASSERT_EQ(p.size(), 3u);
    for (size_t i = 0; i < 3; ++i)
      EXPECT_NEAR(p[i], std::exp(double(w[size_t(cand[i])]) / double(t)) / z, 1e-15);
  }
}

TEST(SamplerStages, TopPKeepsTheSmallestPrefixReachingP) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  EXPECT_EQ(top_p(p, 0.4f), 1);
  EXPECT_EQ(top_p(p, 0.5f), 1);  // 0.5 reaches 0.5
  EXPECT_EQ(top_p(p, 0.75f), 2);
  EXPECT_EQ(top_p(p, 0.9f), 3);
  EXPECT_EQ(top_p(p, 0.99f), 4);
  EXPECT_EQ(top_p(p, 1.0f), 4);
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> q(1 + rng() % 50);
    double z = 0;
    for (auto& x : q) z += (x = u(rng));
    for (auto& x : q) x /= z;
    std::sort(q.rbegin(), q.rend());
    const float target = float(u(rng));
    const int64_t m = top_p(q, target);
    const double with = std::accumulate(q.begin(), q.begin() + m, 0.0);
    const double without = std::accumulate(q.begin(), q.begin() + m - 1, 0.0);
    EXPECT_TRUE(with >= target || m == int64_t(q.size()));
    EXPECT_LT(without, target);
  }
}

TEST(SamplerStages, MinPIsRelativeToTheMostLikely) {
  const std::vector<double> p = {0.5, 0.3, 0.15, 0.05};
  EXPECT_EQ(min_p(p, 0.0f), 4);
  EXPECT_EQ(min_p(p, 0.25f), 3);  // floor 0.125
  EXPECT_EQ(min_p(p, 0.5f), 2);   // floor 0.25
  EXPECT_EQ(min_p(p, 0.9f), 1);   // floor 0.45: the most likely always stays
  EXPECT_EQ(min_p(p, 1.0f), 1);
  const std::vector<double> unnormalized = {5.0, 3.0, 1.5, 0.5};  // the floor scales with them
  EXPECT_EQ(min_p(unnormalized, 0.25f), 3);
}

TEST(SamplerStages, DrawPicksTheCumulativeInterval) {
  const std::vector<double> p = {0.25, 0.5, 0.25};
  const std::vector<std::pair<double, int64_t>> cases = {{0.0, 0}, {0.2, 0},  {0.25, 1},
                                                         {0.7, 1}, {0.75, 2}, {0.999, 2}};
  for (const auto& [u, want] : cases) {
    EXPECT_EQ(draw(p, u), want) << u;
    EXPECT_EQ(draw(std::vector<double>{1.0, 2.0, 1.0}, u), want) << u;  // the mass need not be 1
  }
}

// A plain sampler: penalties, then the reasoning budget, then a full sort, top-k, softmax, top-p,
// min-p and the draw from the position's stream Xoshiro256(seed ^ splitmix64(position)).
struct Reference {
  SamplingParams p;
  std::vector<uint8_t> seen;
  std::unordered_map<int32_t, int32_t> counts;
  uint64_t pos = 0;
  bool think;
  int64_t think_tokens = 0;

  int32_t pick(std::vector<float> w) {
    for (size_t i = 0; i < w.size(); ++i)
      if (seen[i]) w[i] = w[i] > 0 ? w[i] / p.repetition_penalty : w[i] * p.repetition_penalty;
    for (const auto& [t, c] : counts)
      w[size_t(t)] -= p.frequency_penalty * float(c) + p.presence_penalty;
    if (think && p.reasoning_budget >= 0 && think_tokens >= p.reasoning_budget) return p.think_end;
    std::vector<int32_t> ids = ranked(w);
    if (p.temperature == 0) return ids[0];
    if (p.top_k > 0 && size_t(p.top_k) < ids.size()) ids.resize(size_t(p.top_k));
    std::vector<double> pr;
    double z = 0;
    for (int32_t t : ids)
      z += pr.emplace_back(
          std::exp((double(w[size_t(t)]) - double(w[size_t(ids[0])])) / double(p.temperature)));
    for (auto& x : pr) x /= z;
    size_t n = pr.size();
    if (p.top_p < 1) {
      double c = 0;
      for (n = 0; n < pr.size();)
        if ((c += pr[n++]) >= p.top_p) break;
    }
    size_t m = 1;
    while (m < n && pr[m] >= p.min_p * pr[0]) ++m;
    if (p.min_p > 0) n = m;
    const double mass = std::accumulate(pr.begin(), pr.begin() + int64_t(n), 0.0);
    const double u = core::Xoshiro256(*p.seed ^ core::splitmix64_of(pos)).uniform() * mass;
    double c = 0;
    for (size_t i = 0; i < n; ++i)
      if (u < (c += pr[i])) return ids[i];
    return ids[n - 1];
  }
  int32_t sample(const std::vector<float>& logits) {
    const int32_t t = pick(logits);
    seen[size_t(t)] = 1;
    counts[t]++;
    ++pos;
    if (think) {
      if (t == p.think_end)
        think = false;
      else
        ++think_tokens;
    } else if (t == p.think_start) {
      think = true;
      think_tokens = 0;
    }
    return t;
  }
};

TEST(SamplerChain, SamplesTheTokensOfAPlainReference) {
  constexpr int64_t V = 120;
  std::mt19937 rng(8);
  int configs = 0;
  for (float temperature : {0.0f, 0.5f, 1.0f, 1.6f})
    for (int32_t k : {0, 1, 5})
      for (float tp : {1.0f, 0.85f, 0.3f})
        for (float mp : {0.0f, 0.1f})
          for (int variant = 0; variant < 4; ++variant) {
            SamplingParams p;
            p.temperature = temperature, p.top_k = k, p.top_p = tp, p.min_p = mp;
            p.seed = uint64_t(rng());
            if (variant & 1)
              p.repetition_penalty = 1.4f, p.frequency_penalty = 0.3f, p.presence_penalty = -0.2f;
            if (variant & 2)
              p.think_start = 3, p.think_end = 4, p.reasoning_budget = 3, p.reasoning_open = true;
            ASSERT_TRUE(p.validate().ok());
            Sampler s(p, V);
            Reference ref{p, std::vector<uint8_t>(V, 0), {}, 0, p.reasoning_open};
            const std::vector<int32_t> prompt = {7, 8, 9};
            s.add_prompt(prompt);
            for (int32_t t : prompt) ref.seen[size_t(t)] = 1;
            for (int i = 0; i < 40; ++i) {
              auto l = normal_logits(rng, V, 2.0f, i % 2 == 0);
              if (variant & 2 && i % 9 == 0) l[3] = 20;  // opens a thinking block again
              ASSERT_EQ(s.sample(l.data()).token, ref.sample(l))
                  << "config " << configs << " position " << i;
            }
            ++configs;
          }
}

}  // namespace stages_test
}  // namespace qwen35::runtime::sampling
