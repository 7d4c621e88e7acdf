// Qwen3 and Qwen3-MoE at a real size's width (Qwen3-0.6B's, HF bf16; Qwen3-30B-A3B's, MLX
// 4-bit): the checkpoints of tests/fixtures/qwen3_width/<case>/case.json
// are written again by `qwen35 synth` with the case's arguments (the same bytes: the weights'
// sha256 is checked), and the engine's logits are compared with the float64 oracle's
// (tools/fixtures/qwen3_ref.py through make_qwen3_synth_fixtures.py): every position within 1e-3
// with the same argmax, in one prefill and token by token (the scalar reference backend too),
// and the oracle's greedy continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "core/sha256.h"
#include "core/thread_pool.h"
#include "formats/npy.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/weights.h"
#include "test_util.h"

namespace qwen35::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr float kTol = 1e-3f;

// Read in pieces: the 30B-A3B case's file is 360 MB.
std::string hex_sha256(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  core::Sha256 sha;
  std::vector<char> buf(1 << 20);
  while (f.read(buf.data(), std::streamsize(buf.size())) || f.gcount() > 0)
    sha.update(std::string_view(buf.data(), size_t(f.gcount())));
  const auto h = sha.finish();
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : h) s += {kHex[b >> 4], kHex[b & 15]};
  return s;
}

// Logits of every position of `toks`, `step` tokens per forward call.
std::vector<float> run(Model& m, const std::vector<int32_t>& toks, size_t step) {
  auto st = m.new_state(int64_t(toks.size()) + 8);
  std::vector<float> all, part;
  for (size_t p = 0; p < toks.size(); p += step) {
    const size_t len = std::min(step, toks.size() - p);
    SequenceRows r{st.get(), std::span<const int32_t>(toks.data() + p, len), true};
    const auto s = m.forward(std::span<const SequenceRows>(&r, 1), &part);
    EXPECT_TRUE(s.ok()) << s.message();
    all.insert(all.end(), part.begin(), part.end());
  }
  return all;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want, int64_t vocab,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float worst = 0;
  for (size_t t = 0; t * size_t(vocab) < got.size(); ++t) {
    const float* g = got.data() + t * size_t(vocab);
    const float* w = want.data() + t * size_t(vocab);
    for (int64_t v = 0; v < vocab; ++v) worst = std::max(worst, std::fabs(g[v] - w[v]));
    EXPECT_EQ(std::max_element(g, g + vocab) - g, std::max_element(w, w + vocab) - w)
        << what << ": argmax at position " << t;
  }
  EXPECT_LE(worst, kTol) << what;
}

TEST(Qwen3Width, LogitsMatchTheFloat64Oracle) {
  const std::string root = testing::source_dir() + "/tests/fixtures/qwen3_width";
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    const json c = json::parse(std::ifstream(entry.path() / "case.json"));
    testing::TempDir dir;
    const auto r = testing::run_qwen35(c["synth"].get<std::string>() + " --out " + dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(hex_sha256(dir.file("model.safetensors")), c["weights_sha256"])
        << "synth no longer writes the bytes the reference was computed on: run "
           "tools/fixtures/make_qwen3_synth_fixtures.py again";
    auto ref = formats::read_npy((entry.path() / "logits_all.npy").string());
    ASSERT_TRUE(ref.ok()) << ref.message();
    const auto tokens = c["tokens"].get<std::vector<int32_t>>();
    core::ThreadPool pool(2);
    for (const kernels::Ops* ops : {&kernels::cpu_ops(), &kernels::ref_ops()}) {
      auto w = load_weights(dir.path());
      ASSERT_TRUE(w.ok()) << w.message();
      Model m(std::move(*w), *ops, &pool);
      ASSERT_EQ(m.config().hidden, c["hidden"].get<int64_t>());
      const int64_t V = m.config().vocab;
      expect_near(run(m, tokens, tokens.size()), ref->data, V, ops->name() + std::string(" prefill"));
      if (ops != &kernels::cpu_ops()) continue;  // the scalar backend: one prefill is enough
      expect_near(run(m, tokens, 1), ref->data, V, "token by token");
      // The oracle's greedy continuation, decoded one token at a time.
      auto st = m.new_state(int64_t(tokens.size()) + 16);
      std::vector<float> out;
      SequenceRows rows{st.get(), std::span<const int32_t>(tokens), false};
      ASSERT_TRUE(m.forward(std::span<const SequenceRows>(&rows, 1), &out).ok());
      std::vector<int32_t> cont;
      for (size_t k = 0; k < c["greedy_continuation"].size(); ++k) {
        cont.push_back(int32_t(std::max_element(out.end() - V, out.end()) - (out.end() - V)));
        SequenceRows one{st.get(), std::span<const int32_t>(&cont.back(), 1), false};
        ASSERT_TRUE(m.forward(std::span<const SequenceRows>(&one, 1), &out).ok());
      }
      EXPECT_EQ(cont, c["greedy_continuation"].get<std::vector<int32_t>>());
    }
    ++cases;
  }
  EXPECT_GE(cases, 1);
}

}  // namespace
}  // namespace qwen35::model
