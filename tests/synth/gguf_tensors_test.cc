// The bytes of `qwen35 synth --format gguf`: tensors moved as llama.cpp's converter moves them
// (value heads from grouped to tiled order by this file's own reshape-and-swap, norms 1 + w,
// ssm_a = -exp(A_log), experts split), and Q8_0 / Q4_0 blocks as ggml's reference quantizers
// round, by a scalar implementation of that rule written here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "core/dtype.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "tools/synth/gguf_encode.h"
#include "tools/synth/synth.h"

namespace qwen35::tools {
namespace {

namespace fs = std::filesystem;
using formats::GgmlType;

// ---------------------------------------------------------------- the rounding rule, again

// ggml quantize_row_q8_0_ref on one block of 32: d = amax / 127 (f32), codes roundf(x * (1/d)).
std::array<uint8_t, 34> rule_q8_0(const float* x) {
  float amax = 0;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]);
  const float d = amax / 127.0f;
  float id = 0;
  if (d != 0) id = 1.0f / d;
  std::array<uint8_t, 34> b{};
  const uint16_t h = core::f32_to_f16(d);
  b[0] = uint8_t(h & 0xff);
  b[1] = uint8_t(h >> 8);
  for (int j = 0; j < 32; ++j) {
    // Half away from zero: the integer part, plus one step when the (exact) fraction is >= 1/2.
    const float s = x[j] * id;
    int q = int(s);
    const float frac = s - float(q);
    if (frac >= 0.5f) ++q;
    if (frac <= -0.5f) --q;
    b[size_t(2 + j)] = uint8_t(int8_t(q));
  }
  return b;
}

// ggml quantize_row_q4_0_ref: the signed value of largest magnitude (first one on ties) is -8 d.
std::array<uint8_t, 18> rule_q4_0(const float* x) {
  int at = 0;
  for (int j = 1; j < 32; ++j)
    if (std::fabs(x[j]) > std::fabs(x[at])) at = j;
  const float d = x[at] / -8.0f;
  float id = 0;
  if (d != 0) id = 1.0f / d;
  auto code = [&](float v) {
    const float s = v * id;
    const float t = s + 8.5f;
    const int q = int(t);  // truncation; t >= 0.5 here
    return q > 15 ? 15 : q;
  };
  std::array<uint8_t, 18> b{};
  const uint16_t h = core::f32_to_f16(d);
  b[0] = uint8_t(h & 0xff);
  b[1] = uint8_t(h >> 8);
  for (int j = 0; j < 16; ++j) b[size_t(2 + j)] = uint8_t(code(x[j]) | (code(x[j + 16]) << 4));
  return b;
}

TEST(GgufEncode, CraftedBlocks) {
  std::array<float, 32> x{};
  std::array<uint8_t, 34> q8{};
  std::array<uint8_t, 18> q4{};
  // All zero: Q8_0 d = 0 and codes 0; Q4_0 d = 0 / -8 = -0 (f16 0x8000, as ggml stores it) and
  // codes 8 (its zero point).
  gguf_encode_row(GgmlType::kQ8_0, x.data(), 32, q8.data());
  for (uint8_t c : q8) EXPECT_EQ(c, 0);
  gguf_encode_row(GgmlType::kQ4_0, x.data(), 32, q4.data());
  EXPECT_EQ(q4[0] | q4[1] << 8, 0x8000);
  for (int j = 2; j < 18; ++j) EXPECT_EQ(q4[size_t(j)], 0x88);
  // Q8_0 with d = 1 exactly: halves round away from zero.
  x[0] = 127, x[1] = 2.5f, x[2] = -2.5f, x[3] = 0.5f, x[4] = -127;
  gguf_encode_row(GgmlType::kQ8_0, x.data(), 32, q8.data());
  EXPECT_EQ(core::f16_to_f32(uint16_t(q8[0] | q8[1] << 8)), 1.0f);
  EXPECT_EQ(int8_t(q8[2]), 127);
  EXPECT_EQ(int8_t(q8[3]), 3);
  EXPECT_EQ(int8_t(q8[4]), -3);
  EXPECT_EQ(int8_t(q8[5]), 1);
  EXPECT_EQ(int8_t(q8[6]), -127);
  // Q4_0: -1 comes first among |x| = 1, so d = -1 / -8 = 0.125; -1 -> code 0, +1 -> 16 -> 15.
  x = {};
  x[0] = -1, x[1] = 1, x[16] = 0.5f;
  gguf_encode_row(GgmlType::kQ4_0, x.data(), 32, q4.data());
  EXPECT_EQ(core::f16_to_f32(uint16_t(q4[0] | q4[1] << 8)), 0.125f);
  EXPECT_EQ(q4[2], 0x00 | (12 << 4));  // x[0] = -1 -> 0; x[16] = 0.5 -> 4 + 8.5 -> 12
  EXPECT_EQ(q4[3], 0x0f | (8 << 4));   // x[1] = +1 -> 15; x[17] = 0 -> 8
  x[0] = 1, x[1] = -1;  // now +1 comes first: d = -0.125, +1 -> 0, -1 -> 15
  gguf_encode_row(GgmlType::kQ4_0, x.data(), 32, q4.data());
  EXPECT_EQ(core::f16_to_f32(uint16_t(q4[0] | q4[1] << 8)), -0.125f);
  EXPECT_EQ(q4[2] & 0x0f, 0);
  EXPECT_EQ(q4[3] & 0x0f, 15);
}

TEST(GgufEncode, RandomBlocksFollowTheRule) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(32 * 4096);
  for (size_t i = 0; i < x.size(); ++i) x[i] = n(rng) * (i % 7 == 0 ? 100.0f : 0.03f);
  std::vector<uint8_t> q8(34 * 4096), q4(18 * 4096);
  gguf_encode_row(GgmlType::kQ8_0, x.data(), int64_t(x.size()), q8.data());
  gguf_encode_row(GgmlType::kQ4_0, x.data(), int64_t(x.size()), q4.data());
  for (size_t b = 0; b < 4096; ++b) {
    const auto r8 = rule_q8_0(x.data() + 32 * b);
    const auto r4 = rule_q4_0(x.data() + 32 * b);
    ASSERT_EQ(std::memcmp(r8.data(), q8.data() + 34 * b, 34), 0) << "Q8_0 block " << b;
    ASSERT_EQ(std::memcmp(r4.data(), q4.data() + 18 * b, 18), 0) << "Q4_0 block " << b;
  }
}

// ---------------------------------------------------------------- the files

class GgufTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() /
            ("qwen35_synth_tensors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string write(const std::string& preset, const std::string& format, const std::string& outtype,
                    const std::string& name) {
    SynthOptions o;
    o.preset = preset;
    o.format = format;
    o.outtype = outtype;
    o.seed = 3;
    o.progress = false;
    o.out_dir = (root_ / name).string();
    auto r = write_synthetic_checkpoint(o);
    EXPECT_TRUE(r.ok()) << r.message();
    return o.out_dir;
  }
  fs::path root_;
};

std::vector<float> f32_values(const formats::GgufTensor& t) {
  EXPECT_EQ(t.type, GgmlType::kF32) << t.name;
  std::vector<float> v(size_t(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * 4);
  return v;
}

std::vector<float> hf_values(const formats::TensorStore& st, const std::string& name) {
  const formats::TensorView* t = st.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (t == nullptr) return {};
  size_t n = 1;
  for (int64_t d : t->shape) n *= size_t(d);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (t->dtype == core::DType::kF32) {
      std::memcpy(&v[i], t->data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      v[i] = core::bf16_to_f32(h);
    }
  }
  return v;
}

// The converter's reorder: the value-head axis viewed as [nk, r, block], its first two axes
// swapped, flattened: new[j][g] = old[g][j]. Applied to `rows` rows of `cols` starting at `start`.
std::vector<float> tile_rows(const std::vector<float>& a, int64_t cols, int64_t start, int64_t nk,
                             int64_t r, int64_t block) {
  std::vector<float> out(a.begin(), a.begin() + start * cols);
  for (int64_t j = 0; j < r; ++j)
    for (int64_t g = 0; g < nk; ++g) {
      const auto from = a.begin() + (start + (g * r + j) * block) * cols;
      out.insert(out.end(), from, from + block * cols);
    }
  return out;
}

TEST_F(GgufTensorsTest, DenseTensorsAreTheHfOnesConverted) {
  const std::string hf = write("tiny", "hf", "", "hf");
  auto st = formats::TensorStore::open_dir(hf);
  ASSERT_TRUE(st.ok()) << st.message();
  auto g = formats::GgufModel::open(write("tiny", "gguf", "f32", "f32.gguf"));
  ASSERT_TRUE(g.ok()) << g.message();
  const std::string L0 = "model.language_model.layers.0.linear_attn.";
  const int64_t H = 128, nk = 2, r = 2, dv = 128, qk = 2 * nk * 128;
  auto gg = [&](const std::string& n) { return f32_values(*(*g)->find(n)); };
  EXPECT_EQ(gg("token_embd.weight"), hf_values(*st, "model.language_model.embed_tokens.weight"));
  EXPECT_EQ(gg("blk.0.attn_qkv.weight"), tile_rows(hf_values(*st, L0 + "in_proj_qkv.weight"), H, qk, nk, r, dv));
  EXPECT_EQ(gg("blk.0.attn_gate.weight"), tile_rows(hf_values(*st, L0 + "in_proj_z.weight"), H, 0, nk, r, dv));
  EXPECT_EQ(gg("blk.0.ssm_alpha.weight"), tile_rows(hf_values(*st, L0 + "in_proj_a.weight"), H, 0, nk, r, 1));
  EXPECT_EQ(gg("blk.0.ssm_conv1d.weight"), tile_rows(hf_values(*st, L0 + "conv1d.weight"), 4, qk, nk, r, dv));
  EXPECT_EQ(gg("blk.0.ssm_dt.bias"), tile_rows(hf_values(*st, L0 + "dt_bias"), 1, 0, nk, r, 1));
  std::vector<float> a = tile_rows(hf_values(*st, L0 + "A_log"), 1, 0, nk, r, 1);
  for (float& x : a) x = -std::exp(x);
  EXPECT_EQ(gg("blk.0.ssm_a"), a);
  EXPECT_EQ(gg("blk.0.ssm_norm.weight"), hf_values(*st, L0 + "norm.weight"));  // not shifted
  // ssm_out: its columns are value heads; transpose, tile the rows, transpose back.
  const std::vector<float> out = hf_values(*st, L0 + "out_proj.weight");  // [H, nv*dv]
  std::vector<float> t(out.size()), back(out.size());
  for (int64_t i = 0; i < H; ++i)
    for (int64_t c = 0; c < 4 * dv; ++c) t[size_t(c * H + i)] = out[size_t(i * 4 * dv + c)];
  t = tile_rows(t, H, 0, nk, r, dv);
  for (int64_t i = 0; i < H; ++i)
    for (int64_t c = 0; c < 4 * dv; ++c) back[size_t(i * 4 * dv + c)] = t[size_t(c * H + i)];
  EXPECT_EQ(gg("blk.0.ssm_out.weight"), back);
  std::vector<float> norm = hf_values(*st, "model.language_model.layers.3.self_attn.q_norm.weight");
  for (float& x : norm) x += 1.0f;
  EXPECT_EQ(gg("blk.3.attn_q_norm.weight"), norm);
  EXPECT_EQ(gg("blk.3.attn_q.weight"), hf_values(*st, "model.language_model.layers.3.self_attn.q_proj.weight"));
  EXPECT_EQ(gg("blk.8.nextn.eh_proj.weight"), hf_values(*st, "mtp.fc.weight"));
  norm = hf_values(*st, "mtp.pre_fc_norm_hidden.weight");
  for (float& x : norm) x += 1.0f;
  EXPECT_EQ(gg("blk.8.nextn.hnorm.weight"), norm);
  EXPECT_EQ(gg("blk.8.ffn_down.weight"), hf_values(*st, "mtp.layers.0.mlp.down_proj.weight"));
}

TEST_F(GgufTensorsTest, ExpertsAreSplit) {
  const std::string hf = write("tiny-moe", "hf", "", "hf");
  auto st = formats::TensorStore::open_dir(hf);
  ASSERT_TRUE(st.ok()) << st.message();
  auto g = formats::GgufModel::open(write("tiny-moe", "gguf", "f32", "f32.gguf"));
  ASSERT_TRUE(g.ok()) << g.message();
  const std::string m = "model.language_model.layers.1.mlp.";
  const std::vector<float> gu = hf_values(*st, m + "experts.gate_up_proj");  // [8, 256, 128]
  const int64_t E = 8, I = 128, H = 128;
  std::vector<float> gate, up;
  for (int64_t e = 0; e < E; ++e) {
    const auto base = gu.begin() + e * 2 * I * H;
    gate.insert(gate.end(), base, base + I * H);
    up.insert(up.end(), base + I * H, base + 2 * I * H);
  }
  EXPECT_EQ(f32_values(*(*g)->find("blk.1.ffn_gate_exps.weight")), gate);
  EXPECT_EQ(f32_values(*(*g)->find("blk.1.ffn_up_exps.weight")), up);
  EXPECT_EQ(f32_values(*(*g)->find("blk.1.ffn_down_exps.weight")), hf_values(*st, m + "experts.down_proj"));
  EXPECT_EQ(f32_values(*(*g)->find("blk.1.ffn_gate_inp.weight")), hf_values(*st, m + "gate.weight"));
  EXPECT_EQ(f32_values(*(*g)->find("blk.1.ffn_gate_inp_shexp.weight")), hf_values(*st, m + "shared_expert_gate.weight"));
  EXPECT_EQ(f32_values(*(*g)->find("output.weight")), hf_values(*st, "lm_head.weight"));
}

// Every Q8_0 / Q4_0 block of the quantized files is the rule applied to the F32 file's values
// (the same values: both come from the HF checkpoint of the same preset and seed).
TEST_F(GgufTensorsTest, QuantizedBlocksAreTheRuleOnTheValues) {
  auto f32 = formats::GgufModel::open(write("tiny", "gguf", "f32", "f32.gguf"));
  auto q8 = formats::GgufModel::open(write("tiny", "gguf", "q8_0", "q8.gguf"));
  auto q4 = formats::GgufModel::open(write("tiny", "gguf", "q4_0", "q4.gguf"));
  ASSERT_TRUE(f32.ok() && q8.ok() && q4.ok());
  int64_t blocks = 0;
  for (const auto& [name, t] : (*f32)->tensors()) {
    const formats::GgufTensor* a = (*q8)->find(name);
    const formats::GgufTensor* b = (*q4)->find(name);
    ASSERT_TRUE(a && b) << name;
    if (t->ne.size() == 1 || a->type == GgmlType::kF32) {  // kept F32 in every file
      EXPECT_EQ(a->type, GgmlType::kF32) << name;
      EXPECT_EQ(b->type, GgmlType::kF32) << name;
      EXPECT_EQ(std::memcmp(a->data, t->data, t->nbytes), 0) << name;
      continue;
    }
    ASSERT_EQ(a->type, GgmlType::kQ8_0) << name;
    ASSERT_EQ(b->type, GgmlType::kQ4_0) << name;
    const std::vector<float> x = f32_values(*t);
    for (size_t k = 0; k < x.size() / 32; ++k, ++blocks) {
      ASSERT_EQ(std::memcmp(rule_q8_0(x.data() + 32 * k).data(), a->data + 34 * k, 34), 0) << name << " block " << k;
      ASSERT_EQ(std::memcmp(rule_q4_0(x.data() + 32 * k).data(), b->data + 18 * k, 18), 0) << name << " block " << k;
    }
  }
  EXPECT_GT(blocks, 100000);
}

}  // namespace
}  // namespace qwen35::tools
