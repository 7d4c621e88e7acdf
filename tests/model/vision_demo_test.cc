// The bundled vision demo (models/qwen35-tiny-kjv-vision, tools/train/README.md "The vision
// demo"): each example image that ships with it goes the way a client's image goes — decoded
// from its PNG file, preprocessed with the checkpoint's preprocessor_config.json, through the
// tower, its tokens at the image pads of the prompt the chat template renders, at multimodal
// positions — and the greedy answer names the colour and the shape the file is named after
// (examples/red_circle.png: "a red circle"). And on a held-out set of generated images
// (tests/fixtures/vision/demo_heldout: one 64×64 image of each colour and shape, and 12 each of
// 160×72 and 72×160 pixels, which the processor resizes; drawn by
// tools/train/evaluate_vision.py --write-set), the engine gives the trainer's greedy answer to
// each, and names the colour and the shape at the rates README states.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "image/image.h"
#include "image/processor.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "model/mrope.h"
#include "model/weights.h"
#include "template/chat_template.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::model {
namespace {

namespace fs = std::filesystem;

// tools/train/README.md states these rates for the shipped checkpoint on this set: per group
// (the manifest's width×height as drawn), images, colours named right, shapes named right. The
// demo's processor makes a 160×72 image 160×64 (5×2 tokens) and the engine must give the
// trainer's answers through that resize.
struct Rates {
  int n, colour, shape;
};
const std::map<std::string, Rates> kMinRight = {
    {"64x64", {36, 36, 36}}, {"160x72", {12, 12, 6}}, {"72x160", {12, 12, 11}}};

const std::string kDir = qwen35::testing::source_dir() + "/models/qwen35-tiny-kjv-vision";

struct Demo {
  tokenizer::Tokenizer tok;
  tmpl::ChatTemplate chat;
  image::ProcessorConfig processor;
  Model model;
};

// The rendered prompt of one user message (the image, then the question), tokenized, with its
// one image pad widened to the image's (h/2)·(w/2) tokens.
std::vector<int32_t> prompt_tokens(const Demo& d, int32_t image_token, int64_t n_image_tokens,
                                   const std::string& question) {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"},
                      {"content", {{{"type", "image"}}, {{"type", "text"}, {"text", question}}}}});
  auto text = d.chat.render(messages, nullptr, true, nullptr);
  EXPECT_TRUE(text.ok()) << text.message();
  auto ids = d.tok.encode(*text);
  EXPECT_TRUE(ids.ok()) << ids.message();
  std::vector<int32_t> out;
  for (int32_t t : *ids) out.insert(out.end(), t == image_token ? size_t(n_image_tokens) : 1, t);
  return out;
}

// The greedy assistant turn for one encoded image file, without the <|im_end|> that ends it.
std::string answer(Demo& d, const std::string& png, const std::string& question = "What is in the image?") {
  auto img = image::decode(qwen35::testing::read_file(png));
  EXPECT_TRUE(img.ok()) << img.message();
  auto patches = image::preprocess(*img, d.processor);
  EXPECT_TRUE(patches.ok()) << patches.message();
  const int64_t H = d.model.config().hidden, V = d.model.config().vocab;
  const std::array<int64_t, 3> grid{patches->grid_t, patches->grid_h, patches->grid_w};
  const int64_t n = grid[0] * (grid[1] / 2) * (grid[2] / 2);
  std::vector<float> rows(size_t(n * H));
  EXPECT_TRUE(d.model.encode_image(patches->rows.data(), grid[0], grid[1], grid[2], rows.data()).ok());
  const int32_t image_token = int32_t(d.model.weights().vision->config.image_token_id);
  const std::vector<int32_t> tokens = prompt_tokens(d, image_token, n, question);
  auto pos = mrope_positions(tokens, image_token, std::span(&grid, 1), kSpatialMerge);
  EXPECT_TRUE(pos.ok()) << pos.message();
  std::vector<const float*> embeddings;
  int64_t row = 0;
  for (int32_t t : tokens) embeddings.push_back(t == image_token ? rows.data() + H * row++ : nullptr);
  EXPECT_EQ(row, n);
  auto st = d.model.new_state(256);
  SequenceRows prompt{st.get(), tokens, false};
  prompt.positions = pos->pos;
  prompt.embeddings = embeddings;
  std::vector<float> logits;
  EXPECT_TRUE(d.model.forward({&prompt, 1}, &logits).ok());
  st->set_rope_delta(pos->delta);
  const int32_t im_end = (*d.tok.encode("<|im_end|>"))[0];
  std::vector<int32_t> out;
  for (int k = 0; k < 16; ++k) {
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.begin() + V) - logits.begin());
    if (next == im_end) break;
    out.push_back(next);
    SequenceRows one{st.get(), {&out.back(), 1}, false};
    EXPECT_TRUE(d.model.forward({&one, 1}, &logits).ok());
  }
  return d.tok.decode(out);
}

// Whether the answer's words name `truth` and no other of `names` (evaluate_vision.py's score).
bool names_only(const std::string& said, std::initializer_list<const char*> names, const std::string& truth) {
  std::vector<std::string> named;
  for (const char* w : names) {
    if ((" " + said + " ").find(std::string(" ") + w + " ") != std::string::npos) named.push_back(w);
  }
  return named.size() == 1 && named[0] == truth;
}

// Loaded once for both tests; null (with a failure added) when the checkpoint does not load.
Demo* demo() {
  static Demo* d = [] {
    auto tok = tokenizer::Tokenizer::load(kDir);
    auto chat = tmpl::load_chat_template(kDir);
    auto processor = image::parse_processor_config(qwen35::testing::read_file(kDir + "/preprocessor_config.json"));
    auto w = load_weights(kDir);
    if (!tok.ok() || !chat.ok() || !processor.ok() || !w.ok()) {
      ADD_FAILURE() << kDir << ": " << tok.message() << chat.message() << processor.message() << w.message();
      return static_cast<Demo*>(nullptr);
    }
    static core::ThreadPool pool(2);
    return new Demo{std::move(*tok), std::move(*chat), *processor, Model(std::move(*w), kernels::cpu_ops(), &pool)};
  }();
  return d;
}

TEST(VisionDemo, NamesTheExampleImages) {
  ASSERT_NE(demo(), nullptr);
  Demo& d = *demo();
  ASSERT_TRUE(d.model.has_vision()) << d.model.weights().vision_problem;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(kDir + "/examples")) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 2u);
  for (const fs::path& f : files) {
    const std::string stem = f.stem().string();  // COLOUR_SHAPE
    const std::string colour = stem.substr(0, stem.find('_')), shape = stem.substr(stem.find('_') + 1);
    const std::string article = std::string("aeiou").find(colour[0]) == std::string::npos ? "a " : "an ";
    const std::string turn = answer(d, f.string());
    std::printf("  %s: %s\n", f.filename().c_str(), turn.substr(turn.rfind('\n') + 1).c_str());
    // The turn is an empty think block, then the answer.
    EXPECT_EQ(turn, "\n</think>\n\n" + article + colour + " " + shape) << f;
  }
}

TEST(VisionDemo, AnswersHeldOutImagesAsTheTrainerDoes) {
  ASSERT_NE(demo(), nullptr);
  Demo& d = *demo();
  const std::string dir = qwen35::testing::source_dir() + "/tests/fixtures/vision/demo_heldout";
  const auto manifest = nlohmann::json::parse(qwen35::testing::read_file(dir + "/manifest.json"));
  const std::string question = manifest["question"];
  std::map<std::string, Rates> right;
  for (const auto& item : manifest["images"]) {
    const std::string turn = answer(d, dir + "/" + item["file"].get<std::string>(), question);
    EXPECT_EQ(turn + "<|im_end|>", item["trainer_turn"].get<std::string>()) << item["file"];
    const std::string said = turn.substr(turn.rfind('\n') + 1);
    Rates& r = right[item["group"].get<std::string>()];
    r.colour += names_only(said, {"red", "green", "blue", "yellow", "purple", "orange"}, item["colour"].get<std::string>());
    r.shape += names_only(said, {"circle", "square", "triangle", "star", "cross", "diamond"}, item["shape"].get<std::string>());
    ++r.n;
  }
  EXPECT_EQ(right.size(), kMinRight.size());
  for (const auto& [group, r] : right) {
    std::printf("  held-out %s: colour %d/%d, shape %d/%d\n", group.c_str(), r.colour, r.n, r.shape, r.n);
    auto want = kMinRight.find(group);
    ASSERT_NE(want, kMinRight.end()) << group;
    EXPECT_EQ(r.n, want->second.n) << group;
    EXPECT_GE(r.colour, want->second.colour) << group;
    EXPECT_GE(r.shape, want->second.shape) << group;
  }
}

}  // namespace
}  // namespace qwen35::model
