// A test suite over one random tiny checkpoint (`qwen35 synth --preset tiny`), written and
// loaded once per suite and shared by its tests. Header only: test_util does not link the model.
// `Suite` is the deriving class (each suite gets its own model).
#pragma once

#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::testing {

template <class Suite>
class TinyModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_qwen35("synth --preset tiny --quiet --out " + dir_->file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto w = model::load_weights(dir_->file("m"), core::LoadMode::kMmap);
    ASSERT_TRUE(w.ok()) << w.message();
    pool_ = new core::ThreadPool(2);
    model_ = new model::Model(std::move(*w), kernels::cpu_ops(), pool_);
  }
  static void TearDownTestSuite() {
    delete model_;
    delete pool_;
    delete dir_;
  }
  static inline TempDir* dir_ = nullptr;
  static inline core::ThreadPool* pool_ = nullptr;
  static inline model::Model* model_ = nullptr;
};

}  // namespace qwen35::testing
