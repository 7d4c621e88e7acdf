// The prefix cache on disk (EngineOptions::cache_dir, serve --cache-dir): snapshots saved at
// shutdown are loaded by the next engine and resume to the bits of a fresh run; damaged files,
// files of another checkpoint or mode, and files of another geometry are skipped with a warning.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kernels/ops.h"
#include "model/snapshot_file.h"
#include "model/weights.h"
#include "runtime/engine.h"
#include "test_util.h"
#include "tiny_model_suite.h"

namespace qwen35::runtime {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

class CacheFileTest : public testing::TinyModelSuite<CacheFileTest> {
 protected:
  static std::vector<int32_t> prompt(int64_t n) {
    std::vector<int32_t> p;
    for (int64_t k = 0; k < n; ++k) p.push_back(int32_t((k * 53 + 9) % 3000));
    return p;
  }
  // Tokens and logprob bits of a greedy answer, and the prompt tokens resumed.
  static std::pair<std::vector<uint64_t>, int64_t> answer(Engine& e, std::vector<int32_t> p) {
    GenerationRequest g;
    g.prompt = std::move(p);
    g.max_tokens = 8;
    g.sampling.temperature = 0;
    g.sampling.logprobs = 2;
    SubmitError err;
    std::string msg;
    auto s = e.submit(g, &err, &msg);
    EXPECT_TRUE(s) << msg;
    std::vector<uint64_t> out;
    if (!s) return {out, -1};
    StreamEvent ev;
    while (s->next(&ev, std::chrono::seconds(60)) && ev.kind != StreamEvent::kDone) {
      uint32_t bits;
      std::memcpy(&bits, &ev.sample.logprob, 4);
      out.push_back((uint64_t(uint32_t(ev.sample.token)) << 32) | bits);
    }
    return {out, s->timing().prompt_reused};
  }
  static EngineOptions options(const std::string& cache_dir, uint64_t fingerprint) {
    EngineOptions o{2, 1024, 8, 64};
    o.cache_bytes = 64 << 20;
    o.cache_dir = cache_dir;
    o.cache_fingerprint = fingerprint;
    return o;
  }
};

TEST_F(CacheFileTest, SavedSnapshotsResumeAfterRestart) {
  TempDir d;
  const auto long_prompt = prompt(400);
  const auto fresh = [&] {
    Engine e(*model_, EngineOptions{1, 1024, 8, 64});
    return answer(e, long_prompt).first;
  }();
  {
    Engine e(*model_, options(d.file("cache"), 42));
    EXPECT_EQ(answer(e, std::vector<int32_t>(long_prompt.begin(), long_prompt.begin() + 300)).second, 0);
    e.shutdown(false);
    EXPECT_NE(e.cache_log().back().find("saved 1 "), std::string::npos) << e.cache_log().back();
  }
  Engine e(*model_, options(d.file("cache"), 42));
  EXPECT_NE(e.cache_log().back().find("loaded 1 "), std::string::npos) << e.cache_log().back();
  const auto [got, reused] = answer(e, long_prompt);
  EXPECT_EQ(reused, 256);  // the 300-token prompt's last grid boundary
  EXPECT_EQ(got, fresh);
}

// A model split by layers keeps, on each rank, the part of each snapshot its layers make
// (model/snapshot_file.h): at every cut the two parts hold each attention layer's KV and each
// float of the recurrent array exactly once, and a part's file gives back its ranges alone.
TEST_F(CacheFileTest, LayerPartsOfASplitCoverASnapshotOnce) {
  namespace sf = model::snapshot_file;
  const model::ModelConfig& c = model_->config();
  auto pool = model_->new_pool(4);
  auto st = model_->new_state(256, pool.get());
  const size_t floats = st->recurrent_bytes() / 4;
  int64_t n_full = 0;
  for (auto k : c.layers) n_full += k == model::LayerKind::kFullAttention;
  ASSERT_EQ(pool->n_layers(), n_full);
  ASSERT_GT(floats, 0u);
  for (int64_t cut = 1; cut < c.n_layers; ++cut) {
    const sf::Part a = sf::layers_part(c, *st, *pool, 0, cut, false);
    const sf::Part b = sf::layers_part(c, *st, *pool, cut, c.n_layers, true);
    EXPECT_EQ(a.kv_first, 0);
    EXPECT_EQ(a.kv_end, b.kv_first);
    EXPECT_EQ(b.kv_end, n_full);
    std::vector<int> seen(floats, 0);
    for (const sf::Part* p : {&a, &b})
      for (const auto& [at, n] : p->recurrent)
        for (int64_t i = at; i < at + n; ++i) ++seen[size_t(i)];
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), int64_t(floats)) << "cut at layer " << cut;
    EXPECT_EQ(a.recurrent_floats() + b.recurrent_floats(), floats);
  }
  // Part b of a cut after the first layer: written, then read into a zeroed array.
  TempDir d;
  const sf::Part b = sf::layers_part(c, *st, *pool, 1, c.n_layers, true);
  std::vector<float> snap(floats), back(floats, 0.0f);
  for (size_t i = 0; i < floats; ++i) snap[i] = float(i) + 0.5f;
  std::vector<int32_t> tokens(64, 7), blocks = {pool->allocate()};
  const std::string path = d.file("part.q35pc");
  ASSERT_EQ(sf::write(path, *pool, b, 9, tokens, blocks, snap), "");
  EXPECT_EQ(fs::file_size(path), 56 + 64 * 4 + size_t(b.kv_end - b.kv_first) * pool->block_bytes() / size_t(n_full) +
                                     b.recurrent_floats() * 4 + 8);
  sf::Reader in;
  ASSERT_EQ(in.open(path, *pool, b, 9), "");
  std::vector<int32_t> got(64);
  ASSERT_TRUE(in.read_tokens(got) && in.read_block(*pool, -1) && in.read_recurrent(back) && in.checksum_matches());
  EXPECT_EQ(got, tokens);
  std::vector<float> want(floats, 0.0f);
  for (const auto& [at, n] : b.recurrent) std::copy_n(snap.begin() + at, n, want.begin() + at);
  EXPECT_EQ(back, want);
  // The whole snapshot's reader refuses the part: its header counts other layers and floats.
  sf::Reader whole;
  EXPECT_EQ(whole.open(path, *pool, sf::whole(*pool, floats), 9), "geometry does not match this model");
}

TEST_F(CacheFileTest, DamagedAndForeignFilesAreSkipped) {
  TempDir d;
  const std::string dir = d.file("cache");
  {
    Engine e(*model_, options(dir, 42));
    answer(e, prompt(200));
  }
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(dir)) files.push_back(f.path());
  ASSERT_EQ(files.size(), 1u);
  const fs::path good = files[0];
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir + "/" + name, std::ios::binary).write(b.data(), std::streamsize(b.size()));
  };
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 1;
  write("flipped.q35pc", flipped);
  write("truncated.q35pc", bytes.substr(0, bytes.size() - 100));
  write("garbage.q35pc", std::string(4096, 'x'));
  write("empty.q35pc", "");
  fs::remove(good);
  // Another checkpoint or mode: the same file under another fingerprint.
  write("good.q35pc", bytes);
  auto said = [](const std::vector<std::string>& log, const std::string& file,
                 const std::string& why) {
    for (const auto& l : log)
      if (l.find(file) != std::string::npos && l.find(why) != std::string::npos) return true;
    return false;
  };
  {
    Engine other(*model_, options(dir, 43));
    const auto log = other.cache_log();
    EXPECT_TRUE(said(log, "good", "another checkpoint")) << ::testing::PrintToString(log);
    EXPECT_NE(log.back().find("loaded 0 "), std::string::npos);
    EXPECT_EQ(other.stats().kv_blocks_used, 0);
  }  // saves its (empty) cache: files of other fingerprints stay
  ASSERT_TRUE(fs::exists(dir + "/good.q35pc"));
  Engine same(*model_, options(dir, 42));
  const auto log = same.cache_log();
  EXPECT_TRUE(said(log, "flipped", "checksum")) << ::testing::PrintToString(log);
  EXPECT_TRUE(said(log, "truncated", "truncated"));
  EXPECT_TRUE(said(log, "garbage", "not a snapshot"));
  EXPECT_TRUE(said(log, "empty", "not a snapshot"));
  EXPECT_NE(log.back().find("loaded 1 "), std::string::npos);
  EXPECT_EQ(same.stats().kv_blocks_used, 3);  // 192 positions
}

}  // namespace
}  // namespace qwen35::runtime
