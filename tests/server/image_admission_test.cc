// Admission of images over HTTP (issue 47): requests with images are decoded on the image lane,
// never on the HTTP workers, so a text request is answered while every image thread is held and
// the image queue is full (the full queue answers 429 with Retry-After); the prompt's length and
// a request's image memory are refused from the image headers before any pixel is decoded (the
// decode counter of /metrics does not move); and SIGTERM ends a server whose image threads are
// all held. The image threads are held by the server's test gate (QWEN35_TEST_IMAGE_GATE: a job
// waits for a file to exist), so every wait here is on a state.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <future>

#include "image_http.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using namespace testing;

// A valid GIF whose first frame (1 × 1) sits on a canvas of w × h: a few dozen bytes that decode
// to w·h·4 bytes of pixels (the GIF decoder draws the whole canvas).
std::string gif_canvas(int w, int h) {
  std::string g = "GIF89a";
  g += char(w & 255), g += char(w >> 8), g += char(h & 255), g += char(h >> 8);
  g += '\x80', g += '\0', g += '\0';           // a global table of 2 colors
  g += std::string("\xff\xff\xff\0\0\0", 6);  // white, black
  g += ',';                                    // the image descriptor: (0, 0), 1 × 1
  g += std::string("\0\0\0\0\x01\0\x01\0\0", 9);
  g += std::string("\x02\x02\x44\x01\0", 5);  // LZW minimum code size 2: clear, 0, end
  g += ';';
  return g;
}

Json chat_with(const std::vector<std::string>& images, int max_tokens = 2) {
  Json content = Json::array({text_part("Describe.")});
  for (const auto& b : images) content.push_back(chat_image(b));
  return {{"messages", Json::array({{{"role", "user"}, {"content", content}}})},
          {"max_tokens", max_tokens},
          {"temperature", 0}};
}

// Polls /metrics for a state (a minute at most: a safety net, not a timing).
bool wait_metric(const ServerProcess& s, const std::string& name, double want) {
  for (int i = 0; i < 3000; ++i) {
    if (s.metric(name) == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class ImageAdmission : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = synth_vlm(dir_);
    ASSERT_FALSE(model_.empty());
  }
  // A server whose image lane waits at `gate` (a file not yet made) when `gated`.
  std::unique_ptr<ServerProcess> start(const std::vector<std::string>& flags, bool gated) {
    if (gated) setenv("QWEN35_TEST_IMAGE_GATE", gate().c_str(), 1);
    auto s = std::make_unique<ServerProcess>(model_, flags);
    unsetenv("QWEN35_TEST_IMAGE_GATE");
    return s;
  }
  std::string gate() { return dir_.file("gate"); }
  void open_gate() { std::ofstream(gate()) << "open"; }

  TempDir dir_;
  std::string model_;
};

TEST_F(ImageAdmission, ATextRequestIsAnsweredWhileEveryImageThreadIsHeld) {
  auto srv = start({"--parallel", "2", "--ctx", "1024", "--image-threads", "2", "--image-queue", "1"}, true);
  ASSERT_TRUE(srv->ready()) << srv->log();
  const std::string png = image_file("png_rgb.png");
  std::vector<std::future<std::pair<int, Json>>> held;
  for (int i = 0; i < 2; ++i)
    held.push_back(std::async(std::launch::async, [&] { return srv->post("/v1/chat/completions", chat_with({png})); }));
  ASSERT_TRUE(wait_metric(*srv, "qwen35_image_lane_busy", 2)) << srv->log();
  held.push_back(std::async(std::launch::async, [&] { return srv->post("/v1/chat/completions", chat_with({png})); }));
  ASSERT_TRUE(wait_metric(*srv, "qwen35_image_lane_queued", 1));
  // The queue is full: the next image request is refused at once, and says when to retry.
  auto refused = srv->client().post("/v1/chat/completions", chat_with({png}).dump());
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.header("Retry-After"), "1");
  EXPECT_NE(refused.body.find("--image-queue"), std::string::npos) << refused.body;
  // Text goes through the HTTP workers (4 of them, none of which holds an image), to the engine.
  for (int i = 0; i < 6; ++i) {
    auto [s, r] = srv->post("/v1/chat/completions", chat_with({}));
    EXPECT_EQ(s, 200) << r.dump();
  }
  EXPECT_EQ(srv->get("/health").first, 200);
  for (auto& f : held) EXPECT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  open_gate();
  for (auto& f : held) {
    auto [s, r] = f.get();
    EXPECT_EQ(s, 200) << r.dump();
    EXPECT_EQ(r["usage"]["prompt_tokens_details"]["image_tokens"], kTokens24x16);
  }
  EXPECT_EQ(srv->metric("qwen35_image_lane_refused_total"), 1);
}

// SIGTERM with every image thread held and a request queued: the process ends, and the queued
// request is answered (503: shutting down) rather than dropped.
TEST_F(ImageAdmission, SigtermEndsAServerWhoseImageThreadsAreHeld) {
  auto srv = start({"--ctx", "1024", "--image-threads", "1", "--image-queue", "2"}, true);
  ASSERT_TRUE(srv->ready()) << srv->log();
  const std::string png = image_file("png_rgb.png");
  std::vector<std::future<std::pair<int, Json>>> held;
  held.push_back(std::async(std::launch::async, [&] { return srv->post("/v1/chat/completions", chat_with({png})); }));
  ASSERT_TRUE(wait_metric(*srv, "qwen35_image_lane_busy", 1));
  held.push_back(std::async(std::launch::async, [&] { return srv->post("/v1/chat/completions", chat_with({png})); }));
  ASSERT_TRUE(wait_metric(*srv, "qwen35_image_lane_queued", 1));
  EXPECT_EQ(srv->stop(), 0) << srv->log();
  for (auto& f : held) {
    auto [s, r] = f.get();
    EXPECT_TRUE(s == 503 || s == 200 || s == -1) << s << " " << r.dump();
  }
}

// The prompt's length and a request's memory are known from the headers: both refusals come
// before any image is decoded. A 2000 × 2000 canvas is 62 · 62 = 3844 tokens (over --ctx 1024);
// a 600 × 600 one is 361 tokens, and ~13 MiB to decode (over --image-request-mb 6).
TEST_F(ImageAdmission, RefusalsFromTheHeadersComeBeforeDecoding) {
  auto srv = start({"--ctx", "1024", "--image-request-mb", "6", "--image-mem-mb", "8"}, false);
  ASSERT_TRUE(srv->ready()) << srv->log();
  auto [s0, r0] = srv->post("/v1/chat/completions", chat_with({image_file("png_rgb.png")}));
  ASSERT_EQ(s0, 200) << r0.dump();
  const double decoded = srv->metric("qwen35_image_decodes_total");
  ASSERT_EQ(decoded, 1);
  auto [s1, r1] = srv->post("/v1/chat/completions", chat_with({gif_canvas(2000, 2000)}));
  EXPECT_EQ(s1, 400) << r1.dump();
  EXPECT_NE(r1.dump().find("tokens with its images, more than the context of 1024"), std::string::npos) << r1.dump();
  auto [s2, r2] = srv->post("/tokenize", chat_with({gif_canvas(2000, 2000)}));
  EXPECT_EQ(s2, 400) << r2.dump();
  auto [s3, r3] = srv->post("/v1/chat/completions", chat_with({gif_canvas(600, 600)}));
  EXPECT_EQ(s3, 400) << r3.dump();
  EXPECT_NE(r3.dump().find("--image-request-mb"), std::string::npos) << r3.dump();
  // Eight small images together: each fits, all eight do not.
  auto [s4, r4] = srv->post("/v1/chat/completions", chat_with(std::vector<std::string>(8, gif_canvas(300, 300))));
  EXPECT_EQ(s4, 400) << r4.dump();
  EXPECT_EQ(srv->metric("qwen35_image_decodes_total"), decoded);
  EXPECT_EQ(srv->metric("qwen35_image_memory_bytes"), 0);
  auto [s5, r5] = srv->post("/v1/chat/completions", chat_with({gif_canvas(300, 300)}));
  EXPECT_EQ(s5, 200) << r5.dump();
  EXPECT_EQ(srv->metric("qwen35_image_decodes_total"), decoded + 1);
}

// The server-wide bound: a request's image memory is reserved before decoding, and a request
// that does not fit beside the reservations held now is refused at once with 429 and
// Retry-After (never parked). A 300 × 300 canvas takes between a half and the whole of 6 MiB to
// decode (asserted from the gauge), so one held reservation leaves no room for a second.
TEST_F(ImageAdmission, TheServerWideImageMemoryIsA429WhenTaken) {
  setenv("QWEN35_TEST_IMAGE_HOLD", dir_.file("hold").c_str(), 1);
  auto srv = start({"--ctx", "1024", "--image-threads", "2", "--image-request-mb", "6", "--image-mem-mb", "6"}, false);
  unsetenv("QWEN35_TEST_IMAGE_HOLD");
  ASSERT_TRUE(srv->ready()) << srv->log();
  const std::string img = gif_canvas(300, 300);
  auto held = std::async(std::launch::async, [&] { return srv->post("/v1/chat/completions", chat_with({img})); });
  double reserved = 0;
  for (int i = 0; i < 3000 && reserved == 0; ++i) {
    reserved = srv->metric("qwen35_image_memory_bytes");
    if (reserved == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GT(reserved, 3.0 * (1 << 20)) << srv->log();
  ASSERT_LE(reserved, 6.0 * (1 << 20));
  auto refused = srv->client().post("/v1/chat/completions", chat_with({img}).dump());
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.header("Retry-After"), "1");
  EXPECT_NE(refused.body.find("--image-mem-mb 6"), std::string::npos) << refused.body;
  // Text does not touch the image budget.
  EXPECT_EQ(srv->post("/v1/chat/completions", chat_with({})).first, 200);
  std::ofstream(dir_.file("hold")) << "open";
  auto [s, r] = held.get();
  EXPECT_EQ(s, 200) << r.dump();
  EXPECT_TRUE(wait_metric(*srv, "qwen35_image_memory_bytes", 0));
  // Given back, the same request fits again.
  EXPECT_EQ(srv->post("/v1/chat/completions", chat_with({img})).first, 200);
}

TEST_F(ImageAdmission, ImageThreadsHaveABound) {
  auto r = run_qwen35("serve -m " + model_ + " --port 0 --image-threads 5000");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--image-threads must be in [1, 64], got 5000"), std::string::npos) << r.err;
  auto m = run_qwen35("serve -m " + model_ + " --port 0 --image-request-mb 512 --image-mem-mb 256");
  EXPECT_EQ(m.exit_code, 1) << m.err;
  EXPECT_NE(m.err.find("--image-mem-mb at least as large"), std::string::npos) << m.err;
}

}  // namespace
}  // namespace qwen35
