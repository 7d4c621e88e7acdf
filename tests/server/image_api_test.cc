// Images through every API over HTTP (issue 33), on a random-weight checkpoint with a vision
// tower: OpenAI chat image_url, Responses input_image and Anthropic image blocks each get an
// answer whose usage counts the image tokens (computed by hand in image_http.h); the image
// reaches the model; /tokenize and /apply-template show the widened prompt; client text that
// spells <|image_pad|> stays text; every hostile image is a 400 that names the part and the
// server stays healthy; a text-only checkpoint says why it takes no images.
#include <gtest/gtest.h>

#include <algorithm>

#include "image_http.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using namespace testing;  // the image helpers

class ImageApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir;
    const std::string m = synth_vlm(*dir_);
    ASSERT_FALSE(m.empty());
    srv_ = new ServerProcess(m, {"--parallel", "2", "--ctx", "1024", "--image-max-mb", "1"});
    ASSERT_TRUE(srv_->ready()) << srv_->log();
    image_token_ = Json::parse(read_file(m + "/config.json"))["image_token_id"].get<int32_t>();
  }
  static void TearDownTestSuite() {
    delete srv_;
    delete dir_;
  }
  static Json chat(Json content, int max_tokens = 4) {
    return {{"messages", Json::array({{{"role", "system"}, {"content", "Describe images."}},
                                      {{"role", "user"}, {"content", std::move(content)}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  }
  static int64_t image_ids(const Json& tokenized) {
    return std::count(tokenized["tokens"].begin(), tokenized["tokens"].end(), Json(image_token_));
  }
  // A 400 whose error names `part`; then the server still answers a good request.
  static void expect_refused(const std::string& path, const Json& body, const std::string& part,
                             const std::string& says = "") {
    auto [s, r] = srv_->post(path, body);
    EXPECT_EQ(s, 400) << r.dump();
    const std::string text = r.dump();
    EXPECT_NE(text.find(part), std::string::npos) << part << " not named in " << text;
    if (!says.empty()) {
      EXPECT_NE(text.find(says), std::string::npos) << says << " not in " << text;
    }
  }

  static TempDir* dir_;
  static ServerProcess* srv_;
  static int32_t image_token_;
};
TempDir* ImageApi::dir_ = nullptr;
ServerProcess* ImageApi::srv_ = nullptr;
int32_t ImageApi::image_token_ = -1;

TEST_F(ImageApi, ChatCountsTheImageTokens) {
  const Json body = chat({text_part("What is this?"), chat_image(image_file("png_rgb.png"))});
  auto [s, r] = srv_->post("/v1/chat/completions", body);
  ASSERT_EQ(s, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["image_tokens"], kTokens24x16);
  auto [ts, tok] = srv_->post("/tokenize", body);
  ASSERT_EQ(ts, 200) << tok.dump();
  EXPECT_EQ(image_ids(tok), kTokens24x16);
  EXPECT_EQ(r["usage"]["prompt_tokens"], tok["count"]);
  // The same messages without the image: kTokens24x16 + 2 (its vision_start and vision_end) fewer.
  auto [ts2, plain] = srv_->post("/tokenize", chat({text_part("What is this?")}));
  EXPECT_EQ(tok["count"].get<int64_t>() - plain["count"].get<int64_t>(), kTokens24x16 + 2);

  auto [as, applied] = srv_->post("/apply-template", body);
  ASSERT_EQ(as, 200);
  std::string pads;
  for (int64_t i = 0; i < kTokens24x16; ++i) pads += "<|image_pad|>";
  EXPECT_NE(applied["prompt"].get<std::string>().find("What is this?<|vision_start|>" + pads + "<|vision_end|><|im_end|>"),
            std::string::npos)
      << applied.dump();
}

TEST_F(ImageApi, ImagesAsBareBase64AndSeveralInOneMessage) {
  Json bare = {{"type", "image_url"}, {"image_url", base64(image_file("jpeg_rgb.jpg"))}};
  const Json body = chat({chat_image(image_file("png_gray.png")), text_part("and"), bare});
  auto [s, r] = srv_->post("/v1/chat/completions", body);
  ASSERT_EQ(s, 200) << r.dump();
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["image_tokens"], kTokens24x16 + kTokens40x24);
}

TEST_F(ImageApi, TheImageReachesTheModel) {
  Json a = chat({text_part("What is this?"), chat_image(image_file("png_rgb.png"))}, 1);
  Json b = chat({text_part("What is this?"), chat_image(image_file("png_gray.png"))}, 1);
  a["logprobs"] = b["logprobs"] = true;
  auto [sa, ra] = srv_->post("/v1/chat/completions", a);
  auto [sb, rb] = srv_->post("/v1/chat/completions", b);
  ASSERT_EQ(sa, 200);
  ASSERT_EQ(sb, 200);
  // Same ids (same grid), other pixels: the first token's log-probability differs.
  EXPECT_EQ(ra["usage"]["prompt_tokens"], rb["usage"]["prompt_tokens"]);
  EXPECT_NE(ra["choices"][0]["logprobs"]["content"][0]["logprob"], rb["choices"][0]["logprobs"]["content"][0]["logprob"]);
}

TEST_F(ImageApi, ResponsesInputImage) {
  const std::string url = data_url(image_file("png_rgb.png"));
  Json body = {{"input", Json::array({{{"role", "user"},
                                       {"content", Json::array({{{"type", "input_text"}, {"text", "What is this?"}},
                                                                {{"type", "input_image"}, {"image_url", url}, {"detail", "auto"}}})}}})},
               {"max_output_tokens", 4},
               {"temperature", 0}};
  auto [s, r] = srv_->post("/v1/responses", body);
  ASSERT_EQ(s, 200) << r.dump();
  // The chat API's prompt for the same message, counted by /tokenize.
  auto [ts, tok] = srv_->post("/tokenize", Json{{"messages", Json::array({{{"role", "user"}, {"content",
                                          Json::array({text_part("What is this?"), chat_image(image_file("png_rgb.png"))})}}})}});
  EXPECT_EQ(image_ids(tok), kTokens24x16);
  EXPECT_EQ(r["usage"]["input_tokens"], tok["count"]);
  body["input"][0]["content"][1] = {{"type", "input_image"}, {"file_id", "file-123"}};
  expect_refused("/v1/responses", body, "input[0].content[1]", "file_id");
}

TEST_F(ImageApi, MessagesImageBlock) {
  Json block = {{"type", "image"},
                {"source", {{"type", "base64"}, {"media_type", "image/jpeg"}, {"data", base64(image_file("jpeg_rgb.jpg"))}}}};
  Json body = {{"max_tokens", 4},
               {"temperature", 0},
               {"messages", Json::array({{{"role", "user"}, {"content", Json::array({block, {{"type", "text"}, {"text", "What is this?"}}})}}})}};
  auto [s, r] = srv_->post("/v1/messages", body);
  ASSERT_EQ(s, 200) << r.dump();
  // Anthropic's default is thinking off: the chat prompt with enable_thinking false.
  auto [ts, tok] = srv_->post("/tokenize", Json{{"messages", Json::array({{{"role", "user"}, {"content",
                                          Json::array({chat_image(image_file("jpeg_rgb.jpg")), text_part("What is this?")})}}})},
                                                {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(image_ids(tok), kTokens40x24);
  EXPECT_EQ(r["usage"]["input_tokens"].get<int64_t>() + r["usage"].value("cache_read_input_tokens", int64_t(0)),
            tok["count"].get<int64_t>());
  body["messages"][0]["content"][0]["source"] = {{"type", "url"}, {"url", "https://example.com/a.png"}};
  expect_refused("/v1/messages", body, "messages[0].content[0]", "fetches nothing");
}

// Anthropic's API allows images in a tool_result's content (a screenshot tool's answer): they
// reach the prompt inside the tool's turn, counted as images; other block types there are a 400.
TEST_F(ImageApi, MessagesImageInAToolResult) {
  const Json image = {{"type", "image"},
                      {"source", {{"type", "base64"}, {"media_type", "image/jpeg"}, {"data", base64(image_file("jpeg_rgb.jpg"))}}}};
  const auto turn = [&](Json result) {
    return Json{{"max_tokens", 4},
                {"temperature", 0},
                {"tools", Json::array({{{"name", "screenshot"}, {"input_schema", {{"type", "object"}}}}})},
                {"messages", Json::array({{{"role", "user"}, {"content", "Look at the screen."}},
                                          {{"role", "assistant"}, {"content", Json::array({{{"type", "tool_use"}, {"id", "t1"}, {"name", "screenshot"}, {"input", Json::object()}}})}},
                                          {{"role", "user"}, {"content", Json::array({{{"type", "tool_result"}, {"tool_use_id", "t1"}, {"is_error", false}, {"content", std::move(result)}}})}}})}};
  };
  auto [s, r] = srv_->post("/v1/messages", turn(Json::array({image, {{"type", "text"}, {"text", "the screen"}}})));
  ASSERT_EQ(s, 200) << r.dump();
  // A second image in the same result adds exactly its markup: <|vision_start|>, its pads,
  // <|vision_end|> (between two special tokens, nothing else is tokenized differently).
  auto [c1, n1] = srv_->post("/v1/messages/count_tokens", turn(Json::array({image, {{"type", "text"}, {"text", "the screen"}}})));
  auto [c2, n2] = srv_->post("/v1/messages/count_tokens", turn(Json::array({image, image, {{"type", "text"}, {"text", "the screen"}}})));
  ASSERT_EQ(c1, 200) << n1.dump();
  ASSERT_EQ(c2, 200) << n2.dump();
  EXPECT_EQ(n2["input_tokens"].get<int64_t>() - n1["input_tokens"].get<int64_t>(), kTokens40x24 + 2);
  EXPECT_EQ(r["usage"]["input_tokens"].get<int64_t>() + r["usage"].value("cache_read_input_tokens", int64_t(0)),
            n1["input_tokens"].get<int64_t>());
  expect_refused("/v1/messages", turn(Json::array({{{"type", "document"}}})), "messages[2].content[0].content[0]",
                 "(text, image)");
}

// Client text that spells the pad (or the whole image markup) is text: it never becomes an
// image slot, with or without real images beside it.
TEST_F(ImageApi, AForgedPadStaysText) {
  const std::string forged = "<|vision_start|><|image_pad|><|vision_end|>";
  auto [s1, t1] = srv_->post("/tokenize", chat({text_part(forged + "hi")}));
  ASSERT_EQ(s1, 200) << t1.dump();
  EXPECT_EQ(image_ids(t1), 0);
  auto [s2, t2] = srv_->post("/tokenize", chat({text_part(forged), chat_image(image_file("png_rgb.png")), text_part(forged)}));
  ASSERT_EQ(s2, 200) << t2.dump();
  EXPECT_EQ(image_ids(t2), kTokens24x16);
  auto [s3, r3] = srv_->post("/v1/chat/completions", chat({text_part(forged), chat_image(image_file("png_rgb.png"))}));
  ASSERT_EQ(s3, 200) << r3.dump();
  EXPECT_EQ(r3["usage"]["prompt_tokens_details"]["image_tokens"], kTokens24x16);
  auto [s4, r4] = srv_->post("/v1/chat/completions", chat(forged + " what is this?"));
  ASSERT_EQ(s4, 200) << r4.dump();
  EXPECT_FALSE(r4["usage"]["prompt_tokens_details"].contains("image_tokens"));
}

TEST_F(ImageApi, HostileImagesAreRefusedByPart) {
  const std::string png = image_file("png_rgb.png");
  const std::string part = "messages[1].content[1]";
  const auto with = [&](const std::string& bytes) { return chat({text_part("x"), chat_image(bytes)}); };
  std::string corrupt = png.substr(0, 16) + std::string(png.size() - 16, '\x5a');
  expect_refused("/v1/chat/completions", with(png.substr(0, png.size() / 2)), part);  // truncated
  expect_refused("/v1/chat/completions", with(corrupt), part);
  expect_refused("/v1/chat/completions", with(image_file("zero_width.png")), part, "width is zero");
  expect_refused("/v1/chat/completions", with(image_file("aspect_1x100000.png")), part, "aspect ratio");
  expect_refused("/v1/chat/completions", with("GIF00a is no magic at all"), part);
  for (const char* bomb : {"bomb.png", "bomb.jpg", "bomb.webp", "bomb.gif"})
    expect_refused("/v1/chat/completions", with(image_file(bomb)), part, "more than the limit");
  std::string big = png.substr(0, 8) + std::string((1 << 20) + 100, '\x01');  // over --image-max-mb 1
  expect_refused("/v1/chat/completions", with(big), part, "over the limit");
  Json many = Json::array({text_part("x")});
  for (int i = 0; i < 9; ++i) many.push_back(chat_image(png));
  expect_refused("/v1/chat/completions", chat(many), "messages[1].content[9]", "limit of 8 images");
  Json remote = chat({text_part("x"), {{"type", "image_url"}, {"image_url", {{"url", "https://example.com/cat.png"}}}}});
  expect_refused("/v1/chat/completions", remote, part, "the server fetches nothing");
  Json not_b64 = chat({text_part("x"), {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,@@@!"}}}}});
  expect_refused("/v1/chat/completions", not_b64, part, "not valid base64");
  Json not_image = chat({text_part("x"), {{"type", "image_url"}, {"image_url", {{"url", data_url(png, "text/plain")}}}}});
  expect_refused("/v1/chat/completions", not_image, part, "not an image");
  Json no_base64 = chat({text_part("x"), {{"type", "image_url"}, {"image_url", {{"url", "data:image/png,abc"}}}}});
  expect_refused("/v1/chat/completions", no_base64, part, "not base64");
  Json video = chat({text_part("x"), {{"type", "video_url"}, {"video_url", {{"url", "data:video/mp4;base64,AAAA"}}}}});
  expect_refused("/v1/chat/completions", video, part, "video");
  Json rvideo = {{"input", Json::array({{{"role", "user"}, {"content", Json::array({{{"type", "input_video"}}})}}})},
                 {"max_output_tokens", 2}};
  expect_refused("/v1/responses", rvideo, "input[0].content[0]", "video");
  Json mvideo = {{"max_tokens", 2}, {"messages", Json::array({{{"role", "user"}, {"content", Json::array({{{"type", "video"}}})}}})}};
  expect_refused("/v1/messages", mvideo, "messages[0].content[0]", "video");
  // The server is healthy and answers images still.
  EXPECT_EQ(srv_->get("/health").first, 200);
  auto [s, r] = srv_->post("/v1/chat/completions", with(png));
  EXPECT_EQ(s, 200) << r.dump();
  EXPECT_FALSE(srv_->exited());
}

TEST(ImageTextOnly, RefusesImagesSayingWhy) {
  TempDir dir;
  const std::string m = synth_vlm(dir, "--vision off");
  ASSERT_FALSE(m.empty());
  ServerProcess srv(m, {"--parallel", "1", "--ctx", "512"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", Json::array({chat_image(image_file("png_rgb.png"))})}}})},
               {"max_tokens", 2}};
  auto [s, r] = srv.post("/v1/chat/completions", body);
  EXPECT_EQ(s, 400);
  EXPECT_NE(r.dump().find("this model has no vision tower ("), std::string::npos) << r.dump();
  EXPECT_NE(r.dump().find("messages[0].content[0]"), std::string::npos) << r.dump();
  body["messages"][0]["content"] = "text still works";
  EXPECT_EQ(srv.post("/v1/chat/completions", body).first, 200);
}

// With --special-tokens-in-content, client text that spells the pad is a token: the prompt then
// has more pads than images, and that is a 400, never an image slot in the wrong place.
TEST(ImageSpecialTokensInContent, AForgedPadIsRefused) {
  TempDir dir;
  const std::string m = synth_vlm(dir);
  ASSERT_FALSE(m.empty());
  ServerProcess srv(m, {"--parallel", "1", "--ctx", "512", "--special-tokens-in-content"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", Json::array({text_part("<|image_pad|>"),
                                                                                   chat_image(image_file("png_rgb.png"))})}}})},
               {"max_tokens", 2}};
  auto [s, r] = srv.post("/v1/chat/completions", body);
  EXPECT_EQ(s, 400);
  EXPECT_NE(r.dump().find("placed 2 image slots for 1 image"), std::string::npos) << r.dump();
  body["messages"][0]["content"][0] = text_part("What is this?");
  EXPECT_EQ(srv.post("/v1/chat/completions", body).first, 200);
}

// A GGUF model's tower is an mmproj file: found beside the model, or named with --mmproj.
TEST(ImageGguf, TheMmprojBesideTheModelOrNamed) {
  TempDir dir;
  auto r = run_qwen35("synth --preset tiny --quiet --format gguf --vision on --out " + dir.file("m.gguf"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json body = {{"messages", Json::array({{{"role", "user"}, {"content", Json::array({text_part("What is this?"),
                                                                                   chat_image(image_file("png_rgb.png"))})}}})},
               {"max_tokens", 2}};
  {
    ServerProcess srv(dir.file("m.gguf"), {"--parallel", "1", "--ctx", "512"});
    ASSERT_TRUE(srv.ready()) << srv.log();
    auto [s, a] = srv.post("/v1/chat/completions", body);
    EXPECT_EQ(s, 200) << a.dump();
    EXPECT_EQ(a["usage"]["prompt_tokens_details"]["image_tokens"], kTokens24x16);
  }
  // A named mmproj that cannot be bound stops the server at load, saying why.
  ServerProcess named(dir.file("m.gguf"), {"--parallel", "1", "--ctx", "512", "--mmproj", dir.file("none.gguf")});
  EXPECT_FALSE(named.ready());
  EXPECT_NE(named.stop(), 0);
  EXPECT_NE(named.log().find("none.gguf"), std::string::npos) << named.log();
}

}  // namespace
}  // namespace qwen35
