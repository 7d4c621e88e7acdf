// Images on the command line, end to end on `qwen35 synth --preset tiny` checkpoints (which have
// a random tower): run --image puts each image's tokens in the chat prompt, the same image and
// seed give the same answer, the interactive chat attaches images with /image and resumes a
// history holding one from the prefix cache, GGUF models find their mmproj file, bench --image
// reports the image path, and bad files and text-only checkpoints fail with one clear line.
//
// Expected token counts are worked out by hand from the processor's published rule (smart_resize
// to multiples of 32 within [65536, 16777216] pixels; one token per 32×32 pixels):
//   png_rgb.png, 24×16: 32×32 is under 65536 pixels, so beta = sqrt(65536 / (24·16)) = 13.064;
//     width ceil(24·13.064 / 32)·32 = 320, height ceil(16·13.064 / 32)·32 = 224: 10·7 = 70 tokens.
//   jpeg_rgb.jpg, 40×24: beta = sqrt(65536 / 960) = 8.262; width ceil(10.33)·32 = 352, height
//     ceil(6.20)·32 = 224: 11·7 = 77 tokens.
//   a 64×64 image: beta = 4, 256×256: 8·8 = 64 tokens.
// An image part renders as <|vision_start|><|image_pad|><|vision_end|> before the text, so the
// prompt grows by its tokens + 2.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"
#include "tiny_checkpoint_suite.h"

namespace qwen35 {
namespace {

using testing::run_qwen35;
using testing::TempDir;

std::string image(const std::string& name) { return testing::source_dir() + "/tests/fixtures/images/" + name; }

// Every "[prompt: N tokens" of the closing lines.
std::vector<long> prompt_counts(const std::string& err) {
  std::vector<long> n;
  for (size_t p = err.find("[prompt: "); p != std::string::npos; p = err.find("[prompt: ", p + 1))
    n.push_back(std::stol(err.substr(p + 9)));
  return n;
}

void expect_one_line_error(const testing::CommandResult& r, int code, const std::string& expect) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "more than one line: " << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << r.err;
}

class RunImageTest : public testing::TinyCheckpointSuite<RunImageTest> {};

TEST_F(RunImageTest, ImageTokensAreInThePromptAndASeedRepeatsTheAnswer) {
  const std::string q = " -p 'What is in the picture?' -n 12 --seed 3 --no-think";
  auto text = run_qwen35("run -m " + model() + " --chat" + q);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  auto one = run_qwen35("run -m " + model() + " --image " + image("png_rgb.png") + q);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_FALSE(one.out.empty());
  EXPECT_NE(one.err.find("320x224 pixels to the tower, 70 tokens"), std::string::npos) << one.err;
  const auto n0 = prompt_counts(text.err), n1 = prompt_counts(one.err);
  ASSERT_EQ(n0.size(), 1u) << text.err;
  ASSERT_EQ(n1.size(), 1u) << one.err;
  EXPECT_EQ(n1[0], n0[0] + 70 + 2);
  // Two images, in the order given.
  auto two = run_qwen35("run -m " + model() + " --image " + image("png_rgb.png") + " --image " +
                        image("jpeg_rgb.jpg") + q);
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const auto n2 = prompt_counts(two.err);
  ASSERT_EQ(n2.size(), 1u) << two.err;
  EXPECT_EQ(n2[0], n0[0] + 70 + 2 + 77 + 2);
  EXPECT_LT(two.err.find("70 tokens"), two.err.find("77 tokens")) << two.err;
  // The same image and seed: the same answer.
  auto again = run_qwen35("run -m " + model() + " --image " + image("png_rgb.png") + q);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, one.out);
}

// The chat: /image attaches to the next message; a follow-up turn resumes the history, image
// included, from the prefix cache and answers what a chat computing it afresh answers.
TEST_F(RunImageTest, ChatAttachesImagesAndResumesThroughThem) {
  TempDir d;
  {
    std::ofstream f(d.file("in"));
    f << "/help\n/image " << image("no_such_file.png") << "\n/image " << image("png_rgb.png")
      << "\nWhat is in the picture?\nAnd its colour?\n/image " << image("jpeg_rgb.jpg") << "\nAnd this one?\n";
  }
  const std::string base = "run -m " + model() + " -n 10 --no-think --seed 5 < " + d.file("in");
  auto cached = run_qwen35(base);
  auto fresh = run_qwen35(base + " --no-prefix-cache");
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(cached.out, fresh.out);
  EXPECT_NE(cached.out.find("/image PATH"), std::string::npos) << cached.out;  // the help
  EXPECT_NE(cached.err.find("qwen35 run: /image: cannot read " + image("no_such_file.png")), std::string::npos)
      << cached.err;
  const auto c = prompt_counts(cached.err), f = prompt_counts(fresh.err);
  ASSERT_EQ(c.size(), 3u) << cached.err;
  ASSERT_EQ(f.size(), 3u) << fresh.err;
  EXPECT_EQ(c[0], f[0]);
  EXPECT_LT(c[1], f[1]) << cached.err;
  EXPECT_LT(c[2], f[2]) << cached.err;
  // The history holds the first image: the third prompt has both images' tokens.
  EXPECT_GT(f[2], f[1] + 77) << fresh.err;
}

TEST_F(RunImageTest, BadFilesAndTextOnlyCheckpointsFailCleanly) {
  const std::string run = "run -m " + model() + " -p hi -n 2";
  expect_one_line_error(run_qwen35(run + " --image " + image("missing.png")), 1, "cannot read");
  expect_one_line_error(run_qwen35(run + " --image " + testing::source_dir() + "/tests"), 1, "directory");
  expect_one_line_error(run_qwen35(run + " --image " + image("zero_width.png")), 1, "zero_width.png: PNG");
  expect_one_line_error(run_qwen35(run + " --image " + image("bomb.png")), 1, "bomb.png: PNG");
  TempDir d;
  testing::write_file(d.file("text.txt"), "not an image at all");
  expect_one_line_error(run_qwen35(run + " --image " + d.file("text.txt")), 1, "text.txt");
  // Text that spells the placeholder itself would misplace the image.
  expect_one_line_error(
      run_qwen35("run -m " + model() + " -p 'x <|image_pad|>' -n 2 -q --image " + image("png_rgb.png")), 1,
      "image placeholder");
  // A checkpoint without a tower: a usage error, status 2.
  auto r = run_qwen35("synth --preset tiny --vision off --quiet --out " + d.file("text_only"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_one_line_error(run_qwen35("run -m " + d.file("text_only") + " -p hi --image " + image("png_rgb.png")), 2,
                        "takes no images");
  expect_one_line_error(run_qwen35("bench -m " + d.file("text_only") + " --image 64x64"), 2, "no vision tower");
  expect_one_line_error(run_qwen35(run + " --mmproj x.gguf"), 1, "--mmproj applies to GGUF models");
  expect_one_line_error(run_qwen35("bench -m " + model() + " --image 64"), 1, "WxH");
}

// A GGUF model takes its tower from the mmproj file beside it, or the one --mmproj names.
TEST_F(RunImageTest, GgufFindsItsMmproj) {
  TempDir d;
  auto r = run_qwen35("synth --preset tiny --format gguf --vision on --quiet --out " + d.file("m.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(std::filesystem::exists(d.file("mmproj-m.gguf")));
  const std::string q = " -p 'What is it?' -n 6 --seed 2 --image " + image("png_rgb.png");
  auto found = run_qwen35("run -m " + d.file("m.gguf") + q);
  ASSERT_EQ(found.exit_code, 0) << found.err;
  EXPECT_NE(found.err.find("70 tokens"), std::string::npos) << found.err;
  std::filesystem::create_directory(d.file("elsewhere"));
  std::filesystem::rename(d.file("mmproj-m.gguf"), d.file("elsewhere/tower.gguf"));
  expect_one_line_error(run_qwen35("run -m " + d.file("m.gguf") + q), 2, "takes no images");
  auto named = run_qwen35("run -m " + d.file("m.gguf") + " --mmproj " + d.file("elsewhere/tower.gguf") + q);
  ASSERT_EQ(named.exit_code, 0) << named.err;
  EXPECT_EQ(named.out, found.out);
  expect_one_line_error(run_qwen35("run -m " + d.file("m.gguf") + " --mmproj " + d.file("m.gguf") + q), 1,
                        "--mmproj");
}

// bench --image times the processor, the tower and the first token of an image + question
// (times are measured, never asserted: only their presence and the image's geometry).
TEST_F(RunImageTest, BenchImageReportsThePath) {
  auto r = run_qwen35("bench -m " + model() + " --image 64x64 -r 1 -t 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["resized_width"], 256);
  EXPECT_EQ(j["resized_height"], 256);
  EXPECT_EQ(j["image_tokens"], 64);
  EXPECT_EQ(j["patches"], 256);
  EXPECT_EQ(j["tower_depth"], 2);
  for (const char* k : {"preprocess_ms", "tower_ms", "prefill_ms", "ttft_ms"}) EXPECT_GT(j[k].get<double>(), 0) << k;
  EXPECT_GT(j["prompt_tokens"].get<int64_t>(), 64 + 2);
  EXPECT_GE(j["ttft_ms"].get<double>(), j["tower_ms"].get<double>());
}

}  // namespace
}  // namespace qwen35
