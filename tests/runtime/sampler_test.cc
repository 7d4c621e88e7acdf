#include "runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "grammar/json_schema.h"

namespace qwen35::runtime {
namespace {

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(float(std::log(p)));
  return l;
}

// Frequencies of `n` draws.
std::map<int32_t, int> histogram(SamplingParams p, const std::vector<float>& logits, int n) {
  Sampler s(p, int64_t(logits.size()));
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) h[s.sample(logits.data()).token]++;
  return h;
}

void expect_frequencies(const std::map<int32_t, int>& h, const std::vector<double>& want, int n) {
  for (size_t i = 0; i < want.size(); ++i) {
    const int got = h.count(int32_t(i)) ? h.at(int32_t(i)) : 0;
    const double mean = want[i] * n, sd = std::sqrt(n * want[i] * (1 - want[i]));
    EXPECT_NEAR(got, mean, 5 * sd + 1e-9) << "token " << i;
  }
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowerId) {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, 5);
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f, 1.0f};
  EXPECT_EQ(s.sample(l.data()).token, 1);
}

TEST(Sampler, SamplesTheSoftmaxDistribution) {
  const std::vector<double> probs = {0.4, 0.3, 0.2, 0.1};
  SamplingParams p;
  p.seed = 7;
  const int n = 20000;
  expect_frequencies(histogram(p, logits_of(probs), n), probs, n);
  // Temperature 0.5 squares the odds.
  p.temperature = 0.5f;
  std::vector<double> sq;
  double z = 0;
  for (double q : probs) z += q * q;
  for (double q : probs) sq.push_back(q * q / z);
  expect_frequencies(histogram(p, logits_of(probs), n), sq, n);
}

TEST(Sampler, TopKTopPMinP) {
  const std::vector<double> probs = {0.5, 0.3, 0.15, 0.05};
  const int n = 20000;
  SamplingParams p;
  p.seed = 3;
  p.top_k = 2;
  expect_frequencies(histogram(p, logits_of(probs), n), {0.625, 0.375, 0, 0}, n);
  p.top_k = 0;
  p.top_p = 0.7f;  // 0.5 + 0.3 reaches 0.7
  expect_frequencies(histogram(p, logits_of(probs), n), {0.625, 0.375, 0, 0}, n);
  p.top_p = 1.0f;
  p.min_p = 0.25f;  // floor 0.125: keeps 0.5, 0.3, 0.15
  expect_frequencies(histogram(p, logits_of(probs), n), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, n);
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i)) * 3);
  SamplingParams p;
  p.seed = 42;
  p.top_p = 0.9f;
  Sampler a(p, 1000), b(p, 1000);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(l.data()).token);
    tb.push_back(b.sample(l.data()).token);
  }
  EXPECT_EQ(ta, tb);
  p.seed = 43;
  Sampler c(p, 1000);
  std::vector<int32_t> tc;
  for (int i = 0; i < 50; ++i) tc.push_back(c.sample(l.data()).token);
  EXPECT_NE(ta, tc);
}

// The draw for position p depends only on (seed, p): whatever was sampled before, from whatever
// logits, the same logits at p give the same token (speculative decoding relies on it).
TEST(Sampler, DrawsArePositionKeyed) {
  std::vector<float> l(1000), other(1000);
  for (size_t i = 0; i < l.size(); ++i) {
    l[i] = float(std::sin(double(i)) * 3);
    other[i] = float(std::cos(double(i) * 0.37) * 5);
  }
  SamplingParams p;
  p.seed = 9;
  Sampler a(p, 1000), b(p, 1000);
  std::vector<int32_t> ta, tb, early_a, early_b;
  for (int i = 0; i < 10; ++i) {
    early_a.push_back(a.sample(l.data()).token);
    early_b.push_back(b.sample(other.data()).token);
  }
  EXPECT_NE(early_a, early_b);
  for (int i = 0; i < 40; ++i) {
    ta.push_back(a.sample(l.data()).token);
    tb.push_back(b.sample(l.data()).token);
  }
  EXPECT_EQ(ta, tb);
}

TEST(Sampler, Penalties) {
  std::vector<float> l = {2.0f, 1.9f, -1.0f};
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;  // prompt token 0: 2.0 -> 1.0
  Sampler s(p, 3);
  std::vector<int32_t> prompt = {0};
  s.add_prompt(prompt);
  EXPECT_EQ(s.sample(l.data()).token, 1);
  p.repetition_penalty = 1.0f;
  p.frequency_penalty = 0.06f;  // each output of 0 costs 0.06: 2.0 -> 1.94 -> 1.88 < 1.9
  Sampler f(p, 3);
  EXPECT_EQ(f.sample(l.data()).token, 0);
  EXPECT_EQ(f.sample(l.data()).token, 0);
  EXPECT_EQ(f.sample(l.data()).token, 1);
  p.frequency_penalty = 0;
  p.presence_penalty = 0.2f;
  Sampler pr(p, 3);
  EXPECT_EQ(pr.sample(l.data()).token, 0);
  EXPECT_EQ(pr.sample(l.data()).token, 1);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 2;
  p.repetition_penalty = 5;  // does not change the reported logprobs
  Sampler s(p, 4);
  std::vector<int32_t> prompt = {1};
  s.add_prompt(prompt);
  auto r = s.sample(l.data());
  double z = 0;
  for (float x : l) z += std::exp(double(x));
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 2);
  EXPECT_NEAR(r.top[0].logprob, 3.0 - std::log(z), 1e-5);
  EXPECT_EQ(r.token, 2);  // 3/5 = 0.6 < 2
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-5);
}

// A thinking block holds at most reasoning_budget sampled tokens; then think_end is chosen
// whatever the logits say, with its raw log-probability, and sampling goes on as before.
TEST(Sampler, ReasoningBudgetEndsTheThinkingBlock) {
  constexpr int32_t kStart = 5, kEnd = 6;
  std::vector<float> l(8, 0.0f);
  l[2] = 4.0f;  // greedy picks 2 while it may
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 0;
  p.think_start = kStart;
  p.think_end = kEnd;
  p.reasoning_budget = 3;
  p.reasoning_open = true;
  Sampler s(p, 8);
  std::vector<int32_t> got;
  for (int i = 0; i < 6; ++i) got.push_back(s.sample(l.data()).token);
  EXPECT_EQ(got, (std::vector<int32_t>{2, 2, 2, kEnd, 2, 2}));
  double z = 0;
  for (float x : l) z += std::exp(double(x));
  Sampler lp(p, 8);
  for (int i = 0; i < 3; ++i) lp.sample(l.data());
  const SampleResult forced = lp.sample(l.data());
  EXPECT_EQ(forced.token, kEnd);
  EXPECT_NEAR(forced.logprob, 0.0 - std::log(z), 1e-5);

  // Budget 0: the block ends at once. Not open: nothing is forced until the output opens one.
  p.reasoning_budget = 0;
  Sampler zero(p, 8);
  EXPECT_EQ(zero.sample(l.data()).token, kEnd);
  EXPECT_EQ(zero.sample(l.data()).token, 2);
  p.reasoning_budget = 1;
  p.reasoning_open = false;
  std::vector<float> opens = l;
  opens[kStart] = 9.0f;  // the model opens a block, then would think forever
  Sampler closed(p, 8);
  EXPECT_EQ(closed.sample(l.data()).token, 2);
  EXPECT_EQ(closed.sample(opens.data()).token, kStart);
  EXPECT_EQ(closed.sample(l.data()).token, 2);
  EXPECT_EQ(closed.sample(l.data()).token, kEnd);
  EXPECT_EQ(closed.sample(l.data()).token, 2);

  // A block the model closes itself is not cut; no budget, nothing forced.
  std::vector<float> ends = l;
  ends[kEnd] = 9.0f;
  p.reasoning_budget = 2;
  p.reasoning_open = true;
  Sampler self(p, 8);
  EXPECT_EQ(self.sample(ends.data()).token, kEnd);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(self.sample(l.data()).token, 2);
  p.reasoning_budget = -1;
  Sampler none(p, 8);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(none.sample(l.data()).token, 2);
}

// Sampled at temperature 1, the tokens after a forced end are those of the same positions'
// draws: a run with the budget and one without agree everywhere but inside the cut.
TEST(Sampler, ReasoningBudgetKeepsTheDrawPositions) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i) * 1.7));
  l[49] = -30.0f;  // think_end: never drawn by chance
  SamplingParams p;
  p.seed = 3;
  p.think_end = 49;
  p.reasoning_open = true;
  Sampler free_run(p, 50);
  p.reasoning_budget = 4;
  Sampler capped(p, 50);
  for (int i = 0; i < 30; ++i) {
    const int32_t a = free_run.sample(l.data()).token, b = capped.sample(l.data()).token;
    if (i == 4) EXPECT_EQ(b, 49);
    else EXPECT_EQ(a, b) << "position " << i;
  }
  p.think_end = -1;
  EXPECT_NE(p.validate().message().find("end-of-thinking"), std::string::npos);
  p.think_end = 49;
  p.reasoning_budget = -2;
  EXPECT_NE(p.validate().message().find("reasoning budget"), std::string::npos);
}


// A byte vocabulary (ids 0..255) plus </think> (256), <think> (257) and an end token (258);
// the thinking tags and the end token are never grammar tokens.
constexpr int32_t kThinkEnd = 256, kThinkStart = 257, kEnd = 258, kV = 259;
std::shared_ptr<grammar::Automaton> automaton(const char* schema) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  bytes.push_back("</think>");
  bytes.push_back("<think>");
  bytes.push_back("<|end|>");
  std::vector<bool> usable(kV, true);
  usable[kThinkEnd] = usable[kThinkStart] = usable[kEnd] = false;
  auto g = grammar::json_schema_grammar(grammar::Json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.message();
  return std::make_shared<grammar::Automaton>(std::move(*g),
                                              std::make_shared<const grammar::Vocab>(bytes, usable),
                                              std::vector<int32_t>{kEnd});
}

// Logits that prefer the end token, then the thinking tags, then 'x': everything a grammar
// must forbid at some point.
std::vector<float> hostile_logits(std::mt19937& rng) {
  std::vector<float> l(kV);
  std::normal_distribution<float> n(0, 1);
  for (auto& x : l) x = n(rng);
  l[kEnd] = 9, l[kThinkStart] = 8, l[kThinkEnd] = 7, l['x'] = 6;
  return l;
}

// Samples until the end token (or max_output): the text, the tokens.
std::string run_sampler(Sampler& s, int64_t max_output, std::mt19937& rng, std::vector<int32_t>* toks) {
  std::string text;
  for (int64_t i = 0; i < max_output; ++i) {
    const auto l = hostile_logits(rng);
    const int32_t t = s.sample(l.data()).token;
    toks->push_back(t);
    if (t == kEnd) break;
    text += t < 256 ? std::string(1, char(t)) : t == kThinkEnd ? "</think>" : "<think>";
  }
  return text;
}

TEST(Sampler, GrammarAllowsOnlyValidValuesAndEndsInBudget) {
  auto a = automaton(R"({"type":"object","properties":{"k":{"enum":["yes","no"]},"s":{"type":"string"}},
      "required":["k","s"]})");
  const int64_t need = a->finish_tokens(a->initial()) + 1;
  for (float temperature : {0.0f, 1.0f})
    for (int64_t max_output : {need, need + 5, int64_t(200)})
      for (uint64_t seed : {1, 2, 3}) {
        SamplingParams p;
        p.temperature = temperature;
        p.seed = seed;
        p.grammar = a;
        p.max_output = max_output;
        ASSERT_TRUE(p.validate().ok());
        Sampler s(p, kV);
        std::mt19937 rng{unsigned(seed)};
        std::vector<int32_t> toks;
        const std::string text = run_sampler(s, max_output, rng, &toks);
        ASSERT_EQ(toks.back(), kEnd) << text;  // ended by the end token, within max_output
        const auto v = grammar::Json::parse(text, nullptr, false);
        ASSERT_TRUE(v.is_object()) << text;
        EXPECT_TRUE(v["k"] == "yes" || v["k"] == "no") << text;
        EXPECT_TRUE(v["s"].is_string()) << text;
        EXPECT_TRUE(s.grammar_complete());
      }
}

TEST(Sampler, GrammarStartsAfterTheThinkingBlock) {
  auto a = automaton(R"({"enum":["yes","no"]})");
  SamplingParams p;
  p.seed = 4;
  p.grammar = a;
  p.reasoning_open = true;
  p.think_start = kThinkStart;
  p.think_end = kThinkEnd;
  p.max_output = 40;
  Sampler s(p, kV);
  std::mt19937 rng(4);
  std::vector<int32_t> toks;
  const std::string text = run_sampler(s, p.max_output, rng, &toks);
  // Free thinking (never the end token, which the logits prefer), closed in time for the value.
  const size_t close = text.find("</think>");
  ASSERT_NE(close, std::string::npos) << text;
  EXPECT_GT(close, 0u);
  EXPECT_EQ(toks.back(), kEnd);
  EXPECT_EQ(std::count(toks.begin(), toks.end(), kEnd), 1);
  const auto v = grammar::Json::parse(text.substr(close + 8), nullptr, false);
  EXPECT_TRUE(v == "yes" || v == "no") << text;
}

// Qwen3's prompt leaves <think> to the model: with think_may_open its first token may open a
// thinking block (the hostile logits prefer it after the end token), which the grammar waits
// out (inside it any token but the end goes); after it the value follows the grammar. Without room for a block, or without the
// flag, the value starts at once.
TEST(Sampler, GrammarWaitsOutAThinkingBlockTheModelOpens) {
  auto a = automaton(R"({"enum":["yes","no"]})");
  const int64_t need = a->finish_tokens(a->initial()) + 1;
  for (const bool may_open : {true, false})
    for (const int64_t max_output : {int64_t(40), need + 2}) {
      SamplingParams p;
      p.seed = 4;
      p.grammar = a;
      p.think_may_open = may_open;
      p.think_start = kThinkStart;
      p.think_end = kThinkEnd;
      p.max_output = max_output;
      ASSERT_TRUE(p.validate().ok());
      Sampler s(p, kV);
      std::mt19937 rng(4);
      std::vector<int32_t> toks;
      const std::string text = run_sampler(s, max_output, rng, &toks);
      const bool thinks = may_open && max_output == 40;
      SCOPED_TRACE(text);
      EXPECT_EQ(toks.front() == kThinkStart, thinks);
      const size_t close = text.find("</think>");
      EXPECT_EQ(close != std::string::npos, thinks);
      const auto v = grammar::Json::parse(thinks ? text.substr(close + 8) : text, nullptr, false);
      EXPECT_TRUE(v == "yes" || v == "no");
      EXPECT_EQ(toks.back(), kEnd);
      EXPECT_TRUE(s.grammar_complete());
    }
  // Drafts: a first <think>, thinking, </think> and the value pass the grammar as sampled ones do.
  SamplingParams p;
  p.temperature = 0;
  p.grammar = a;
  p.think_may_open = true;
  p.think_start = kThinkStart;
  p.think_end = kThinkEnd;
  const std::vector<int32_t> draft = {kThinkStart, 'x', kThinkEnd, '"', 'n', 'o', '"', kEnd};
  EXPECT_EQ(Sampler(p, kV).allowed_prefix(draft), draft.size());
  EXPECT_EQ(Sampler(p, kV).allowed_prefix(std::vector<int32_t>{'"', kThinkStart}), 1u);
  p.think_may_open = false;
  EXPECT_EQ(Sampler(p, kV).allowed_prefix(draft), 0u);
  p.think_may_open = true;
  p.think_start = -1;
  EXPECT_NE(p.validate().message().find("thinking tokens"), std::string::npos);
}

// The grammar's candidates equal those of masking the logits first, whichever way the sampler
// finds them (checking the best tokens one by one, or the whole mask): the same tokens as an
// unconstrained sampler given the masked logits, position by position.
TEST(Sampler, GrammarCandidatesEqualMaskingFirst) {
  auto a = automaton(R"({"type":"object","properties":{"k":{"enum":["yes","no"]},
      "s":{"type":"string","maxLength":6},"n":{"type":"array","items":{"type":"integer"}}},
      "required":["k","s","n"]})");
  for (int32_t top_k : {0, 1, 3, 40})
    for (float temperature : {0.0f, 0.8f})
      for (uint64_t seed : {1, 2}) {
        SamplingParams p;
        p.temperature = temperature;
        p.top_k = top_k;
        p.top_p = 0.9f;
        p.seed = seed;
        SamplingParams q = p;  // the reference: no grammar, the mask applied to its logits
        p.grammar = a;
        p.max_output = 60;
        Sampler s(p, kV), ref(q, kV);
        std::mt19937 rng{unsigned(seed)};
        int32_t c = a->initial();
        std::vector<uint64_t> m;
        for (int64_t i = 0; i < p.max_output; ++i) {
          auto l = hostile_logits(rng);
          if (i % 3 == 0) l['"'] = 12;  // sometimes the best token is allowed, sometimes not
          const int32_t t = s.sample(l.data()).token;
          a->mask(c, p.max_output - i - 2, &m);
          for (int32_t x = 0; x < kV; ++x)
            if (!((m[size_t(x) / 64] >> (x % 64)) & 1)) l[size_t(x)] = -INFINITY;
          ASSERT_EQ(t, ref.sample(l.data()).token) << "top_k " << top_k << " position " << i;
          if (t == kEnd) break;
          c = a->step(c, t);
          ASSERT_NE(c, grammar::Automaton::kDead);
        }
      }
}

TEST(Sampler, DraftsAreCutAtTheFirstTokenTheGrammarRefuses) {
  SamplingParams p;
  p.temperature = 0;
  p.grammar = automaton(R"({"enum":["yes","no"]})");
  Sampler s(p, kV);
  const std::vector<int32_t> draft = {'"', 'y', 'e', 's', '"', kEnd, 'x'};
  EXPECT_EQ(s.allowed_prefix(draft), 6u);  // the value and the end token; nothing after it
  EXPECT_EQ(s.allowed_prefix(std::vector<int32_t>{'"', 'y', 'o'}), 2u);
  EXPECT_EQ(s.allowed_prefix(std::vector<int32_t>{kEnd}), 0u);  // not complete yet
  EXPECT_EQ(Sampler(SamplingParams{}, kV).allowed_prefix(draft), draft.size());
}

TEST(Sampler, ValidateNamesTheParameter) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_NE(p.validate().message().find("temperature"), std::string::npos);
  p = {};
  p.top_p = 0;
  EXPECT_NE(p.validate().message().find("top_p"), std::string::npos);
  p = {};
  p.min_p = 2;
  EXPECT_NE(p.validate().message().find("min_p"), std::string::npos);
  p = {};
  p.repetition_penalty = 0;
  EXPECT_NE(p.validate().message().find("repetition_penalty"), std::string::npos);
  p = {};
  p.top_k = -5;
  EXPECT_NE(p.validate().message().find("top_k"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.validate().ok());
}

}  // namespace
}  // namespace qwen35::runtime

namespace qwen35::runtime {
namespace {

// What a pipeline's last rank returns where sampling needs only the k largest logits
// (model::SequenceRows::logits_top_k): those k (by value, then the lower id first) and -inf for
// the rest of the row, which rank 0 hands the sampler. Written here from the definition.
std::vector<float> top_k_row(const std::vector<float>& row, int32_t k) {
  std::vector<int32_t> ids(row.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[size_t(a)] > row[size_t(b)]; });
  std::vector<float> out(row.size(), -INFINITY);
  for (int32_t j = 0; j < k; ++j) out[size_t(ids[size_t(j)])] = row[size_t(ids[size_t(j)])];
  return out;
}

// Greedy and top-k sampling (with temperature, top-p and min-p after the cut) pick the same
// tokens from a row cut to its top k as from the whole row, draw after draw, also where logits
// tie at the cut (every other row coarse: many equal values).
TEST(Sampler, ATopKRowSamplesAsTheWholeRow) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> coarse(-40, 40);
  const int64_t vocab = 1000;
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  for (const Case& c : {Case{0, 0, 1, 0}, Case{0.7f, 20, 0.8f, 0}, Case{1.0f, 5, 1, 0}, Case{1.3f, 3, 1, 0.2f},
                        Case{0.5f, 1, 1, 0}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    p.seed = 11;
    const int32_t k = c.temperature == 0 ? 1 : c.top_k;
    Sampler whole(p, vocab), cut(p, vocab);
    int not_argmax = 0;  // the draws do draw (not the best token every time)
    for (int step = 0; step < 200; ++step) {
      std::vector<float> row(static_cast<size_t>(vocab));
      std::normal_distribution<float> fine(0.0f, 3.0f);
      for (float& v : row) v = step % 2 ? float(coarse(rng)) * 0.25f : fine(rng);
      const int32_t a = whole.sample(row.data()).token;
      const std::vector<float> r = top_k_row(row, k);
      EXPECT_EQ(cut.sample(r.data()).token, a) << "temperature " << c.temperature << " top_k " << c.top_k;
      not_argmax += a != int32_t(std::max_element(row.begin(), row.end()) - row.begin());
    }
    if (k > 1) {
      EXPECT_GT(not_argmax, 20) << "top_k " << c.top_k;
    }
  }
}

}  // namespace
}  // namespace qwen35::runtime
