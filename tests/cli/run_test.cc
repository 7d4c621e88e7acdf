// qwen35 run end to end on a synthetic checkpoint written by qwen35 synth: text comes out, the
// same seed gives the same text, bad flags are one-line errors, and the chat REPL works when
// driven through tmux as a user would.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "test_util.h"

namespace qwen35 {
namespace {

using testing::run_qwen35;
using testing::TempDir;

class RunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_qwen35("synth --preset tiny --quiet --out " + dir_->file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string model() { return dir_->file("m"); }
  static TempDir* dir_;
};
TempDir* RunTest::dir_ = nullptr;

TEST_F(RunTest, CompletionIsReproducibleWithASeed) {
  auto a = run_qwen35("run -m " + model() + " -p 'The quick brown fox' -n 24 --seed 7 -q");
  auto b = run_qwen35("run -m " + model() + " -p 'The quick brown fox' -n 24 --seed 7 -q");
  auto c = run_qwen35("run -m " + model() + " -p 'The quick brown fox' -n 24 --seed 8 -q");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_GT(a.out.size(), 10u);
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  auto g1 = run_qwen35("run -m " + model() + " -p 'abc' -n 16 --temperature 0");
  auto g2 = run_qwen35("run -m " + model() + " -p 'abc' -n 16 --temperature 0 --seed 99");
  EXPECT_EQ(g1.out, g2.out);  // greedy ignores the seed
  EXPECT_NE(g1.err.find("generation: 16 tokens"), std::string::npos) << g1.err;
}

TEST_F(RunTest, ChatTemplateAndStopStrings) {
  auto r = run_qwen35("run -m " + model() + " -p 'hello' --chat --no-think -n 8 --seed 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("prompt:"), std::string::npos);
  // A stop string made of the first characters of an unconstrained answer stops right there.
  auto full = run_qwen35("run -m " + model() + " -p 'x' -n 40 --seed 5 -q");
  ASSERT_GE(full.out.size(), 12u);
  const std::string stop = full.out.substr(6, 3);
  auto cut = run_qwen35("run -m " + model() + " -p 'x' -n 40 --seed 5 -q --stop '" + stop + "'");
  ASSERT_EQ(cut.exit_code, 0);
  EXPECT_EQ(cut.out.substr(0, cut.out.size() - 1), full.out.substr(0, full.out.find(stop)));
}

TEST_F(RunTest, Errors) {
  auto r = run_qwen35("run -m " + model() + " -p hi --top-p 0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("top_p"), std::string::npos) << r.err;
  TempDir empty;
  r = run_qwen35("run -m " + empty.path() + " -p hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tokenizer.json"), std::string::npos) << r.err;
  r = run_qwen35("run -m " + model() + " -p '' -n 4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("empty"), std::string::npos) << r.err;
  r = run_qwen35("run -m " + model() + " -p 'a long prompt here' --ctx 3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

// The interactive chat driven through tmux: two turns, /reset, Ctrl-D leaves.
TEST_F(RunTest, ReplThroughTmux) {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux not installed";
  TempDir d;
  const std::string sock = d.file("sock"), done = d.file("done");
  const std::string tmux = "tmux -S " + sock + " ";
  const std::string cmd = std::string(QWEN35_BINARY) + " run -m " + model() + " -n 12 --seed 2; touch " + done;
  ASSERT_EQ(std::system((tmux + "new-session -d -s repl -x 200 -y 50 '" + cmd + "'").c_str()), 0);
  auto send = [&](const std::string& keys) {
    std::system((tmux + "send-keys -t repl " + keys).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  send("'first question' Enter");
  send("'second question' Enter");
  send("/reset Enter");
  const std::string cap = d.file("cap");
  std::system((tmux + "capture-pane -t repl -p > " + cap).c_str());
  send("C-d");
  const std::string screen = testing::read_file(cap);
  std::system((tmux + "kill-server 2>/dev/null").c_str());
  EXPECT_NE(screen.find("> first question"), std::string::npos) << screen;
  EXPECT_NE(screen.find("> second question"), std::string::npos) << screen;
  EXPECT_NE(screen.find("(history cleared)"), std::string::npos) << screen;
  size_t stats = 0;
  for (size_t p = screen.find("[prompt:"); p != std::string::npos; p = screen.find("[prompt:", p + 1)) ++stats;
  EXPECT_EQ(stats, 2u) << screen;
  EXPECT_TRUE(std::system(("test -f " + done).c_str()) == 0) << "Ctrl-D did not leave the chat";
}

// Ctrl-C stops an answer (the closing line says "interrupted") and the chat goes on.
TEST_F(RunTest, CtrlCStopsAnAnswerInTheRepl) {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux not installed";
  TempDir d;
  const std::string tmux = "tmux -S " + d.file("sock") + " ";
  // A context this large takes the tiny model many seconds to fill: only Ctrl-C ends the answer.
  const std::string cmd = std::string(QWEN35_BINARY) + " run -m " + model() + " --ctx 60000 --seed 2";
  ASSERT_EQ(std::system((tmux + "new-session -d -s repl -x 200 -y 50 '" + cmd + "'").c_str()), 0);
  auto send = [&](const std::string& keys) {
    std::system((tmux + "send-keys -t repl " + keys).c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  send("'first question' Enter");
  send("C-c");
  send("'second question' Enter");
  send("C-c");
  const std::string cap = d.file("cap");
  std::system((tmux + "capture-pane -t repl -p -S -200 > " + cap).c_str());
  const std::string screen = testing::read_file(cap);
  std::system((tmux + "kill-server 2>/dev/null").c_str());
  size_t n = 0;
  for (size_t p = screen.find("| interrupted]"); p != std::string::npos; p = screen.find("| interrupted]", p + 1)) ++n;
  EXPECT_EQ(n, 2u) << screen;
  EXPECT_NE(screen.find("> second question"), std::string::npos) << screen;
}

}  // namespace
}  // namespace qwen35
