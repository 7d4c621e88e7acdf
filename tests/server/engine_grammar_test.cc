// The engine under structured outputs' costs and failures (issue 32), in process on a synthetic
// tiny checkpoint: a grammar's work never holds up another request's rows (shown without
// timing: the test holds the automaton's lock while plain requests run to their end), and the
// paused request keeps its solo bits, drafted or not; an automaton that reaches its memory bound
// ends its own request with an error that says so while a plain request beside it keeps its
// solo bits; an allocation that fails on the engine thread ends that request only.
#include <gtest/gtest.h>

#include <cstring>

#include "alloc_hook.h"
#include "engine_drain.h"
#include "grammar/json_schema.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "tiny_model_suite.h"

namespace qwen35::runtime {
namespace {

using testing::run;

using testing::TempDir;

class EngineGrammarTest : public testing::TinyModelSuite<EngineGrammarTest> {
 protected:
  int64_t vocab() const { return model_->config().vocab; }
  int32_t end_id() const { return int32_t(vocab() - 1); }

  // Token i's bytes: byte i below 256, else "w" and its number; the last id ends the output.
  std::shared_ptr<const grammar::Vocab> grammar_vocab() const {
    std::vector<std::string> bytes;
    for (int64_t i = 0; i < vocab(); ++i)
      bytes.push_back(i < 256 ? std::string(1, char(i)) : "w" + std::to_string(i));
    std::vector<bool> usable(size_t(vocab()), true);
    usable[size_t(end_id())] = false;
    return std::make_shared<const grammar::Vocab>(bytes, usable);
  }
  std::shared_ptr<grammar::Automaton> automaton(const char* schema,
                                                grammar::AutomatonLimits lim = {}) const {
    auto g = grammar::json_schema_grammar(grammar::Json::parse(schema));
    EXPECT_TRUE(g.ok()) << g.message();
    auto a = std::make_shared<grammar::Automaton>(std::move(*g), grammar_vocab(),
                                                  std::vector<int32_t>{end_id()}, lim);
    a->finish_tokens(a->initial());  // as the server does before it submits
    return a;
  }
  static GenerationRequest request(int i, std::shared_ptr<grammar::Automaton> g) {
    GenerationRequest r;
    for (int k = 0; k < 20 + 7 * i; ++k) r.prompt.push_back(int32_t((k * 13 + i * 7 + 1) % 3000));
    r.max_tokens = 24;
    r.sampling.temperature = 0.8f;
    r.sampling.seed = uint64_t(40 + i);
    r.sampling.logprobs = 1;
    r.sampling.grammar = std::move(g);
    if (r.sampling.grammar) r.eos_ids = r.sampling.grammar->end_ids();
    return r;
  }

};


// Repeats nested three deep, under the states bound: its configurations hold many parse stacks,
// and every token needs a new mask.
constexpr const char* kNested = R"({"type":"string","pattern":"^((a{2,20}){2,20}){2,20}$"})";

TEST_F(EngineGrammarTest, AGrammarsWorkNeverHoldsUpOtherRequests) {
  Engine engine(*model_, EngineOptions{4, 256, 8, 64});
  std::vector<testing::EngineOut> plain_solo;
  for (int i = 0; i < 3; ++i) plain_solo.push_back(run(engine, request(i, nullptr)));
  const testing::EngineOut grammar_solo = run(engine, request(3, automaton(kNested)));
  ASSERT_NE(grammar_solo.finish, "error") << grammar_solo.error;
  ASSERT_GE(grammar_solo.samples.size(), 3u);
  // A fresh automaton, its lock held here: every sample of the request must wait for it.
  auto held = automaton(kNested);
  auto lock = std::make_unique<grammar::Automaton::Session>(*held, grammar::Access::kBuild);
  SubmitError err;
  std::string msg;
  auto g = engine.submit(request(3, held), &err, &msg);
  ASSERT_TRUE(g) << msg;
  for (int i = 0; i < 3; ++i) testing::expect_same_bits(run(engine, request(i, nullptr)), plain_solo[size_t(i)]);
  StreamEvent ev;
  EXPECT_FALSE(g->next(&ev, std::chrono::milliseconds(0)));  // not one token yet
  EXPECT_EQ(engine.stats().running, 1);
  lock.reset();
  testing::expect_same_bits(testing::drain(*g), grammar_solo);
  // Drafted: verifications paused at a row whose sample went to a worker give the same bits.
  GenerationRequest drafted = request(3, automaton(kNested));
  drafted.spec = SpecOptions{SpecMethod::kLookup, 4};
  drafted.prediction.assign(40, int32_t('a'));
  testing::expect_same_bits(run(engine, std::move(drafted)), grammar_solo);
  EXPECT_GT(engine.stats().drafted_tokens, 0);
}

TEST_F(EngineGrammarTest, AnAutomatonPastItsBoundEndsItsRequestOnly) {
  // Each character of the string is a configuration of its own: the automaton grows as it runs.
  const char* schema = R"({"type":"string","maxLength":2000})";
  const size_t room = automaton(schema)->bytes() + (size_t(16) << 10);  // 16 KiB to grow
  Engine engine(*model_, EngineOptions{2, 256, 8, 64});
  const testing::EngineOut plain_solo = run(engine, request(0, nullptr));
  auto bounded = automaton(schema, grammar::AutomatonLimits{room});
  ASSERT_FALSE(bounded->exhausted());
  SubmitError err;
  std::string msg;
  auto g = engine.submit(request(1, bounded), &err, &msg);
  auto p = engine.submit(request(0, nullptr), &err, &msg);
  ASSERT_TRUE(g && p) << msg;
  const testing::EngineOut out = testing::drain(*g);
  EXPECT_EQ(out.finish, "error");
  EXPECT_NE(out.error.find("memory bound"), std::string::npos) << out.error;
  EXPECT_NE(out.error.find("--grammar-max-mb"), std::string::npos) << out.error;
  EXPECT_TRUE(bounded->exhausted());
  testing::expect_same_bits(testing::drain(*p), plain_solo);
  // The same format with room to grow runs to its end.
  EXPECT_NE(run(engine, request(1, automaton(schema))).finish, "error");
}

TEST_F(EngineGrammarTest, AnAllocationFailureOnTheEngineThreadEndsOneRequest) {
  auto a = automaton(R"({"type":"object","properties":{"n":{"type":"integer"}}})");
  std::atomic<int> armed{1};
  EngineOptions opts{2, 256, 8, 64};
  opts.cache_bytes = int64_t(64) << 20;  // the hook runs where a request resumes from the cache
  opts.before_resume = [&] {
    if (armed.exchange(0)) testing::fail_next_allocation(size_t(vocab()));  // its sampler's arrays
  };
  Engine engine(*model_, opts);
  const testing::EngineOut failed = run(engine, request(2, a));
  EXPECT_EQ(failed.finish, "error");
  EXPECT_NE(failed.error.find("ran out of memory"), std::string::npos) << failed.error;
  const testing::EngineOut again = run(engine, request(2, a));
  Engine fresh(*model_, EngineOptions{2, 256, 8, 64});
  testing::expect_same_bits(again, run(fresh, request(2, a)));
  EXPECT_EQ(engine.stats().slots_busy, 0);
}

}  // namespace
}  // namespace qwen35::runtime
