// Runs the qwen35 binary: tokenize / detokenize in --jsonl mode reproduce every fixture case, and
// errors are one line on stderr with a non-zero exit code.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_fixtures.h"

namespace qwen35::tokenizer {
namespace {

using nlohmann::json;

std::string tmp(const std::string& name) {
  return ::testing::TempDir() + "qwen35_cli_" + std::to_string(::getpid()) + "_" + name;
}

// Runs the binary with `args` (shell syntax); returns the exit code.
int run(const std::string& args, const std::string& out, const std::string& err) {
  const std::string cmd = std::string(QWEN35_BINARY) + " " + args + " >" + out + " 2>" + err;
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) lines.push_back(line);
  return lines;
}

class TokenizeCli : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizeCli, JsonlRoundTripMatchesFixtures) {
  const std::string dir = testing::fixture_dir(GetParam());
  const auto cases = testing::load_cases(GetParam());
  const std::string texts = tmp("texts.jsonl"), ids = tmp("ids.jsonl"), out = tmp("out"),
                    err = tmp("err");
  {
    std::ofstream t(texts, std::ios::binary), i(ids, std::ios::binary);
    for (const auto& c : cases) {
      t << json(c.text).dump() << "\n";
      i << json(c.ids).dump() << "\n";
    }
  }
  ASSERT_EQ(run("tokenize -m " + dir + " --jsonl " + texts, out, err), 0);
  auto lines = read_lines(out);
  ASSERT_EQ(lines.size(), cases.size());
  for (size_t k = 0; k < cases.size(); ++k) {
    EXPECT_EQ(json::parse(lines[k]).get<std::vector<int32_t>>(), cases[k].ids) << cases[k].name;
  }
  for (bool skip : {false, true}) {
    ASSERT_EQ(
        run("detokenize -m " + dir + " --jsonl " + ids + (skip ? " --skip-special" : ""), out, err),
        0);
    lines = read_lines(out);
    ASSERT_EQ(lines.size(), cases.size());
    for (size_t k = 0; k < cases.size(); ++k) {
      EXPECT_EQ(json::parse(lines[k]).get<std::string>(),
                skip ? cases[k].decoded_skip_special : cases[k].decoded)
          << cases[k].name;
    }
  }
  for (const auto& p : {texts, ids, out, err}) std::remove(p.c_str());
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TokenizeCli, ::testing::Values("qwen3", "qwen35-like"),
                         [](const auto& info) {
                           return info.param == "qwen3" ? std::string("Qwen3")
                                                        : std::string("Qwen35Like");
                         });

TEST(TokenizeCliErrors, OneLineOnStderrAndNonZeroExit) {
  const std::string dir = testing::fixture_dir("qwen3");
  const std::string out = tmp("out"), err = tmp("err"), bad = tmp("bad.jsonl");
  std::ofstream(bad) << "\"ok\"\n42\n";
  const std::pair<std::string, std::string> cases[] = {
      {"tokenize -m /nonexistent --text x", "qwen35 tokenize: [tokenizer] '/nonexistent/"},
      {"tokenize -m " + dir, "qwen35 tokenize: one of --text"},
      {"tokenize -m " + dir + " --jsonl " + bad, "line 2: expected a JSON string"},
      {"detokenize -m " + dir + " --ids 1,abc", "qwen35 detokenize: --ids: 'abc'"},
      {"detokenize -m " + dir + " --ids 999999999", "outside the vocabulary"},
      {"detokenize -m " + dir + " --jsonl " + bad, "line 1: expected a JSON array"},
  };
  for (const auto& [args, expect] : cases) {
    EXPECT_NE(run(args, out, err), 0) << args;
    const auto lines = read_lines(err);
    ASSERT_EQ(lines.size(), 1u) << args;
    EXPECT_NE(lines[0].find(expect), std::string::npos) << args << ": " << lines[0];
  }
  for (const auto& p : {out, err, bad}) std::remove(p.c_str());
}

TEST(TokenizeCliModes, TextAndIds) {
  const std::string dir = testing::fixture_dir("qwen35-like");
  const std::string out = tmp("out"), err = tmp("err");
  ASSERT_EQ(run("tokenize -m " + dir + " --text 'Hello<|im_end|>'", out, err), 0);
  EXPECT_EQ(read_lines(out), std::vector<std::string>{"[9707,248046]"});
  ASSERT_EQ(run("detokenize -m " + dir + " --ids 9707,248046", out, err), 0);
  EXPECT_EQ(read_lines(out), std::vector<std::string>{"Hello<|im_end|>"});
  ASSERT_EQ(run("detokenize -m " + dir + " --ids 9707,248046 --skip-special", out, err), 0);
  EXPECT_EQ(read_lines(out), std::vector<std::string>{"Hello"});
  for (const auto& p : {out, err}) std::remove(p.c_str());
}

}  // namespace
}  // namespace qwen35::tokenizer
