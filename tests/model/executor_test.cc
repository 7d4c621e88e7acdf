// The executor seam (model/executor.h): the forward issues every op and copy to its executor and
// reads no tensor on the host before finish(). Checked with an executor that runs nothing until
// finish() (as a device's records a step and submits it then): every op is queued, with the
// metadata it was given (token ids, rotary positions) copied when it is issued and its tensors
// read when it runs. A forward that read an op's output early, or let a buffer move under a
// queued op, would see other values; so each case must give the bits of the CPU executor run
// op by op: a batch of a prompt crossing the 64-grid with a state capture, a short prompt and
// decode rows; a verification and a partial commit; MTP drafts; fast mode.
#include "model/executor.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

using qwen35::testing::fixture_models_dir;
using qwen35::testing::source_dir;

// Queues every op of `inner` until finish().
class DeferredExecutor final : public Executor {
 public:
  explicit DeferredExecutor(std::unique_ptr<Executor> inner) : in_(std::move(inner)) {}
  int64_t ops_run = 0, finishes = 0;

  void embed(const kernels::Matrix& t, const int32_t* tokens, int64_t n, float* out) override {
    std::vector<int32_t> ids(tokens, tokens + n);  // metadata: read when issued
    q_.push_back([=, this, ids = std::move(ids)] { in_->embed(t, ids.data(), n, out); });
  }
  void rms_norm(const float* x, int64_t n, int64_t d, const float* w, float eps,
                float* out) override {
    q_.push_back([=, this] { in_->rms_norm(x, n, d, w, eps, out); });
  }
  void gated_rms_norm(float* x, const float* z, int64_t n, int64_t d, const float* w,
                      float eps) override {
    q_.push_back([=, this] { in_->gated_rms_norm(x, z, n, d, w, eps); });
  }
  void add_rows(const float* x, const float* s, int64_t n, int64_t d, float* y) override {
    q_.push_back([=, this] { in_->add_rows(x, s, n, d, y); });
  }
  void matmul(const float* x, int64_t n, const kernels::Matrix& w, float* y, bool exact) override {
    q_.push_back([=, this] { in_->matmul(x, n, w, y, exact); });
  }
  void matmul_many(const float* x, int64_t n, const kernels::Matrix* const* ws, float* const* ys,
                   int count) override {
    std::vector<const kernels::Matrix*> w(ws, ws + count);
    std::vector<float*> y(ys, ys + count);
    q_.push_back([=, this] { in_->matmul_many(x, n, w.data(), y.data(), count); });
  }
  void swiglu(const float* g, const float* u, int64_t n, int64_t d, int64_t stride,
              float* out) override {
    q_.push_back([=, this] { in_->swiglu(g, u, n, d, stride, out); });
  }
  void attention(const kernels::Ops::AttentionParams& p, const float* qg, const float* k,
                 const float* v, int64_t n, int64_t pos0, const kernels::KvView& cache,
                 float* out) override {
    std::vector<int64_t> pos;
    if (p.positions) pos.assign(p.positions, p.positions + 3 * n);  // metadata: read when issued
    q_.push_back([=, this, pos = std::move(pos)] {
      kernels::Ops::AttentionParams ap = p;
      ap.positions = pos.empty() ? nullptr : pos.data();
      in_->attention(ap, qg, k, v, n, pos0, cache, out);
    });
  }
  void conv1d_silu(const float* x, int64_t n, int64_t c, const float* w, int64_t kernel,
                   float* state, float* out) override {
    q_.push_back([=, this] { in_->conv1d_silu(x, n, c, w, kernel, state, out); });
  }
  void gated_delta(const kernels::Ops::DeltaParams& p, const float* qkv, const float* a,
                   const float* b, int64_t n, bool chunked, float* state, float* out) override {
    q_.push_back([=, this] { in_->gated_delta(p, qkv, a, b, n, chunked, state, out); });
  }
  void router_topk(const float* lg, int64_t n, int64_t e, int64_t k, bool renorm, int32_t* idx,
                   float* weight) override {
    q_.push_back([=, this] { in_->router_topk(lg, n, e, k, renorm, idx, weight); });
  }
  void moe_combine(const float* eo, const float* w, int64_t n, int64_t k, int64_t d,
                   float* y) override {
    q_.push_back([=, this] { in_->moe_combine(eo, w, n, k, d, y); });
  }
  void moe_experts(const float* x, int64_t n, const int32_t* idx, int64_t k,
                   std::span<const MlpWeights> experts, int64_t inter, int64_t hidden,
                   float* eo) override {
    q_.push_back([=, this] { in_->moe_experts(x, n, idx, k, experts, inter, hidden, eo); });
  }
  void sigmoid(float* x, int64_t n) override {
    q_.push_back([=, this] { in_->sigmoid(x, n); });
  }
  void layer_norm(const float* x, int64_t n, int64_t d, const float* w, const float* b, float eps,
                  float* out) override {
    q_.push_back([=, this] { in_->layer_norm(x, n, d, w, b, eps, out); });
  }
  void gelu(float* x, int64_t n, int64_t d, bool tanh_form) override {
    q_.push_back([=, this] { in_->gelu(x, n, d, tanh_form); });
  }
  void add_bias(float* y, int64_t n, int64_t d, const float* bias) override {
    q_.push_back([=, this] { in_->add_bias(y, n, d, bias); });
  }
  size_t vision_kv_floats(const kernels::Ops::VisionAttentionParams& p, int64_t n) const override {
    return in_->vision_kv_floats(p, n);
  }
  void vision_kv_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv, int64_t n,
                      const float* cos, const float* sin, int64_t r0, int64_t r1,
                      float* kv) override {
    q_.push_back([=, this] { in_->vision_kv_rows(p, qkv, n, cos, sin, r0, r1, kv); });
  }
  void vision_attend_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv, int64_t n,
                          const float* cos, const float* sin, const float* kv, int64_t q0,
                          int64_t q1, float* out) override {
    q_.push_back([=, this] { in_->vision_attend_rows(p, qkv, n, cos, sin, kv, q0, q1, out); });
  }
  void copy_rows(const float* src, int64_t ss, float* dst, int64_t ds, int64_t rows,
                 int64_t width) override {
    q_.push_back([=, this] { in_->copy_rows(src, ss, dst, ds, rows, width); });
  }
  core::Status finish() override {
    for (auto& op : q_) op();
    ops_run += int64_t(q_.size());
    q_.clear();
    ++finishes;
    return in_->finish();
  }

 private:
  std::unique_ptr<Executor> in_;
  std::vector<std::function<void()>> q_;
};

std::string checkpoint(const std::string& name) {
  return name == "bundled" ? source_dir() + "/models/qwen35-tiny-kjv"
                           : fixture_models_dir() + "/" + name + "/ckpt";
}

// (fixture, fast)
class ExecutorTest : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  std::unique_ptr<Model> load(core::ThreadPool* pool) {
    auto w = load_weights(checkpoint(std::get<0>(GetParam())));
    EXPECT_TRUE(w.ok()) << w.message();
    if (!w.ok()) return nullptr;
    auto m = std::make_unique<Model>(std::move(*w), kernels::cpu_ops(), pool);
    m->set_fast_activations(std::get<1>(GetParam()));
    if (mtp_unusable(m->weights()).empty()) {
      EXPECT_TRUE(m->enable_mtp().ok());
    }
    return m;
  }
  core::ThreadPool pool_a_{2}, pool_b_{2};
};

// Runs the same steps on a model with the CPU executor and one with the deferred executor and
// returns what each step gave, in order.
struct Trace {
  std::vector<std::vector<float>> logits, captures;
  std::vector<std::vector<int32_t>> drafts;
};

Trace run_steps(Model& m) {
  Trace t;
  const int64_t V = m.config().vocab;
  auto ids = [&](int64_t n, int64_t salt) {
    std::vector<int32_t> v;
    for (int64_t i = 0; i < n; ++i) v.push_back(int32_t((i * 7919 + salt * 104729 + 13) % V));
    return v;
  };
  auto a = m.new_state(256), b = m.new_state(256);
  auto forward = [&](std::vector<SequenceRows> rows) {
    std::vector<float> lg;
    auto st = m.forward(rows, &lg);
    EXPECT_TRUE(st.ok()) << st.message();
    t.logits.push_back(std::move(lg));
  };
  // A prompt crossing the grid with a capture at 64, beside a short prompt.
  const std::vector<int32_t> pa = ids(100, 1), pb = ids(5, 2);
  std::vector<float> cap(a->recurrent_bytes() / 4, -1.0f);
  const StateCapture caps[] = {{64, cap.data()}};
  SequenceRows ra{a.get(), pa, true};
  ra.captures = caps;
  forward({ra, {b.get(), pb, true}});
  t.captures.push_back(cap);
  // Decode rows beside a verification of 3 rows, then a partial commit.
  const std::vector<int32_t> da = ids(1, 3), vb = ids(3, 4);
  SequenceRows rv{b.get(), vb, true};
  rv.verify = true;
  forward({{a.get(), da, false}, rv});
  m.commit(b.get(), 2);
  const std::vector<int32_t> db = ids(1, 5);
  forward({{a.get(), da, false}, {b.get(), db, false}});
  if (m.mtp_enabled()) {
    std::vector<int32_t> xa, xb;
    std::vector<float> lg;
    const DraftRequest reqs[] = {{a.get(), 7, 3, &xa}, {b.get(), 9, 2, &xb}};
    EXPECT_TRUE(m.draft(reqs, &lg).ok());
    t.logits.push_back(std::move(lg));
    t.drafts.push_back(xa);
    t.drafts.push_back(xb);
  }
  std::vector<float> saved(a->recurrent_bytes() / 4);
  a->save_recurrent(saved.data());
  t.captures.push_back(saved);
  return t;
}

TEST_P(ExecutorTest, DeferredRunGivesTheBitsOfTheCpuExecutor) {
  auto direct = load(&pool_a_), deferred = load(&pool_b_);
  ASSERT_TRUE(direct && deferred);
  auto wrapper = std::make_unique<DeferredExecutor>(deferred->cpu_executor());
  DeferredExecutor* seen = wrapper.get();
  EXPECT_NE(deferred->replace_executor(std::move(wrapper)), nullptr);  // the CPU's, by default

  const Trace want = run_steps(*direct), got = run_steps(*deferred);
  ASSERT_EQ(got.logits.size(), want.logits.size());
  for (size_t i = 0; i < want.logits.size(); ++i)
    EXPECT_EQ(got.logits[i], want.logits[i]) << "step " << i;  // bit for bit (no NaN in these)
  EXPECT_EQ(got.captures, want.captures);
  EXPECT_EQ(got.drafts, want.drafts);
  EXPECT_GT(seen->ops_run, 0);
  // One finish a forward call and a commit, one a draft position.
  EXPECT_GE(seen->finishes, 4);
}

// The vision tower through the seam (model/vision.h): with its ops queued until finish(), an
// image encoded whole and in pieces (each advance_image its own finish) has the CPU executor's
// bits, so the tower reads no op's output on the host before finish().
TEST(ExecutorVision, DeferredTowerGivesTheBitsOfTheCpuExecutor) {
  const std::string ckpt = source_dir() + "/tests/fixtures/vision/prompt_tiny/ckpt";
  auto wa = load_weights(ckpt), wb = load_weights(ckpt);
  ASSERT_TRUE(wa.ok() && wb.ok()) << wa.message();
  core::ThreadPool pool(2);
  Model direct(std::move(*wa), kernels::cpu_ops(), &pool), deferred(std::move(*wb), kernels::cpu_ops(), &pool);
  auto wrapper = std::make_unique<DeferredExecutor>(deferred.cpu_executor());
  DeferredExecutor* seen = wrapper.get();
  deferred.replace_executor(std::move(wrapper));
  const VisionConfig& c = direct.weights().vision->config;
  const int64_t t = 2, h = 6, w = 8, tokens = t * (h / c.merge) * (w / c.merge);
  std::vector<float> rows(size_t(t * h * w * c.patch_dim()));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = float(int64_t(i * 7919 % 2001) - 1000) / 1000.0f;
  std::vector<float> want(size_t(tokens * c.out_hidden)), got(want.size(), -1.0f), pieces(want.size(), -1.0f);
  ASSERT_TRUE(direct.encode_image(rows.data(), t, h, w, want.data()).ok());
  ASSERT_TRUE(deferred.encode_image(rows.data(), t, h, w, got.data()).ok());
  EXPECT_EQ(got, want);
  VisionRun run;
  ASSERT_TRUE(deferred.begin_image(rows.data(), t, h, w, pieces.data(), &run).ok());
  const int64_t finishes = seen->finishes;
  for (bool done = false; !done;) {
    const auto d = deferred.advance_image(&run, deferred.plan_image(run, 5e5, true).end);
    ASSERT_TRUE(d.ok()) << d.message();
    done = *d;
  }
  EXPECT_EQ(pieces, want);
  EXPECT_GT(seen->finishes - finishes, 10);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExecutorTest,
                         ::testing::Values(std::make_tuple("bundled", false),
                                           std::make_tuple("moe_bf16", false),
                                           std::make_tuple("qwen3_next_e8_top2", false),
                                           std::make_tuple("dense_q4_untied", true)),
                         [](const auto& info) {
                           return std::get<0>(info.param) +
                                  (std::get<1>(info.param) ? "_fast" : "_exact");
                         });

}  // namespace
}  // namespace qwen35::model
