// The equalities of docs/design.md §6 with images, over HTTP, bit for bit (content, reasoning
// and log-probabilities): *concurrent == solo* (requests with different images at once on one
// server, and each alone), *resumed == fresh* (a second turn that repeats the image resumes from
// the prefix cache through the image, and equals a server without the cache; the same turn with
// another image of the same size resumes nothing past the image), and *drafted == plain* (MTP
// and prompt-lookup drafting).
#include <gtest/gtest.h>

#include <thread>

#include "image_http.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using namespace testing;

Json answer_of(const Json& r) {
  const Json& c = r["choices"][0];
  return {{"message", c["message"]}, {"logprobs", c["logprobs"]}, {"finish", c["finish_reason"]}};
}

Json request(const std::vector<std::string>& images, const std::string& text, int seed) {
  Json content = Json::array({text_part(text)});
  for (const auto& im : images) content.push_back(chat_image(image_file(im)));
  return {{"messages", Json::array({{{"role", "user"}, {"content", content}}})},
          {"max_tokens", 12},
          {"temperature", 0.8},
          {"seed", seed},
          {"logprobs", true},
          {"top_logprobs", 2}};
}

class ImageExactness : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    model_ = new std::string(synth_vlm(*dir_));
    ASSERT_FALSE(model_->empty());
    plain_ = new ServerProcess(*model_, {"--parallel", "4", "--ctx", "1024", "--no-prefix-cache"});
    ASSERT_TRUE(plain_->ready()) << plain_->log();
  }
  static void TearDownTestSuite() {
    delete plain_;
    delete model_;
    delete dir_;
  }
  static Json post(const ServerProcess& s, const Json& body) {
    auto [st, r] = s.post("/v1/chat/completions", body);
    EXPECT_EQ(st, 200) << r.dump();
    return r;
  }
  static TempDir* dir_;
  static std::string* model_;
  static ServerProcess* plain_;
};
TempDir* ImageExactness::dir_ = nullptr;
std::string* ImageExactness::model_ = nullptr;
ServerProcess* ImageExactness::plain_ = nullptr;

TEST_F(ImageExactness, ConcurrentEqualsSolo) {
  const std::vector<Json> reqs = {request({"png_rgb.png"}, "What is this?", 1),
                                  request({"jpeg_rgb.jpg", "png_gray.png"}, "Compare them.", 2),
                                  request({"webp_lossy.webp"}, "Describe it.", 3),
                                  request({"gif_plain.gif"}, "What is this?", 4)};
  std::vector<Json> solo;
  for (const Json& r : reqs) solo.push_back(answer_of(post(*plain_, r)));
  std::vector<Json> together(reqs.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < reqs.size(); ++i)
    threads.emplace_back([&, i] { together[i] = answer_of(post(*plain_, reqs[i])); });
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(together[i], solo[i]) << "request " << i;
}

TEST_F(ImageExactness, ResumedEqualsFresh) {
  ServerProcess cached(*model_, {"--parallel", "2", "--ctx", "1024", "--cache-interval", "64"});
  ASSERT_TRUE(cached.ready()) << cached.log();
  Json first = request({"png_rgb.png"}, "What is this?", 7);
  const Json one = post(cached, first);
  EXPECT_EQ(answer_of(one), answer_of(post(*plain_, first)));
  // Turn 2 repeats the image in its history.
  Json second = first;
  second["messages"].push_back({{"role", "assistant"}, {"content", one["choices"][0]["message"]["content"]}});
  second["messages"].push_back({{"role", "user"}, {"content", "And what colour is it?"}});
  const double hits_before = cached.metric("qwen35_prefix_cache_hit_tokens_total");
  const Json two = post(cached, second);
  EXPECT_EQ(answer_of(two), answer_of(post(*plain_, second)));
  // The prompt's first 64-token block ends inside the image (11 text tokens, then 70 image
  // tokens): resumed through it.
  EXPECT_GE(two["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>(), 64) << two.dump();
  EXPECT_GE(cached.metric("qwen35_prefix_cache_hit_tokens_total") - hits_before, 64);
  // And the tower ran once for the two turns: the second took its rows from the image cache.
  EXPECT_EQ(cached.metric("qwen35_image_encodes_total"), 1);
  EXPECT_EQ(cached.metric("qwen35_image_cache_hits_total"), 1);
  // Another image with the same grid gives the same ids: it must not resume past the image.
  Json other = second;
  other["messages"][0]["content"][1] = chat_image(image_file("png_gray.png"));
  const Json three = post(cached, other);
  EXPECT_EQ(three["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << three.dump();
  EXPECT_EQ(answer_of(three), answer_of(post(*plain_, other)));
}

TEST_F(ImageExactness, DraftedEqualsPlain) {
  for (const char* method : {"mtp", "lookup"}) {
    ServerProcess spec(*model_, {"--parallel", "2", "--ctx", "1024", "--no-prefix-cache", "--spec", method,
                                 "--draft-tokens", "3"});
    ASSERT_TRUE(spec.ready()) << spec.log();
    for (int seed : {1, 2}) {
      Json r = request({"png_rgb.png", "jpeg_rgb.jpg"}, "What is this? What is this? What is this?", seed);
      r["max_tokens"] = 24;
      EXPECT_EQ(answer_of(post(spec, r)), answer_of(post(*plain_, r))) << method << " seed " << seed;
    }
  }
}

}  // namespace
}  // namespace qwen35
