// qwen35 run end to end on a synthetic checkpoint written by qwen35 synth: text comes out, the
// same seed gives the same text, bad flags are one-line errors, and the chat REPL works when
// driven through tmux as a user would.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <filesystem>
#include <functional>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "tiny_checkpoint_suite.h"

namespace qwen35 {
namespace {

using testing::run_qwen35;
using testing::TempDir;

class RunTest : public testing::TinyCheckpointSuite<RunTest> {};

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

// run --spec lookup prints what plain decoding prints (the bundled model: it repeats the
// verses of its prompt, so lookup's drafts are often accepted), greedy and seeded, K = 1..4, and
// with a stop string; a bad --spec is an error that names the flag.
TEST_F(RunTest, SpeculativePrintsWhatPlainPrints) {
  const std::string kjv = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  const std::string verse = "And God said, Let there be light: and there was light. ";
  const std::string base = "run -m " + kjv + " -p '" + verse + verse + verse + "' -n 40 -q";
  for (const std::string& sampling : {std::string(" --temperature 0"), std::string(" --seed 3")}) {
    auto plain = run_qwen35(base + sampling);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    ASSERT_GT(plain.out.size(), 20u);
    for (const std::string method : {"lookup", "mtp"}) {
      for (int k = 1; k <= 4; ++k) {
        auto spec = run_qwen35(base + sampling + " --spec " + method + " --draft-tokens " + std::to_string(k));
        ASSERT_EQ(spec.exit_code, 0) << spec.err;
        EXPECT_EQ(spec.out, plain.out) << sampling << " " << method << " K=" << k;
      }
      const std::string stop = plain.out.substr(plain.out.size() / 2, 4);
      auto a = run_qwen35(base + sampling + " --stop '" + stop + "'");
      auto b = run_qwen35(base + sampling + " --stop '" + stop + "' --spec " + method + " --draft-tokens 4");
      EXPECT_EQ(a.out, b.out) << method;
      EXPECT_LT(a.out.size(), plain.out.size());
    }
  }
  // The closing line counts what was drafted and accepted (the bundled head drafts well).
  auto verbose = run_qwen35("run -m " + kjv + " -p '" + verse + "' -n 40 --temperature 0 --spec mtp");
  ASSERT_EQ(verbose.exit_code, 0) << verbose.err;
  EXPECT_NE(verbose.err.find("accepted"), std::string::npos) << verbose.err;
  // MLX exports drop the MTP head.
  auto no_head = run_qwen35("run -m " + kjv + "/mlx-4bit -p 'In the' -n 4 --spec mtp");
  EXPECT_NE(no_head.exit_code, 0);
  EXPECT_NE(no_head.err.find("no MTP head"), std::string::npos) << no_head.err;
  auto bad = run_qwen35(base + " --spec ngram");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--spec must be lookup, mtp or off"), std::string::npos) << bad.err;
  bad = run_qwen35(base + " --spec lookup --draft-tokens 99");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--draft-tokens"), std::string::npos) << bad.err;
}

// bench --spec checks its own tokens against plain decoding and reports acceptance by draft
// position (values are not asserted beyond what must hold: speed is measured, never unit-tested).
TEST_F(RunTest, BenchSpecReportsAcceptanceAndEqualTokens) {
  const std::string kjv = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  TempDir d;
  {
    std::ofstream f(d.file("p.txt"));
    for (int i = 0; i < 3; ++i) f << "And God said, Let there be light: and there was light. ";
  }
  auto r = run_qwen35("bench -m " + kjv + " --spec lookup --draft-tokens 3 -n 48 --prompt-file " +
                      d.file("p.txt") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 2u);
  for (const auto& run : j["runs"]) {
    EXPECT_TRUE(run["same_as_plain"].get<bool>()) << run;
    EXPECT_EQ(run["accepted_at"].size(), 3u);
    EXPECT_LE(run["accepted"].get<int64_t>(), run["drafted"].get<int64_t>());
  }
  // With the plain answer as prediction nearly every draft is accepted.
  EXPECT_GT(j["runs"][1]["accepted"].get<int64_t>(), 30) << r.out;
  EXPECT_NE(run_qwen35("bench -m " + kjv + " --spec nope -n 8").exit_code, 0);
  // The MTP head: one speculative run (it takes no prediction).
  r = run_qwen35("bench -m " + kjv + " --spec mtp --draft-tokens 2 -n 48 --prompt-file " + d.file("p.txt") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = nlohmann::json::parse(r.out);
  ASSERT_EQ(m["runs"].size(), 1u);
  EXPECT_EQ(m["runs"][0]["name"], "mtp");
  EXPECT_TRUE(m["runs"][0]["same_as_plain"].get<bool>());
  EXPECT_EQ(m["runs"][0]["accepted_at"].size(), 2u);
  EXPECT_GT(m["runs"][0]["accepted"].get<int64_t>(), 0) << r.out;
  // --verify with --spec mtp times drafting too.
  r = run_qwen35("bench -m " + kjv + " -p 0 -n 4 -r 1 --verify 2 --spec mtp --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["mtp_draft_ms"].get<double>(), 0) << r.out;
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

// `qwen35 run ARGS` in a detached tmux session, driven by keys as a user would. Every step waits
// for the state it needs (the chat's prompt, an answer begun, a closing line), never for a time:
// keys sent before the program reads them land in another state (a Ctrl-C during loading quits).
class TmuxRun {
 public:
  TmuxRun(TempDir& d, const std::string& run_cmd) : tmux_("tmux -S " + d.file("sock") + " "), cap_(d.file("cap")) {
    started_ = std::system((tmux_ + "new-session -d -s repl -x 200 -y 50 '" + run_cmd + "'").c_str()) == 0;
  }
  ~TmuxRun() { std::system((tmux_ + "kill-server 2>/dev/null").c_str()); }
  bool started() const { return started_; }
  void send(const std::string& keys) { std::system((tmux_ + "send-keys -t repl " + keys).c_str()); }
  std::string screen() {
    std::system((tmux_ + "capture-pane -t repl -p -S -200 > " + cap_ + " 2>/dev/null").c_str());
    return testing::read_file(cap_);
  }
  // Polls until `state` holds of the screen. The bound only ends a test whose program is stuck.
  bool wait_for(const std::function<bool(const std::string&)>& state) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < until) {
      if (state(screen())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

 private:
  std::string tmux_, cap_;
  bool started_ = false;
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The chat waits for a line: its last non-blank line is the bare prompt.
bool at_prompt(const std::string& screen) {
  size_t end = screen.find_last_not_of(" \n");
  if (end == std::string::npos) return false;
  const size_t start = screen.rfind('\n', end);
  const std::string last = screen.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
  return last == ">";
}

// The answer to `line` has begun: something visible follows the line the user typed.
bool answering(const std::string& screen, const std::string& line) {
  const size_t p = screen.rfind("> " + line);
  return p != std::string::npos &&
         screen.find_first_not_of(" \n", p + 2 + line.size()) != std::string::npos;
}

bool file_exists(const std::string& path) { return std::system(("test -f " + path).c_str()) == 0; }

TEST_F(RunTest, ReplThroughTmux) {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux not installed";
  TempDir d;
  const std::string done = d.file("done");
  TmuxRun t(d, std::string(QWEN35_BINARY) + " run -m " + model() + " -n 12 --seed 2; touch " + done);
  ASSERT_TRUE(t.started());
  ASSERT_TRUE(t.wait_for(at_prompt)) << t.screen();
  t.send("'first question' Enter");
  ASSERT_TRUE(t.wait_for([](const std::string& s) { return count(s, "[prompt:") == 1 && at_prompt(s); })) << t.screen();
  t.send("'second question' Enter");
  ASSERT_TRUE(t.wait_for([](const std::string& s) { return count(s, "[prompt:") == 2 && at_prompt(s); })) << t.screen();
  t.send("/reset Enter");
  ASSERT_TRUE(t.wait_for([](const std::string& s) { return s.find("(history cleared)") != std::string::npos && at_prompt(s); }))
      << t.screen();
  const std::string screen = t.screen();
  t.send("C-d");
  EXPECT_NE(screen.find("> first question"), std::string::npos) << screen;
  EXPECT_NE(screen.find("> second question"), std::string::npos) << screen;
  EXPECT_TRUE(t.wait_for([&](const std::string&) { return file_exists(done); })) << "Ctrl-D did not leave the chat";
}

// Ctrl-C stops an answer (the closing line says "interrupted") and the chat goes on.
TEST_F(RunTest, CtrlCStopsAnAnswerInTheRepl) {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux not installed";
  TempDir d;
  // A context this large takes the tiny model many seconds to fill: only Ctrl-C ends the answer.
  TmuxRun t(d, std::string(QWEN35_BINARY) + " run -m " + model() + " --ctx 60000 --seed 2");
  ASSERT_TRUE(t.started());
  ASSERT_TRUE(t.wait_for(at_prompt)) << t.screen();
  size_t n = 0;
  for (const std::string q : {"first question", "second question"}) {
    t.send("'" + q + "' Enter");
    ASSERT_TRUE(t.wait_for([&](const std::string& s) { return answering(s, q); })) << t.screen();
    t.send("C-c");
    ++n;
    ASSERT_TRUE(t.wait_for([&](const std::string& s) { return count(s, "| interrupted]") == n && at_prompt(s); }))
        << t.screen();
  }
}

// Ctrl-C while the model loads quits at once with status 130, as a shell reports SIGINT. The
// load is held at a known point: the checkpoint's generation_config.json is a FIFO, which the
// loader reads until the test, having opened its other end, closes it.
TEST_F(RunTest, CtrlCWhileLoadingQuits) {
  if (std::system("command -v tmux >/dev/null 2>&1") != 0) GTEST_SKIP() << "tmux not installed";
  namespace fs = std::filesystem;
  TempDir d;
  const std::string m = d.file("m"), rc = d.file("rc"), err = d.file("err");
  fs::create_directory(m);
  for (const auto& e : fs::directory_iterator(model()))
    if (e.path().filename() != "generation_config.json") fs::copy(e.path(), fs::path(m) / e.path().filename());
  const std::string fifo = m + "/generation_config.json";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  TmuxRun t(d, std::string(QWEN35_BINARY) + " run -m " + m + " 2> " + err + "; echo $? > " + rc + ".tmp; mv " + rc +
                   ".tmp " + rc);
  ASSERT_TRUE(t.started());
  int fd = -1;  // opens once the loader has the FIFO open for reading (ENXIO until then)
  ASSERT_TRUE(t.wait_for([&](const std::string&) { return (fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK)) >= 0; }));
  t.send("C-c");
  EXPECT_TRUE(t.wait_for([&](const std::string&) { return file_exists(rc); }));
  close(fd);
  EXPECT_EQ(testing::read_file(rc), "130\n");
  EXPECT_NE(testing::read_file(err).find("interrupted while loading"), std::string::npos) << testing::read_file(err);
}

// The interactive chat through the prefix cache gives, turn after turn, the answers of a chat
// that computes its whole history afresh every turn (--no-prefix-cache), seeded and greedy; and
// the cache does resume (later turns compute fewer prompt tokens than their history holds).
TEST_F(RunTest, ChatResumedFromTheCacheEqualsAFreshHistory) {
  const std::string kjv = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  TempDir d;
  {
    std::ofstream f(d.file("in"));
    f << "Who made the light?\nAnd the waters?\nTell me of Moses.\n";
  }
  for (const std::string sampling : {"--seed 4", "--temperature 0"}) {
    // A system message long enough that the part every turn's prompt shares passes a 64-token
    // boundary (a turn's own prompt opens an empty thinking block that the history drops).
    const std::string system =
        "In the beginning God created the heaven and the earth. And the earth was without form, and void; and "
        "darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God "
        "said, Let there be light: and there was light. And God saw the light, that it was good: and God divided "
        "the light from the darkness.";
    const std::string base = "run -m " + kjv + " -n 24 --no-think " + sampling + " --system '" + system + "' < " + d.file("in");
    auto cached = run_qwen35(base);
    auto fresh = run_qwen35(base + " --no-prefix-cache");
    ASSERT_EQ(cached.exit_code, 0) << cached.err;
    ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
    EXPECT_GT(cached.out.size(), 40u);
    EXPECT_EQ(cached.out, fresh.out) << sampling;
    // The closing lines: "[prompt: N tokens, ...": the cached chat's later turns compute less.
    auto prompts = [](const std::string& err) {
      std::vector<long> n;
      for (size_t p = err.find("[prompt: "); p != std::string::npos; p = err.find("[prompt: ", p + 1))
        n.push_back(std::stol(err.substr(p + 9)));
      return n;
    };
    const auto c = prompts(cached.err), f = prompts(fresh.err);
    ASSERT_EQ(c.size(), 3u) << cached.err;
    ASSERT_EQ(f.size(), 3u) << fresh.err;
    EXPECT_EQ(c[0], f[0]);
    EXPECT_LT(c[1], f[1]) << cached.err;
    EXPECT_LT(c[2], f[2]) << cached.err;
  }
}

}  // namespace
}  // namespace qwen35
