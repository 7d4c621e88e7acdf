// load_chat_template: chat_template.jinja, else tokenizer_config.json's chat_template.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "template/chat_template.h"

namespace qwen35::tmpl {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

class LoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("qwen35_chat_template_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name, std::ios::binary) << text;
  }
  std::string render(const ChatTemplate& t) {
    auto r = t.render(Json::parse(R"([{"role":"user","content":"hi"}])"), nullptr, false, nullptr);
    return r.ok() ? r.value() : "ERROR: " + r.message();
  }
  fs::path dir_;
};

TEST_F(LoadTest, PrefersChatTemplateJinja) {
  write("chat_template.jinja", "file:{{ messages[0].content }}");
  write("tokenizer_config.json", R"({"chat_template": "config", "eos_token": "<|im_end|>"})");
  auto t = load_chat_template(dir_.string());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(render(*t), "file:hi");
}

TEST_F(LoadTest, StringInTokenizerConfigWithSpecialTokens) {
  write("tokenizer_config.json",
        R"({"chat_template": "{{ eos_token }}|{{ pad_token }}|{{ bos_token is defined }}",
            "eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"},
            "bos_token": null})");
  auto t = load_chat_template(dir_.string());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(render(*t), "<|im_end|>|<|endoftext|>|False");
}

TEST_F(LoadTest, NamedTemplateListUsesDefault) {
  write("tokenizer_config.json",
        R"({"chat_template": [{"name": "tool_use", "template": "tools"},
                              {"name": "default", "template": "default"}]})");
  auto t = load_chat_template(dir_.string());
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(render(*t), "default");
}

TEST_F(LoadTest, Errors) {
  EXPECT_FALSE(load_chat_template(dir_.string()).ok());
  write("tokenizer_config.json", R"({"chat_template": [{"name": "x", "template": "y"}]})");
  auto r = load_chat_template(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("no \"default\""), std::string::npos) << r.message();
  write("tokenizer_config.json", "{not json");
  EXPECT_FALSE(load_chat_template(dir_.string()).ok());
  fs::remove(dir_ / "tokenizer_config.json");
  write("chat_template.jinja", "{% if %}");
  r = load_chat_template(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("line 1"), std::string::npos) << r.message();
}

}  // namespace
}  // namespace qwen35::tmpl
