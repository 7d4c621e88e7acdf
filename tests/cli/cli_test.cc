// The qwen35 binary end to end: inspect and logits on good checkpoints, and every error path
// giving one clear line on stderr and a non-zero exit, never a crash.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "formats/npy.h"
#include "test_util.h"

namespace qwen35 {
namespace {

using testing::fixture_models_dir;
using testing::run_qwen35;
using testing::TempDir;
using testing::write_file;

std::string ckpt(const std::string& name) { return fixture_models_dir() + "/" + name + "/ckpt"; }

void expect_one_line_error(const testing::CommandResult& r, const std::string& expect) {
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "crashed: " << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
}

TEST(Cli, InspectPrintsGeometry) {
  auto r = run_qwen35("inspect -m " + ckpt("moe_q4"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"layers: 8, hidden: 128, vocab: 1024", "LLLF LLLF", "8 experts, top-2", "4-bit g64",
                        "8-bit g64", "kv cache per token", "recurrent state per sequence", "amx: ", "verdict: SUPPORTED"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  r = run_qwen35("inspect -m " + ckpt("dense_bf16_tied"));
  EXPECT_NE(r.out.find("tied to the embedding"), std::string::npos);
  EXPECT_NE(r.out.find("mtp: present"), std::string::npos);
  EXPECT_NE(r.out.find("family: Qwen3.5\n"), std::string::npos) << r.out;
  // The Qwen3 family: named, with what differs from Qwen3.5.
  r = run_qwen35("inspect -m " + ckpt("qwen3_moe_e8_top2"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* s : {"family: Qwen3-MoE", "model_type: qwen3_moe", "norms stored as w (applied as w)",
                        "layer pattern: FFF", "no output gate", "q/k RMSNorm per head", "gated deltanet: none",
                        "8 experts, top-2 renormalised", "no shared expert", "rms norm eps: 1e-06",
                        "chat template: none", "verdict: SUPPORTED"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  // Qwen3-Next: the hybrid pattern, its fused projections, the shared expert; from GGUF too.
  for (const std::string& m : {ckpt("qwen3_next_e8_top2"), testing::source_dir() + "/tests/fixtures/gguf/qwen3next_q8_0.gguf"}) {
    r = run_qwen35("inspect -m " + m);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const char* s : {"family: Qwen3-Next", "model_type: qwen3_next", "layer pattern: LFLF", "output gate",
                          "rope one-dimensional", "in_proj_qkvz", "shared expert intermediate 64", "verdict: SUPPORTED"})
      EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  // What the server reads from the chat template: Qwen3's writes Hermes-style JSON calls and
  // leaves <think> to the model (synth ships Qwen3's template, in HF and GGUF files alike);
  // Qwen3.5's writes XML calls and its generation prompt opens <think>.
  TempDir d;
  for (const char* fmt : {"hf", "gguf"}) {
    const std::string out = d.file(std::string("q3.") + fmt);
    ASSERT_EQ(run_qwen35("synth --preset qwen3-tiny --quiet --format " + std::string(fmt) + " --out " + out).exit_code, 0);
    r = run_qwen35("inspect -m " + out);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("family: Qwen3\n"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("chat template: tool calls as Hermes-style JSON (<tool_call>{\"name\": ...}); thinking "
                         "left to the model\n"), std::string::npos) << r.out;
  }
  r = run_qwen35("inspect -m " + testing::source_dir() + "/models/qwen35-tiny-kjv");
  EXPECT_NE(r.out.find("chat template: tool calls as XML (<tool_call><function=...>); thinking opened by the "
                       "generation prompt\n"), std::string::npos) << r.out;
}

TEST(Cli, InspectBrokenInputs) {
  TempDir d;
  expect_one_line_error(run_qwen35("inspect -m " + d.path()), "no config.json");
  expect_one_line_error(run_qwen35("inspect -m " + d.path() + "/missing"), "does not exist");
  write_file(d.file("file"), "x");
  expect_one_line_error(run_qwen35("inspect -m " + d.file("file")), "not a directory");
  write_file(d.file("config.json"), "{oops");
  expect_one_line_error(run_qwen35("inspect -m " + d.path()), "not valid JSON");
  std::filesystem::copy_file(ckpt("dense_bf16_tied") + "/config.json", d.file("config.json"),
                             std::filesystem::copy_options::overwrite_existing);
  const std::string st = testing::read_file(ckpt("dense_bf16_tied") + "/model.safetensors");
  write_file(d.file("model.safetensors"), st.substr(0, st.size() / 2));
  expect_one_line_error(run_qwen35("inspect -m " + d.path()), "past end of file");
  write_file(d.file("model.safetensors"), std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}");
  expect_one_line_error(run_qwen35("inspect -m " + d.path()), "header length");
  write_file(d.file("model.safetensors"), st);
  auto cfg = nlohmann::json::parse(std::ifstream(d.file("config.json")));
  cfg["model_type"] = "gpt2";
  write_file(d.file("config.json"), cfg.dump());
  expect_one_line_error(run_qwen35("inspect -m " + d.path()), "model_type");
}

TEST(Cli, LogitsWritesNpyMatchingReference) {
  TempDir d;
  auto g = nlohmann::json::parse(std::ifstream(fixture_models_dir() + "/moe_q4/golden.json"));
  std::string toks;
  for (auto& t : g["tokens"]) {
    if (!toks.empty()) toks += ',';
    toks += std::to_string(t.get<int>());
  }
  for (const char* mode : {"", "--decode", "--chunk 7"}) {
    auto r = run_qwen35("logits -m " + ckpt("moe_q4") + " --tokens " + toks + " --out " + d.file("l.npy") +
                        " --greedy 8 " + mode);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto ours = formats::read_npy(d.file("l.npy"));
    auto ref = formats::read_npy(fixture_models_dir() + "/moe_q4/logits_all.npy");
    ASSERT_TRUE(ours.ok());
    EXPECT_EQ(ours->shape, ref->shape);
    float worst = 0;
    for (size_t i = 0; i < ref->data.size(); ++i) worst = std::max(worst, std::fabs(ours->data[i] - ref->data[i]));
    EXPECT_LE(worst, 1e-3f) << mode;
    EXPECT_EQ(nlohmann::json::parse(r.out), g["greedy_continuation"]) << mode;
  }
}

TEST(Cli, LogitsErrors) {
  TempDir d;
  const std::string m = " -m " + ckpt("dense_q4_untied");
  expect_one_line_error(run_qwen35("logits" + m + " --tokens 1,2,1024 --out " + d.file("x.npy")), "out of range");
  expect_one_line_error(run_qwen35("logits" + m + " --tokens '' --out " + d.file("x.npy")), "empty");
  expect_one_line_error(run_qwen35("logits" + m + " --tokens 1,a --out " + d.file("x.npy")), "not a non-negative integer");
  expect_one_line_error(run_qwen35("logits" + m + " --tokens 1,-2 --out " + d.file("x.npy")), "not a non-negative integer");
  expect_one_line_error(run_qwen35("logits" + m + " --tokens 1,2 --out /nonexistent/dir/x.npy"), "cannot write");
  expect_one_line_error(run_qwen35("logits -m " + d.path() + " --tokens 1 --out " + d.file("x.npy")), "no config.json");
  auto r = run_qwen35("logits" + m + " --out " + d.file("x.npy"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--tokens"), std::string::npos);
}

// --kv-type: an unknown type, or a pair the model's head_dim cannot take, is one line naming it
// (before the weights are read); inspect gives each type's bytes per token: K and V rows of
// head_dim 256 in 2 full-attention layers × 2 KV heads (f32 1024 bytes a row, bf16 512, q8_0
// 8 blocks of 34, q4_0 8 of 18, turbo4 4 + 128, turbo3 4 + 96).
TEST(Cli, KvTypeFlag) {
  TempDir d;
  const std::string out = " --out " + d.file("x.npy");
  expect_one_line_error(run_qwen35("logits -m " + ckpt("dense_q4_untied") + " --tokens 1 --kv-type q8" + out),
                        "--kv-type: unknown kv type 'q8' (f32, bf16, q8_0, q4_0, turbo4, turbo3)");
  expect_one_line_error(run_qwen35("bench -m " + ckpt("dense_q4_untied") + " --kv-type f32,q5"),
                        "--kv-type: unknown kv type 'q5'");
  expect_one_line_error(
      run_qwen35("logits -m " + ckpt("qwen3_moe_e8_top2") + " --tokens 1 --kv-type q4_0" + out),
      "--kv-type q4_0 does not fit this model: kv type q4_0: head_dim 16 is not a multiple of 32");
  expect_one_line_error(
      run_qwen35("logits -m " + ckpt("qwen3_moe_e8_top2") + " --tokens 1 --kv-type bf16,turbo4" + out),
      "--kv-type bf16,turbo4 does not fit this model: kv type turbo4: head_dim 16 is not a power of two");
  EXPECT_EQ(run_qwen35("logits -m " + ckpt("qwen3_moe_e8_top2") + " --tokens 1 --kv-type bf16" + out).exit_code, 0);
  auto r = run_qwen35("inspect -m " + ckpt("dense_bf16_tied"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("kv cache per token by --kv-type: f32 8192 (8.00 KiB), bf16 4096 (4.00 KiB), "
                       "q8_0 2176 (2.12 KiB), q4_0 1152 (1.12 KiB), turbo4 1056 (1.03 KiB), turbo3 800 "
                       "(800 B)"),
            std::string::npos)
      << r.out;
  r = run_qwen35("inspect -m " + ckpt("qwen3_moe_e8_top2"));
  EXPECT_NE(r.out.find("q8_0 n/a (head_dim 16)"), std::string::npos) << r.out;
  // --fit-mb: the longest context whose KV fits beside the weights and the recurrent state,
  // from the byte counts inspect prints (a multiple of 64).
  r = run_qwen35("inspect -m " + ckpt("dense_bf16_tied") + " --fit-mb 64");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto number_after = [&](const std::string& key) {
    const size_t at = r.out.find(key);
    EXPECT_NE(at, std::string::npos) << key << "\n" << r.out;
    return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + key.size()));
  };
  const double room = 64.0 * 1048576 - number_after("weight bytes: ") -
                      number_after("recurrent state per sequence (f32): ");
  for (auto [name, per_token] : {std::pair{"f32", 8192.0}, std::pair{"q4_0", 1152.0}}) {
    const long long n = (long long)(room / per_token) / 64 * 64;
    EXPECT_NE(r.out.find(" " + std::string(name) + " " + std::to_string(n) + ","), std::string::npos)
        << name << " " << n << "\n" << r.out;
  }
}

TEST(Cli, UnknownCommandAndHelp) {
  auto r = run_qwen35("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("unknown command"), std::string::npos);
  r = run_qwen35("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("logits"), std::string::npos);
  r = run_qwen35("logits --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("--chunk"), std::string::npos);
}

}  // namespace
}  // namespace qwen35

namespace qwen35 {
namespace {

// logits --kl-text: f32 against f32 moves nothing (KL 0, equal perplexities, top-1 1); a type
// measured beside others in one pass (--kl-also) prints the line it prints alone; --ppl-ctx
// scores the second half of each whole chunk: 63 tokens of each 128 (positions 64..126).
TEST(Cli, KlTextPerplexityAndKlAlso) {
  TempDir d;
  const std::string text = d.file("text.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i)
      f << "And God said, Let there be light: and there was light. And the evening and the morning were the day " << i << ".\n";
  }
  const std::string base = "logits -m " + testing::source_dir() + "/models/qwen35-tiny-kjv --kl-text " + text;
  auto same = run_qwen35(base + " --kv-type f32 --ppl-ctx 128");
  ASSERT_EQ(same.exit_code, 0) << same.err;
  auto ids = run_qwen35("tokenize -m " + testing::source_dir() + "/models/qwen35-tiny-kjv --file " + text);
  ASSERT_EQ(ids.exit_code, 0) << ids.err;
  const int64_t chunks = int64_t(nlohmann::json::parse(ids.out).size()) / 128;
  ASSERT_GE(chunks, 2);
  EXPECT_NE(same.out.find(std::to_string(chunks) + " chunks, " + std::to_string(chunks * 63) + " tokens scored"),
            std::string::npos) << same.out;
  EXPECT_NE(same.out.find("mean KL 0.000e+00, p99 KL 0.000e+00, top-1 agreement 1.0000"), std::string::npos) << same.out;
  const size_t p = same.out.find("perplexity ");
  ASSERT_NE(p, std::string::npos);
  std::istringstream nums(same.out.substr(p + 11));
  double type_ppl = 0, ref_ppl = 0;
  std::string vs;
  nums >> type_ppl >> vs >> ref_ppl;
  EXPECT_EQ(type_ppl, ref_ppl) << same.out;
  auto alone = run_qwen35(base + " --kv-type q4_0 --depth 256 --window 64");
  auto together = run_qwen35(base + " --kv-type q8_0 --kl-also q4_0 --depth 256 --window 64");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(together.exit_code, 0) << together.err;
  EXPECT_NE(together.out.find(alone.out), std::string::npos) << alone.out << together.out;
  EXPECT_NE(together.out.find("kv q8_0 vs f32"), std::string::npos) << together.out;
  EXPECT_NE(run_qwen35(base + " --ppl-ctx 128 --depth 256").exit_code, 0);
}

// bench reports its fields (values are not asserted: speed is measured, never unit-tested).
TEST(Cli, BenchJsonFields) {
  auto r = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 8 -n 4 -r 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"pp_tok_s", "tg_tok_s", "ttft_ms", "weight_bytes_per_token", "mem_bw_gbs", "tg_roofline_pct",
                        "threads", "isa", "peak_rss_mb", "logits_hash", "pp_tok_s_min", "tg_tok_s_max", "mode"})
    EXPECT_TRUE(j.contains(k)) << k;
  EXPECT_GT(j["tg_tok_s"].get<double>(), 0);
  EXPECT_GT(j["mem_bw_gbs"].get<double>(), 0);
  EXPECT_EQ(j["mode"], "exact");
  // The hash identifies the logits: the same in another run (and with other thread counts: the
  // kernels are thread-count invariant), different in fast mode (int8 activations change bits).
  auto again = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 8 -n 0 -r 1 -t 1 --json");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(nlohmann::json::parse(again.out)["logits_hash"], j["logits_hash"]);
  auto fast = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 8 -n 0 -r 1 --fast --json");
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  EXPECT_NE(nlohmann::json::parse(fast.out)["logits_hash"], j["logits_hash"]);
  // A 32-row prefill takes AMX tiles where the process uses them; --no-amx keeps it off them, with
  // the same bits (and says why it is off).
  const std::string pp32 = "bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 32 -n 0 -r 1 --fast --json";
  auto amx = testing::run_qwen35(pp32), no_amx = testing::run_qwen35(pp32 + " --no-amx");
  ASSERT_EQ(amx.exit_code, 0) << amx.err;
  ASSERT_EQ(no_amx.exit_code, 0) << no_amx.err;
  const auto ja = nlohmann::json::parse(amx.out), jn = nlohmann::json::parse(no_amx.out);
  EXPECT_EQ(ja["logits_hash"], jn["logits_hash"]);
  EXPECT_FALSE(jn["amx"].get<bool>());
  EXPECT_FALSE(jn["amx_why_not"].get<std::string>().empty());
  if (!ja["amx"].get<bool>()) std::printf("[amx] not in use here: %s\n", ja["amx_why_not"].get<std::string>().c_str());
  // --isa caps the dispatch (SSE4: every x86-64 CPU this project runs on has it); unknown names
  // fail. A build for this CPU alone (QWEN35_NATIVE_ONLY, the sanitizer stages) has one target.
#ifndef QWEN35_NATIVE_ONLY
  auto sse4 = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 8 -n 2 -r 1 --isa sse4 --json");
  ASSERT_EQ(sse4.exit_code, 0) << sse4.err;
  EXPECT_EQ(nlohmann::json::parse(sse4.out)["isa"], "SSE4");
#endif
  // -b decodes several sequences together.
  auto batched = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 0 -n 4 -b 3 -r 1 --json");
  ASSERT_EQ(batched.exit_code, 0) << batched.err;
  const auto bj = nlohmann::json::parse(batched.out);
  EXPECT_EQ(bj["batch"], 3);
  EXPECT_GT(bj["tg_tok_s"].get<double>(), 0);
  // The generated tokens' hash: the same with one thread (the kernels are thread-count invariant); the
  // prompts' batched prefill step timed; one process: one rank, no bytes on a wire.
  auto one = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 0 -n 4 -b 3 -r 1 -t 1 --json");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(nlohmann::json::parse(one.out)["tg_hash"], bj["tg_hash"]);
  EXPECT_GT(bj["batch_prefill_tok_s"].get<double>(), 0);
  EXPECT_EQ(bj["ranks"], 1);
  EXPECT_EQ(bj["tg_hop_bytes_per_step"].get<double>(), 0);
  // -d puts context before each test: the prompt's last logits then follow it (another hash).
  auto deep = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -p 8 -n 2 -d 5 -r 1 --json");
  ASSERT_EQ(deep.exit_code, 0) << deep.err;
  const auto dj = nlohmann::json::parse(deep.out);
  EXPECT_EQ(dj["n_depth"], 5);
  EXPECT_GT(dj["tg_tok_s"].get<double>(), 0);
  EXPECT_NE(dj["logits_hash"], j["logits_hash"]);
  // --depth-fill random: the -d context written in place (model/depth_fill.h) and resumed from
  // by every tg request, in a compressed type too; -d off the 64-position grid is refused.
  auto filled = testing::run_qwen35("bench -m " + testing::fixture_models_dir() +
                                    "/moe_q4/ckpt -p 4 -n 2 -d 128 -r 1 --kv-type q4_0 --depth-fill random --json");
  ASSERT_EQ(filled.exit_code, 0) << filled.err;
  const auto fj = nlohmann::json::parse(filled.out);
  EXPECT_EQ(fj["depth_fill"], "random");
  EXPECT_GT(fj["tg_tok_s"].get<double>(), 0);
  auto off_grid = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -d 5 --depth-fill random");
  EXPECT_NE(off_grid.exit_code, 0);
  EXPECT_NE(off_grid.err.find("multiple of 64"), std::string::npos) << off_grid.err;
  EXPECT_NE(testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -d -1").exit_code, 0);
  EXPECT_NE(testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -b 0").exit_code, 0);
  auto nosuch = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt --isa nosuch");
  EXPECT_NE(nosuch.exit_code, 0);
  EXPECT_NE(nosuch.err.find("--isa"), std::string::npos) << nosuch.err;
  auto bad = testing::run_qwen35("bench -m " + testing::fixture_models_dir() + "/moe_q4/ckpt -r 0");
  EXPECT_NE(bad.exit_code, 0);
}

}  // namespace
}  // namespace qwen35
