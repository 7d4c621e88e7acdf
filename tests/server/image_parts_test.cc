// server/image_parts.h without a model: base64 against RFC 4648's test vectors, data: URLs and
// their refusals, and the content parts the chat template gets for a message with images.
#include "server/image_parts.h"

#include <gtest/gtest.h>

namespace qwen35::server {
namespace {

TEST(Base64, Rfc4648Vectors) {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""}, {"Zg==", "f"}, {"Zm8=", "fo"}, {"Zm9v", "foo"}, {"Zm9vYg==", "foob"}, {"Zm9vYmE=", "fooba"},
      {"Zm9vYmFy", "foobar"}};
  for (const auto& [in, want] : vectors) {
    std::string out;
    EXPECT_TRUE(base64_decode(in, &out)) << in;
    EXPECT_EQ(out, want) << in;
  }
  std::string out;
  EXPECT_TRUE(base64_decode("Zm9v\r\nYmFy", &out));  // line breaks between groups
  EXPECT_EQ(out, "foobar");
  EXPECT_TRUE(base64_decode("Zm9vYg", &out));  // padding left out
  EXPECT_EQ(out, "foob");
  EXPECT_TRUE(base64_decode("-_8=", &out));  // the URL-safe alphabet: 0xfb 0xff
  EXPECT_EQ(out, "\xfb\xff");
  for (const char* bad : {"Z", "Zm9vY", "Zm=9", "Zm9v!", "Zg===", "Zg==Zg=="}) EXPECT_FALSE(base64_decode(bad, &out)) << bad;
}

TEST(ImageUrl, DataUrlsAndRefusals) {
  std::string bytes;
  EXPECT_FALSE(read_image_url("data:image/png;base64,Zm9vYmFy", "p", &bytes));
  EXPECT_EQ(bytes, "foobar");
  EXPECT_FALSE(read_image_url("Zm9vYmFy", "p", &bytes));  // bare base64
  EXPECT_EQ(bytes, "foobar");
  EXPECT_FALSE(read_image_url("DATA:Image/JPEG;charset=x;BASE64,Zm9v", "p", &bytes));
  EXPECT_EQ(bytes, "foo");
  const std::pair<const char*, const char*> refused[] = {
      {"https://example.com/a.png", "the server fetches nothing"},
      {"http://example.com/a.png", "the server fetches nothing"},
      {"file:///etc/passwd", "the server fetches nothing"},
      {"data:text/plain;base64,Zm9v", "is not an image"},
      {"data:image/png,Zm9v", "not base64"},
      {"data:image/png;base64", "no ','"},
      {"data:image/png;base64,@@", "not valid base64"},
      {"data:image/png;base64,", "empty"},
      {"data:video/mp4;base64,Zm9v", "video"},
      {"not an image", "neither a data: URL nor valid base64"}};
  for (const auto& [url, says] : refused) {
    auto e = read_image_url(url, "messages[1].content[0]", &bytes);
    ASSERT_TRUE(e) << url;
    EXPECT_EQ(e->param, "messages[1].content[0]");
    EXPECT_NE(e->message.find("'messages[1].content[0]'"), std::string::npos) << e->message;
    EXPECT_NE(e->message.find(says), std::string::npos) << url << ": " << e->message;
  }
}

TEST(ImageParts, TheTemplateGetsTransformersParts) {
  ChatMessage m(ChatMessage::Role::kUser, "", "messages[0]");
  m.content = "Look:";
  add_image(&m, "a", "messages[0].content[1]");
  m.content += " and";
  add_image(&m, "b", "messages[0].content[3]");
  add_image(&m, "c", "messages[0].content[4]");
  const Json want = Json::parse(R"([{"type": "text", "text": "Look:"}, {"type": "image"},
      {"type": "text", "text": " and"}, {"type": "image"}, {"type": "image"}])");
  EXPECT_EQ(m.to_template()["content"], want);
  ChatMessage plain(ChatMessage::Role::kUser, "just text", "messages[0]");
  EXPECT_EQ(plain.to_template()["content"], "just text");
}

}  // namespace
}  // namespace qwen35::server
