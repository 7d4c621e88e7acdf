// The sampler under Access::kBounded (what the engine thread uses): it answers only from what
// the automaton has built, records nothing when it cannot, and then, once the masks
// masks_ahead() names are built (what the workers compute ahead), answers with the very token
// an unbounded sampler draws, position by position, near the end of the budget too.
#include <gtest/gtest.h>

#include <random>

#include "grammar/json_schema.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {
namespace {

// Bytes 0..255 and an end token (256).
constexpr int32_t kByteEnd = 256, kByteV = 257;
std::shared_ptr<grammar::Automaton> byte_automaton(const char* schema) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  bytes.push_back("<|end|>");
  std::vector<bool> usable(kByteV, true);
  usable[kByteEnd] = false;
  auto g = grammar::json_schema_grammar(grammar::Json::parse(schema));
  EXPECT_TRUE(g.ok()) << g.message();
  auto a = std::make_shared<grammar::Automaton>(
      std::move(*g), std::make_shared<const grammar::Vocab>(bytes, usable),
      std::vector<int32_t>{kByteEnd});
  a->finish_tokens(a->initial());
  return a;
}

TEST(SamplerBounded, AnswersFromWhatIsBuiltAndThenAsUnbounded) {
  const char* schema = R"({"type":"object","properties":{"k":{"enum":["yes","no"]},
      "s":{"type":"string","maxLength":6}},"required":["k","s"]})";
  for (int32_t top_k : {0, 5})
    for (uint64_t seed : {1, 2}) {
      SamplingParams p;
      p.temperature = 1.0f;
      p.top_k = top_k;
      p.seed = seed;
      p.max_output = 40;
      SamplingParams q = p;
      p.grammar = byte_automaton(schema);
      q.grammar = byte_automaton(schema);  // its own automaton, built as it goes
      Sampler bounded(p, kByteV), plain(q, kByteV);
      std::mt19937 rng{unsigned(seed)};
      int deferred = 0;
      for (int64_t i = 0; i < p.max_output; ++i) {
        std::vector<float> l(kByteV);
        std::normal_distribution<float> n(0, 2);
        for (auto& x : l) x = n(rng);
        grammar::Unavailable::Why why{};
        auto r = bounded.try_sample(l.data(), grammar::Access::kBounded, &why);
        if (!r) {
          EXPECT_NE(why, grammar::Unavailable::kExhausted);
          ++deferred;
          // What a worker computes ahead; without top-k it is exactly what was missing.
          const auto ahead = bounded.masks_ahead({});
          if (top_k == 0) {
            EXPECT_EQ(ahead.size(), 1u);
          }
          std::vector<uint64_t> words;
          for (const auto& [config, limit] : ahead) p.grammar->mask(config, limit, &words);
          r = top_k == 0 ? bounded.try_sample(l.data(), grammar::Access::kBounded, &why)
                         : bounded.try_sample(l.data(), grammar::Access::kBuild, &why);
          ASSERT_TRUE(r) << "position " << i;
        }
        const SampleResult want = plain.sample(l.data());
        ASSERT_EQ(r->token, want.token) << "top_k " << top_k << " position " << i;
        if (want.token == kByteEnd) break;
      }
      if (top_k == 0) {
        EXPECT_GT(deferred, 0);  // a new configuration's mask is never built yet
      }
    }
}

}  // namespace
}  // namespace qwen35::runtime
