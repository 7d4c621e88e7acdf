// A test suite over the files of one random tiny checkpoint (`qwen35 synth --preset tiny`),
// written once per suite for tests that run the binary on it (a server, `run`). Header only;
// tiny_model_suite.h also loads the model. `Suite` is the deriving class (each suite gets its own
// checkpoint).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "test_util.h"

namespace qwen35::testing {

template <class Suite>
class TinyCheckpointSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_qwen35("synth --preset tiny --quiet --out " + dir_->file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string model() { return dir_->file("m"); }
  static inline TempDir* dir_ = nullptr;
};

}  // namespace qwen35::testing
