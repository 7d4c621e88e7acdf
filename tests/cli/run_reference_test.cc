// qwen35 run against an independent expectation: the text a plain single-sequence loop on the
// model (forward, sample, feed; no engine) produces for the same prompt, sampling and seed, on a
// synthetic checkpoint. Raw completions, the chat REPL over two turns, and the chat's reasoning
// display in a pipe.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/hf_config.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "runtime/sampler.h"
#include "test_util.h"
#include "tiny_model_suite.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace qwen35 {
namespace {

using Json = nlohmann::ordered_json;
using testing::run_qwen35;
using testing::TempDir;

class RunReferenceTest : public testing::TinyModelSuite<RunReferenceTest> {
 protected:
  static void SetUpTestSuite() {
    TinyModelSuite::SetUpTestSuite();
    if (::testing::Test::HasFatalFailure()) return;
    auto tok = tokenizer::Tokenizer::load(dir_->file("m"));
    ASSERT_TRUE(tok.ok()) << tok.message();
    tok_ = new tokenizer::Tokenizer(std::move(*tok));
    auto g = formats::load_generation_config(dir_->file("m"));
    ASSERT_TRUE(g.ok()) << g.message();
    gen_ = new formats::GenerationConfig(*g);
  }
  static void TearDownTestSuite() {
    delete gen_;
    delete tok_;
    TinyModelSuite::TearDownTestSuite();
  }

  static std::string model_dir() { return dir_->file("m"); }

  // The ids that end a turn, as `run` collects them.
  static std::vector<int32_t> eos(bool chat) {
    std::vector<int32_t> e(gen_->eos_token_ids.begin(), gen_->eos_token_ids.end());
    for (int64_t x : model_->config().eos_token_ids) e.push_back(int32_t(x));
    if (tok_->eos_id() >= 0) e.push_back(tok_->eos_id());
    if (chat) e.push_back(tok_->token_to_id("<|im_end|>"));
    return e;
  }

  // The plain loop: prefill, then sample and feed one token at a time until an end id or n.
  static std::string complete(const std::string& text, uint64_t seed, int n, bool chat) {
    auto ids = tok_->encode(text);
    EXPECT_TRUE(ids.ok());
    runtime::SamplingParams sp = runtime::sampling_defaults(*gen_);
    sp.seed = seed;
    runtime::Sampler sampler(sp, model_->config().vocab);
    sampler.add_prompt(*ids);
    auto st = model_->new_state(4096);
    std::vector<float> logits;
    model::SequenceRows rows{st.get(), *ids, false};
    EXPECT_TRUE(model_->forward(std::span(&rows, 1), &logits).ok());
    tokenizer::StreamDecoder dec(*tok_);
    std::string out;
    const auto end = eos(chat);
    for (int i = 0; i < n; ++i) {
      const int32_t t = sampler.sample(logits.data()).token;
      if (std::find(end.begin(), end.end(), t) != end.end()) break;
      out += dec.push(t);
      rows = {st.get(), std::span<const int32_t>(&t, 1), false};
      EXPECT_TRUE(model_->forward(std::span(&rows, 1), &logits).ok());
    }
    return out + dec.flush();
  }

  static std::string render(const Json& messages, const Json& kwargs) {
    auto t = tmpl::load_chat_template(model_dir());
    EXPECT_TRUE(t.ok()) << t.message();
    auto text = t->render(messages, nullptr, true, kwargs);
    EXPECT_TRUE(text.ok()) << text.message();
    return *text;
  }

  static inline tokenizer::Tokenizer* tok_ = nullptr;
  static inline formats::GenerationConfig* gen_ = nullptr;
};

TEST_F(RunReferenceTest, RawCompletionEqualsThePlainLoop) {
  std::string long_prompt;  // past one 64-token prefill chunk
  for (int i = 0; i < 12; ++i) long_prompt += "In the beginning God created the heaven. ";
  ASSERT_GT(tok_->encode(long_prompt)->size(), 64u);
  for (const std::string& p : {std::string("The quick brown fox"), long_prompt}) {
    for (uint64_t seed : {7u, 11u}) {
      auto r = run_qwen35("run -m " + model_dir() + " -t 2 -q -n 40 --seed " +
                          std::to_string(seed) + " -p '" + p + "'");
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.out, complete(p, seed, 40, false) + "\n") << p.size() << "/" << seed;
    }
  }
}

// Two turns with thinking off: each answer is what the plain loop gives for the prompt the
// template renders from the history so far.
TEST_F(RunReferenceTest, ChatReplEqualsThePlainLoop) {
  const Json kwargs = {{"enable_thinking", false}};
  Json messages = Json::array({{{"role", "user"}, {"content", "first question"}}});
  const std::string a1 = complete(render(messages, kwargs), 2, 12, true);
  messages.push_back({{"role", "assistant"}, {"content", a1}, {"reasoning_content", ""}});
  messages.push_back({{"role", "user"}, {"content", "second question"}});
  const std::string a2 = complete(render(messages, kwargs), 2, 12, true);
  ASSERT_EQ(a1.find("<think>"), std::string::npos);  // the answers are shown as they are
  ASSERT_EQ(a2.find("<think>"), std::string::npos);
  TempDir d;
  testing::write_file(d.file("in"), "first question\nsecond question\n");
  auto r = run_qwen35("run -m " + model_dir() + " -t 2 -q -n 12 --seed 2 --no-think < " +
                      d.file("in"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "> " + a1 + "> " + a2 + "> \n");
}

// Into a pipe, reasoning is enclosed in <think>\n … </think>\n; --hide-reasoning leaves it out.
TEST_F(RunReferenceTest, ChatReasoningIsTaggedInAPipe) {
  const Json messages = Json::array({{{"role", "user"}, {"content", "hi"}}});
  const std::string prompt = render(messages, Json::object());
  ASSERT_EQ(prompt.substr(prompt.size() - 8), "<think>\n");
  const std::string a = complete(prompt, 3, 12, true);
  ASSERT_EQ(a.find("think>"), std::string::npos);  // the tiny model never closes its reasoning
  ASSERT_NE(a.find_first_not_of(" \n"), std::string::npos);
  const std::string base = "run -m " + model_dir() + " -t 2 -q -n 12 --seed 3 --chat -p hi";
  auto r = run_qwen35(base);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "<think>\n" + a + (a.back() == '\n' ? "" : "\n") + "</think>\n\n");
  r = run_qwen35(base + " --hide-reasoning");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "\n");
  r = run_qwen35("run -m " + model_dir() + " -p hi --hide-reasoning");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--hide-reasoning"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace qwen35
