// The prefix cache on disk (EngineOptions::cache_dir, serve --cache-dir): snapshots saved at
// shutdown are loaded by the next engine and resume to the bits of a fresh run; damaged files,
// files of another checkpoint or mode, and files of another geometry are skipped with a warning.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "kernels/ops.h"
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
