// KV admission and preemption (runtime/stepper.h, docs/design.md "Admission and preemption"),
// and fairness between requests of n choices:
// - requests without an output cap take KV blocks as they grow: two of them in a pool that
//   holds one at full context preempt each other, and each still gets the tokens and logprob
//   bits it gets alone (greedy and seeded; plain, lookup and MTP drafting; exact and fast);
// - a second turn of a conversation with no cap under one slot resumes the first turn's prompt
//   from the prefix cache (nothing is evicted for a promise);
// - an n = 16 request does not go ahead of a later n = 1 request for every choice.
// Everything waits for states (stream events, counters), never for time.
#include <gtest/gtest.h>

#include <algorithm>

#include "engine_drain.h"
#include "kernels/ops.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "tiny_model_suite.h"

namespace qwen35::runtime {
namespace {

using testing::EngineOut;
using testing::drain;
using testing::expect_same_bits;

std::vector<int32_t> tokens(int64_t n, int salt) {
  std::vector<int32_t> p;
  for (int64_t k = 0; k < n; ++k) p.push_back(int32_t((k * 29 + salt * 613 + 3) % 3000));
  return p;
}

// A request with no output cap: it runs until the context (the pool) is full.
GenerationRequest uncapped(int salt, bool seeded, SpecMethod method) {
  GenerationRequest g;
  g.prompt = tokens(70 + 10 * salt, salt);
  g.max_tokens = -1;
  g.sampling.temperature = seeded ? 0.8f : 0.0f;
  g.sampling.seed = 11 + uint64_t(salt);
  g.sampling.logprobs = 2;
  if (method != SpecMethod::kOff) g.spec = SpecOptions{method, 3};
  return g;
}

// Two uncapped requests in a pool of 5 blocks (320 positions, the context): alone each fills
// the pool, so together one must give its blocks back. Both end at the context with their solo
// bits, and the engine counted the preemption.
void preempted_equals_solo(model::Model& model, SpecMethod method, bool seeded, bool cache) {
  SCOPED_TRACE(std::string("method ") + std::to_string(int(method)) + (seeded ? " seeded" : " greedy") +
               (cache ? " cache" : " no cache"));
  EngineOptions o{2, 320, 8, 64};
  o.kv_blocks = 5;
  o.cache_bytes = cache ? int64_t(64) << 20 : 0;
  o.spec = SpecOptions{method == SpecMethod::kOff ? SpecMethod::kOff : method, 3};
  std::vector<EngineOut> solo;
  {
    Engine engine(model, o);
    for (int i = 0; i < 2; ++i) {
      solo.push_back(testing::run(engine, uncapped(i, seeded, method)));
      ASSERT_EQ(solo.back().finish, "length");
      ASSERT_EQ(int64_t(solo.back().samples.size()), 320 - (70 + 10 * i) + 1);
    }
    EXPECT_EQ(engine.stats().preemptions, 0);
  }
  Engine engine(model, o);
  SubmitError err;
  std::string msg;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 2; ++i) {
    streams.push_back(engine.submit(uncapped(i, seeded, method), &err, &msg));
    ASSERT_TRUE(streams.back()) << msg;
  }
  int64_t preempted = 0;
  for (int i = 0; i < 2; ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    expect_same_bits(drain(*streams[size_t(i)]), solo[size_t(i)]);
    preempted += streams[size_t(i)]->timing().preemptions;
  }
  const EngineStats st = engine.stats();
  EXPECT_GE(st.preemptions, 1);
  EXPECT_EQ(st.preemptions, preempted);
  EXPECT_EQ(st.preempted, 0);
  EXPECT_EQ(st.queued, 0);
  EXPECT_EQ(st.kv_blocks_used, st.cache.blocks);  // only the cache holds blocks now
}

class EnginePreemptTest : public testing::TinyModelSuite<EnginePreemptTest> {};

TEST_F(EnginePreemptTest, PreemptedEqualsSoloPlain) {
  for (bool seeded : {false, true}) preempted_equals_solo(*model_, SpecMethod::kOff, seeded, true);
  preempted_equals_solo(*model_, SpecMethod::kOff, true, false);
}

TEST_F(EnginePreemptTest, PreemptedEqualsSoloDrafted) {
  preempted_equals_solo(*model_, SpecMethod::kLookup, true, true);
  preempted_equals_solo(*model_, SpecMethod::kMtp, true, true);
}

// Fast mode on a quantized checkpoint (MLX 4-bit, with an MTP head).
class EnginePreemptFastTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    auto r = testing::run_qwen35("synth --preset tiny --format mlx --mtp on --quiet --out " + dir_->file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto w = model::load_weights(dir_->file("m"), core::LoadMode::kMmap);
    ASSERT_TRUE(w.ok()) << w.message();
    pool_ = new core::ThreadPool(2);
    model_ = new model::Model(std::move(*w), kernels::cpu_ops(), pool_);
    model_->set_fast_activations(true);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete dir_;
  }
  static inline testing::TempDir* dir_ = nullptr;
  static inline core::ThreadPool* pool_ = nullptr;
  static inline model::Model* model_ = nullptr;
};

TEST_F(EnginePreemptFastTest, PreemptedEqualsSolo) {
  preempted_equals_solo(*model_, SpecMethod::kOff, true, true);
  preempted_equals_solo(*model_, SpecMethod::kMtp, false, true);
}

// A request for prompt logprobs preempted mid-answer computes its prompt again and sends its
// prompt logprobs once.
TEST_F(EnginePreemptTest, PromptLogprobsAreSentOnce) {
  EngineOptions o{2, 320, 8, 64};
  o.kv_blocks = 5;
  o.cache_bytes = int64_t(64) << 20;
  auto req = [](int i) {
    GenerationRequest g = uncapped(i, true, SpecMethod::kOff);
    g.prompt_logprobs = 1;
    return g;
  };
  auto read = [](RequestStream& s, std::vector<SampleResult>* prompt) {
    EngineOut o;
    StreamEvent ev;
    while (s.next(&ev, std::chrono::seconds(120))) {
      if (ev.kind == StreamEvent::kPrompt) prompt->insert(prompt->end(), ev.prompt.begin(), ev.prompt.end());
      if (ev.kind == StreamEvent::kToken) o.samples.push_back(ev.sample);
      if (ev.kind == StreamEvent::kDone) {
        o.finish = ev.finish_reason;
        return o;
      }
    }
    o.finish = "timeout";
    return o;
  };
  std::vector<EngineOut> solo;
  std::vector<std::vector<SampleResult>> solo_prompt(2);
  {
    Engine engine(*model_, o);
    SubmitError err;
    std::string msg;
    for (int i = 0; i < 2; ++i) {
      auto s = engine.submit(req(i), &err, &msg);
      ASSERT_TRUE(s) << msg;
      solo.push_back(read(*s, &solo_prompt[size_t(i)]));
    }
  }
  Engine engine(*model_, o);
  SubmitError err;
  std::string msg;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 2; ++i) streams.push_back(engine.submit(req(i), &err, &msg));
  for (int i = 0; i < 2; ++i) {
    std::vector<SampleResult> prompt;
    expect_same_bits(read(*streams[size_t(i)], &prompt), solo[size_t(i)]);
    ASSERT_EQ(prompt.size(), solo_prompt[size_t(i)].size()) << i;
    EXPECT_EQ(int64_t(prompt.size()), 70 + 10 * i - 1);
    for (size_t k = 0; k < prompt.size(); ++k)
      EXPECT_EQ(std::memcmp(&prompt[k].logprob, &solo_prompt[size_t(i)][k].logprob, 4), 0) << i << "/" << k;
  }
  EXPECT_GE(engine.stats().preemptions, 1);
}

// Issue 46: a conversation's second turn with no output cap, under one slot, resumes the first
// turn's prompt: admission no longer evicts the cache to promise the whole context.
TEST_F(EnginePreemptTest, UncappedSecondTurnResumesTheFirst) {
  EngineOptions o{1, 1024, 4, 64};
  o.cache_bytes = int64_t(64) << 20;
  const std::vector<int32_t> turn1 = tokens(300, 5);
  // The first turn ends on an end-of-sequence id: the third token it generates greedily.
  int32_t eos = -1;
  {
    Engine probe(*model_, EngineOptions{1, 1024, 4, 64});
    GenerationRequest g;
    g.prompt = turn1;
    g.max_tokens = 3;
    g.sampling.temperature = 0;  // greedy: the turn below must reach the same third token
    const EngineOut o3 = testing::run(probe, g);
    ASSERT_EQ(o3.samples.size(), 3u);
    eos = o3.samples[2].token;
  }
  Engine engine(*model_, o);
  GenerationRequest t1;
  t1.prompt = turn1;
  t1.max_tokens = -1;
  t1.sampling.temperature = 0;
  t1.eos_ids = {eos};
  const EngineOut a1 = testing::run(engine, t1);
  ASSERT_EQ(a1.finish, "stop");
  GenerationRequest t2 = t1;
  for (const auto& s : a1.samples) t2.prompt.push_back(s.token);
  t2.prompt.push_back(eos);
  for (int32_t t : tokens(90, 6)) t2.prompt.push_back(t);
  SubmitError err;
  std::string msg;
  auto s2 = engine.submit(t2, &err, &msg);
  ASSERT_TRUE(s2) << msg;
  StreamEvent ev;
  ASSERT_TRUE(s2->next(&ev, std::chrono::seconds(120)));  // admitted and prefilled
  s2->cancel();
  drain(*s2);
  EXPECT_EQ(s2->timing().prompt_reused, 256);  // turn 1's last grid boundary
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.cache.evictions, 0);
  EXPECT_GE(st.cache.hits, 1);
}

// Issue 47: the choices of an n = 16 request count once in the queue. With two slots, a later
// n = 1 request is admitted at the next free slot, ahead of the remaining choices, and every
// answer has its solo bits.
TEST_F(EnginePreemptTest, ChoicesTakeTurnsWithLaterRequests) {
  EngineOptions o{2, 512, 32, 64};
  o.cache_bytes = int64_t(64) << 20;
  const std::vector<int32_t> shared = tokens(80, 7);
  std::vector<GenerationRequest> choices;
  for (int i = 0; i < 16; ++i) {
    GenerationRequest g;
    g.prompt = shared;
    g.max_tokens = 8;
    g.sampling.temperature = 0.8f;
    g.sampling.seed = 100 + uint64_t(i);  // choice i: seed + i, as the server gives them
    g.sampling.logprobs = 1;
    choices.push_back(g);
  }
  GenerationRequest single;
  single.prompt = tokens(40, 8);
  single.max_tokens = 8;
  single.sampling.temperature = 0.8f;
  single.sampling.seed = 5;
  single.sampling.logprobs = 1;
  std::vector<EngineOut> solo;
  EngineOut solo_single;
  {
    Engine engine(*model_, EngineOptions{1, 512, 4, 64});
    for (const auto& g : choices) solo.push_back(testing::run(engine, g));
    solo_single = testing::run(engine, single);
  }
  Engine engine(*model_, o);
  SubmitError err;
  std::string msg;
  auto group = engine.submit_group(choices, &err, &msg);
  ASSERT_EQ(group.size(), 16u) << msg;
  auto later = engine.submit(single, &err, &msg);
  ASSERT_TRUE(later) << msg;
  std::vector<EngineOut> got;
  for (auto& s : group) got.push_back(drain(*s));
  const EngineOut got_single = drain(*later);
  for (size_t i = 0; i < 16; ++i) {
    SCOPED_TRACE("choice " + std::to_string(i));
    expect_same_bits(got[i], solo[i]);
  }
  expect_same_bits(got_single, solo_single);
  // At most the two choices that took both slots before the later request arrived go first.
  const uint64_t at = later->timing().admission;
  ASSERT_GT(at, 0u);
  int before = 0;
  for (auto& s : group) before += s->timing().admission < at ? 1 : 0;
  EXPECT_LE(before, 2) << "the n = 1 request was admitted " << at << "th";
  EXPECT_LE(at, 3u);
}

}  // namespace
}  // namespace qwen35::runtime
