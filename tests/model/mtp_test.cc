// The MTP head (model/mtp.cc) against the float64 reference (tools/fixtures/make_mtp_fixtures.py,
// mtp_logits.npy) at every position, dense and MoE, on the fixtures with an MTP head and on the
// bundled model and a GGUF file: its cache filled one token at a time, by prompt chunks on the grid and by
// whole prompts. Then what drafting relies on: the cache after a verification and any commit
// is the one plain decoding leaves (the next draft has the same bits); drafts of a batch equal
// drafts alone; the cache is shared through the KV blocks of a prefix; bad requests fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/kv_pool.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using qwen35::testing::fixture_models_dir;
using qwen35::testing::source_dir;

constexpr float kTol = 1e-3f;

struct Case {
  std::string ckpt, tokens_json, logits_npy;
};

Case case_of(const std::string& name) {
  if (name == "bundled")
    return {source_dir() + "/models/qwen35-tiny-kjv", source_dir() + "/tests/fixtures/mtp_bundled_tokens.json",
            source_dir() + "/tests/fixtures/mtp_bundled_logits.npy"};
  if (name == "gguf_moe_f32_tied") {  // the MTP block of a GGUF file (blk.{n_layers}.nextn.*)
    const std::string g = source_dir() + "/tests/fixtures/gguf/moe_f32_tied";
    return {g + ".gguf", g + ".json", g + ".mtp_logits.npy"};
  }
  const std::string d = fixture_models_dir() + "/" + name;
  return {d + "/ckpt", d + "/golden.json", d + "/mtp_logits.npy"};
}

class MtpTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const Case c = case_of(GetParam());
    auto w = load_weights(c.ckpt);
    ASSERT_TRUE(w.ok()) << w.message();
    model_ = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), &pool_);
    ASSERT_TRUE(model_->enable_mtp().ok());
    tokens_ = nlohmann::json::parse(std::ifstream(c.tokens_json))["tokens"].get<std::vector<int32_t>>();
    ref_ = *formats::read_npy(c.logits_npy);
    vocab_ = model_->config().vocab;
    ASSERT_EQ(ref_.data.size(), (tokens_.size() - 1) * size_t(vocab_));
  }
  void feed(SequenceState& s, std::span<const int32_t> t) {
    std::vector<float> lg;
    SequenceRows r{&s, t, false};
    auto st = model_->forward(std::span<const SequenceRows>(&r, 1), &lg);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  // The head's logits of row pos-1 (its first draft) and its drafts.
  std::vector<float> draft(SequenceState& s, int32_t token, int64_t k = 1, std::vector<int32_t>* out = nullptr) {
    std::vector<int32_t> d;
    std::vector<float> lg;
    const DraftRequest r{&s, token, k, out ? out : &d};
    auto st = model_->draft(std::span<const DraftRequest>(&r, 1), &lg);
    EXPECT_TRUE(st.ok()) << st.message();
    return lg;
  }
  void expect_row(const std::vector<float>& got, size_t p, const std::string& what) {
    ASSERT_GE(got.size(), size_t(vocab_));
    const float* r = ref_.data.data() + p * size_t(vocab_);
    float worst = 0;
    for (int64_t v = 0; v < vocab_; ++v) worst = std::max(worst, std::fabs(got[size_t(v)] - r[v]));
    EXPECT_LE(worst, kTol) << what << ", row " << p;
    EXPECT_EQ(std::max_element(got.begin(), got.begin() + vocab_) - got.begin(), std::max_element(r, r + vocab_) - r)
        << what << ": argmax at row " << p;
  }
  core::ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  std::vector<int32_t> tokens_;
  formats::NpyArray ref_;
  int64_t vocab_ = 0;
};

TEST_P(MtpTest, MatchesReferenceOneTokenAtATime) {
  auto s = model_->new_state(int64_t(tokens_.size()) + 8);
  feed(*s, std::span<const int32_t>(tokens_).first(1));
  for (size_t p = 1; p < tokens_.size(); ++p) {
    expect_row(draft(*s, tokens_[p]), p - 1, "decode");
    feed(*s, std::span<const int32_t>(tokens_).subspan(p, 1));
  }
}

TEST_P(MtpTest, MatchesReferenceAfterPrefills) {
  const size_t T = tokens_.size();
  for (size_t split : {size_t(1), size_t(2), size_t(20), T / 2, T - 1}) {
    // Grid chunks (as the engine feeds prompts), then the whole prefix in one call.
    for (bool chunked : {true, false}) {
      auto s = model_->new_state(int64_t(T) + 8);
      for (size_t p = 0; p < split;) {
        const size_t len = chunked ? std::min<size_t>(64 - p % 64, split - p) : split;
        feed(*s, std::span<const int32_t>(tokens_).subspan(p, len));
        p += len;
      }
      expect_row(draft(*s, tokens_[split]), split - 1, (chunked ? "chunks to " : "prefill of ") + std::to_string(split));
    }
  }
}

// Verify k+1 rows, keep any number of them: the next draft is the one plain decoding of the kept
// rows gives, bit for bit (the head's cache rows past the kept ones are never read).
TEST_P(MtpTest, CacheAfterCommitIsPlainDecodings) {
  const size_t n0 = 9;
  for (int64_t keep = 1; keep <= 4; ++keep) {
    auto spec = model_->new_state(64), plain = model_->new_state(64);
    feed(*spec, std::span<const int32_t>(tokens_).first(n0));
    feed(*plain, std::span<const int32_t>(tokens_).first(n0));
    std::vector<int32_t> drafts;
    draft(*spec, tokens_[n0], 3, &drafts);
    ASSERT_EQ(drafts.size(), 3u);
    // Rows: the next token, then the true continuation up to `keep`, then the drafts (whatever
    // they are): the rows past `keep` are rejected.
    std::vector<int32_t> rows(tokens_.begin() + long(n0), tokens_.begin() + long(n0) + keep);
    for (int64_t i = keep; i < 4; ++i) rows.push_back(drafts[size_t(i - 1)]);
    std::vector<float> lg;
    SequenceRows v{spec.get(), rows, false, true};
    ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&v, 1), &lg).ok());
    model_->commit(spec.get(), keep);
    for (int64_t i = 0; i < keep; ++i) feed(*plain, std::span<const int32_t>(tokens_).subspan(n0 + size_t(i), 1));
    ASSERT_EQ(spec->pos(), plain->pos());
    const int32_t next = tokens_[n0 + size_t(keep)];
    std::vector<int32_t> ds, dp;
    EXPECT_EQ(draft(*spec, next, 3, &ds), draft(*plain, next, 3, &dp)) << "kept " << keep;
    EXPECT_EQ(ds, dp);
    expect_row(draft(*spec, next), n0 + size_t(keep) - 1, "after commit");
  }
}

// Drafts of several sequences in one call are each sequence's drafts alone; a sequence resumed
// from another's KV blocks (a prefix on the grid) drafts what the original does.
TEST_P(MtpTest, BatchedAndSharedPrefixDraftsAreAlone) {
  if (tokens_.size() < 70) GTEST_SKIP() << "needs a prompt past one 64-token block";
  auto pool = model_->new_pool(16, true);
  auto a = model_->new_state(128, pool.get()), b = model_->new_state(128, pool.get()),
       c = model_->new_state(128, pool.get());
  feed(*a, std::span<const int32_t>(tokens_).first(64));
  feed(*a, std::span<const int32_t>(tokens_).subspan(64, 3));
  feed(*b, std::span<const int32_t>(tokens_).first(20));
  // c resumes from a's first block and a's state at 64 (saved below from a replay).
  auto a64 = model_->new_state(128, pool.get());
  feed(*a64, std::span<const int32_t>(tokens_).first(64));
  std::vector<float> snap(a64->recurrent_bytes() / 4);
  a64->save_recurrent(snap.data());
  c->adopt(std::span<const int32_t>(a64->blocks()).first(1), 64);
  c->load_recurrent(snap.data());
  a64.reset();
  feed(*c, std::span<const int32_t>(tokens_).subspan(64, 3));

  std::vector<int32_t> da, db, dc, alone_a, alone_b;
  std::vector<float> lg_batch, lg_a, lg_b;
  const DraftRequest both[] = {{a.get(), tokens_[67], 3, &da}, {b.get(), tokens_[20], 2, &db}};
  {
    const auto st = model_->draft(both, &lg_batch);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  const DraftRequest ra{a.get(), tokens_[67], 3, &alone_a}, rb{b.get(), tokens_[20], 2, &alone_b};
  ASSERT_TRUE(model_->draft(std::span<const DraftRequest>(&ra, 1), &lg_a).ok());
  ASSERT_TRUE(model_->draft(std::span<const DraftRequest>(&rb, 1), &lg_b).ok());
  EXPECT_EQ(da, alone_a);
  EXPECT_EQ(db, alone_b);
  ASSERT_EQ(lg_batch.size(), size_t(5 * vocab_));
  // Position-major: (a, b) at depth 0 and 1, then a alone at depth 2.
  auto rows = [&](const std::vector<float>& v, size_t i) {
    return std::vector<float>(v.begin() + long(i) * vocab_, v.begin() + long(i + 1) * vocab_);
  };
  EXPECT_EQ(rows(lg_batch, 0), rows(lg_a, 0));
  EXPECT_EQ(rows(lg_batch, 1), rows(lg_b, 0));
  EXPECT_EQ(rows(lg_batch, 2), rows(lg_a, 1));
  EXPECT_EQ(rows(lg_batch, 3), rows(lg_b, 1));
  EXPECT_EQ(rows(lg_batch, 4), rows(lg_a, 2));
  const DraftRequest rc{c.get(), tokens_[67], 3, &dc};
  std::vector<float> lg_c;
  ASSERT_TRUE(model_->draft(std::span<const DraftRequest>(&rc, 1), &lg_c).ok());
  EXPECT_EQ(dc, alone_a);
  EXPECT_EQ(lg_c, lg_a);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MtpTest,
                         ::testing::Values("dense_bf16_tied", "moe_bf16", "extra_hf_gqa4_hd64",
                                           "extra_moe_hf_e4_top1", "bundled", "gguf_moe_f32_tied"));

// State copies inside prompt chunks (StateCapture, the prefix cache's provisional snapshots)
// hold the bits of a state fed exactly up to that grid line: the conv and recurrent state of
// every Gated DeltaNet layer and the MTP head's hidden row. A copy off the grid or outside the
// chunk, or in a chunk that does not start on the grid, is refused.
TEST_P(MtpTest, StateCopiesInsideChunksAreTheStatesAtTheirLines) {
  std::vector<int32_t> ids;
  for (size_t i = 0; ids.size() < 200; ++i) ids.push_back(tokens_[i % tokens_.size()]);
  auto s = model_->new_state(256);
  const size_t floats = s->recurrent_bytes() / 4;
  const int64_t cuts[] = {0, 64, 128, 200};  // prompt chunks start on the grid
  const std::vector<int64_t> lines[] = {{}, {}, {192}};
  std::map<int64_t, std::vector<float>> got;
  for (int c = 0; c < 3; ++c) {
    if (c == 0) {  // one chunk of 200 rows with two copies, on a state of its own
      auto one = model_->new_state(256);
      std::vector<StateCapture> caps;
      for (int64_t line : {64, 128}) {
        got[line].assign(floats, -1.0f);
        caps.push_back({line, got[line].data()});
      }
      std::vector<float> lg;
      SequenceRows r{one.get(), std::span<const int32_t>(ids)};
      r.captures = caps;
      ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&r, 1), &lg).ok());
    }
    std::vector<StateCapture> caps;
    for (int64_t line : lines[c]) {
      got[line].assign(floats, -1.0f);
      caps.push_back({line, got[line].data()});
    }
    std::vector<float> lg;
    SequenceRows r{s.get(), std::span<const int32_t>(ids).subspan(size_t(cuts[c]), size_t(cuts[c + 1] - cuts[c]))};
    r.captures = caps;
    ASSERT_TRUE(model_->forward(std::span<const SequenceRows>(&r, 1), &lg).ok());
  }
  for (const auto& [line, copy] : got) {
    auto ref = model_->new_state(256);
    feed(*ref, std::span<const int32_t>(ids).first(size_t(line)));
    std::vector<float> want(floats);
    ref->save_recurrent(want.data());
    EXPECT_EQ(std::memcmp(copy.data(), want.data(), floats * 4), 0) << "line " << line;
  }
  auto t = model_->new_state(256);
  std::vector<float> buf(floats), lg;
  for (int64_t bad : {int64_t(0), int64_t(32), int64_t(128), int64_t(100)}) {
    StateCapture cap{bad, buf.data()};
    SequenceRows r{t.get(), std::span<const int32_t>(ids).first(128)};
    r.captures = std::span<const StateCapture>(&cap, 1);
    EXPECT_FALSE(model_->forward(std::span<const SequenceRows>(&r, 1), &lg).ok()) << bad;
  }
  feed(*t, std::span<const int32_t>(ids).first(10));  // then rows from 10: off the grid
  StateCapture cap{64, buf.data()};
  SequenceRows r{t.get(), std::span<const int32_t>(ids).subspan(10, 100)};
  r.captures = std::span<const StateCapture>(&cap, 1);
  EXPECT_FALSE(model_->forward(std::span<const SequenceRows>(&r, 1), &lg).ok());
}

// A draft vocabulary of the first N ids scores those N rows of the head with the bits of the
// whole head, and drafts the best of them.
TEST_P(MtpTest, DraftVocabularyIsAPrefixOfTheHead) {
  const int64_t n = vocab_ / 3;
  auto full = model_->new_state(64), part = model_->new_state(64);
  feed(*full, std::span<const int32_t>(tokens_).first(12));
  feed(*part, std::span<const int32_t>(tokens_).first(12));
  std::vector<int32_t> df, dp;
  const auto lf = draft(*full, tokens_[12], 1, &df);
  model_->set_draft_vocab(n);
  EXPECT_EQ(model_->draft_vocab(), n);
  const auto lp = draft(*part, tokens_[12], 1, &dp);
  model_->set_draft_vocab(0);
  ASSERT_EQ(lp.size(), size_t(n));
  EXPECT_TRUE(std::equal(lp.begin(), lp.end(), lf.begin()));
  ASSERT_EQ(dp.size(), 1u);
  EXPECT_EQ(dp[0], std::max_element(lf.begin(), lf.begin() + n) - lf.begin());
  EXPECT_EQ(df[0], std::max_element(lf.begin(), lf.end()) - lf.begin());
}

TEST(Mtp, CheckpointsWithoutAHeadRefuseClearly) {
  core::ThreadPool pool(1);
  auto w = load_weights(fixture_models_dir() + "/dense_q4_untied/ckpt");
  ASSERT_TRUE(w.ok());
  Model m(std::move(*w), kernels::cpu_ops(), &pool);
  const auto st = m.enable_mtp();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("no MTP head"), std::string::npos) << st.message();
  EXPECT_FALSE(m.mtp_enabled());
  auto s = m.new_state(16);
  EXPECT_FALSE(s->has_mtp());
  std::vector<int32_t> out;
  const DraftRequest r{s.get(), 1, 2, &out};
  EXPECT_FALSE(m.draft(std::span<const DraftRequest>(&r, 1)).ok());
}

TEST(Mtp, BadDraftRequestsFailWithoutHarm) {
  core::ThreadPool pool(1);
  auto w = load_weights(fixture_models_dir() + "/dense_bf16_tied/ckpt");
  ASSERT_TRUE(w.ok());
  Model m(std::move(*w), kernels::cpu_ops(), &pool);
  ASSERT_TRUE(m.enable_mtp().ok());
  auto s = m.new_state(8);
  std::vector<int32_t> out{42};
  const DraftRequest fresh{s.get(), 1, 3, &out};  // nothing fed yet: no hidden state to draft from
  ASSERT_TRUE(m.draft(std::span<const DraftRequest>(&fresh, 1)).ok());
  EXPECT_TRUE(out.empty());
  const DraftRequest bad_token{s.get(), int32_t(m.config().vocab), 1, &out};
  EXPECT_FALSE(m.draft(std::span<const DraftRequest>(&bad_token, 1)).ok());
  const DraftRequest bad_k{s.get(), 1, kMaxVerifyRows, &out};
  EXPECT_FALSE(m.draft(std::span<const DraftRequest>(&bad_k, 1)).ok());
  // Near the end of the capacity the drafts stop there.
  const std::vector<int32_t> t{1, 2, 3, 4, 5, 6};
  std::vector<float> lg;
  SequenceRows r{s.get(), t, false};
  ASSERT_TRUE(m.forward(std::span<const SequenceRows>(&r, 1), &lg).ok());
  const DraftRequest tail{s.get(), 7, 5, &out};
  ASSERT_TRUE(m.draft(std::span<const DraftRequest>(&tail, 1)).ok());
  EXPECT_EQ(out.size(), 2u);  // cache positions 6 and 7 of a capacity of 8
}

}  // namespace
}  // namespace qwen35::model
