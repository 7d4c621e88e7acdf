// Runs the qwen35 binary: `template --jsonl` over every fixture case, and the --messages mode.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

const std::string kFixtures = std::string(QWEN35_SOURCE_DIR) + "/tests/fixtures/chat_template";

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Runs a shell command; returns its stdout and sets *rc to the exit status.
std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("qwen35_cli_template_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(CliTest, JsonlModeOverAllCases) {
  const Json cases = Json::parse(slurp(kFixtures + "/cases.json"));
  int checked = 0;
  for (const std::string name : {"qwen35", "qwen3"}) {
    // A directory that holds only a tokenizer_config.json with the template string.
    const fs::path model = dir_ / name;
    fs::create_directories(model);
    std::ofstream(model / "tokenizer_config.json")
        << Json{{"chat_template", slurp(kFixtures + "/" + name + "/chat_template.jinja")}}.dump();
    std::vector<Json> selected;
    std::ofstream jsonl(dir_ / (name + ".jsonl"));
    for (const Json& c : cases) {
      if (c["template"] != name) continue;
      selected.push_back(c);
      jsonl << c.dump() << "\n";
    }
    jsonl.close();
    int rc = -1;
    const std::string out = run(std::string(QWEN35_BINARY) + " template -m " + model.string() +
                                    " --jsonl " + (dir_ / (name + ".jsonl")).string(),
                                &rc);
    ASSERT_EQ(rc, 0);
    std::istringstream lines(out);
    std::string line;
    size_t i = 0;
    while (std::getline(lines, line)) {
      ASSERT_LT(i, selected.size());
      const Json& c = selected[i++];
      const Json r = Json::parse(line);
      if (!c["expected"].is_null()) {
        ASSERT_TRUE(r.contains("rendered")) << c["name"] << ": " << line;
        EXPECT_EQ(r["rendered"], c["expected"]) << c["name"];
      } else {
        ASSERT_TRUE(r.contains("error")) << c["name"] << ": " << line;
        EXPECT_NE(r["error"].get<std::string>().find(c["error"].get<std::string>()),
                  std::string::npos)
            << c["name"];
      }
      ++checked;
    }
    EXPECT_EQ(i, selected.size());
  }
  EXPECT_EQ(checked, 57);
}

TEST_F(CliTest, MessagesMode) {
  const fs::path model = dir_ / "m";
  fs::create_directories(model);
  fs::copy_file(kFixtures + "/qwen35/chat_template.jinja", model / "chat_template.jinja");
  std::ofstream(dir_ / "messages.json") << R"([{"role": "user", "content": "Hi"}])";
  std::ofstream(dir_ / "tools.json") << R"([{"type": "function", "function": {"name": "f"}}])";
  const std::string base = std::string(QWEN35_BINARY) + " template -m " + model.string() +
                           " --messages " + (dir_ / "messages.json").string();
  int rc = -1;
  EXPECT_EQ(run(base, &rc), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n");
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(run(base + " --no-generation-prompt", &rc), "<|im_start|>user\nHi<|im_end|>\n");
  EXPECT_EQ(run(base + " --kwargs '{\"enable_thinking\":false}'", &rc),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const std::string with_tools = run(base + " --tools " + (dir_ / "tools.json").string(), &rc);
  EXPECT_EQ(rc, 0);
  EXPECT_NE(with_tools.find("{\"type\": \"function\", \"function\": {\"name\": \"f\"}}"),
            std::string::npos);
}

TEST_F(CliTest, ErrorsGoToStderrWithNonZeroExit) {
  const fs::path model = dir_ / "m";
  fs::create_directories(model);
  std::ofstream(model / "chat_template.jinja") << "{{ raise_exception('nope') }}";
  std::ofstream(dir_ / "messages.json") << "[]";
  int rc = 0;
  const std::string cmd = std::string(QWEN35_BINARY) + " template -m " + model.string() +
                          " --messages " + (dir_ / "messages.json").string() + " 2>&1";
  EXPECT_EQ(run(cmd, &rc), "qwen35 template: [chat_template] line 1: nope\n");
  EXPECT_NE(rc, 0);
  EXPECT_EQ(run(std::string(QWEN35_BINARY) + " template -m " + (dir_ / "missing").string() +
                    " --messages x.json 2>&1 >/dev/null | head -c 16",
                &rc),
            "qwen35 template:");
  run(std::string(QWEN35_BINARY) + " template -m " + model.string() + " 2>/dev/null", &rc);
  EXPECT_NE(rc, 0);
}

}  // namespace
