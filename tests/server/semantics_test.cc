// Request semantics of issue 14 against a live `qwen35 serve`: JSON nesting refused while
// parsing, never-servable requests (400) vs a full queue (429 + Retry-After), gauges back to idle,
// 64-bit id checks, chat_template_kwargs that cannot replace validated fields, unsupported
// OpenAI fields refused by name, and a runaway chat template that fails fast with a 500.
//
// Responses whose headers matter are read over a raw socket, so these tests do not depend on
// the HTTP client library of server_process.h.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

int connect_to(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_post(int fd, const std::string& path, const std::string& body) {
  const std::string msg = "POST " + path +
                          " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  size_t off = 0;
  while (off < msg.size()) {
    const ssize_t n = write(fd, msg.data() + off, msg.size() - off);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// One POST on a fresh connection; the raw response (status line, headers, body).
std::string raw_post(int port, const std::string& path, const std::string& body) {
  const int fd = connect_to(port);
  if (fd < 0 || !send_post(fd, path, body)) return "";
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, size_t(n));
  close(fd);
  return out;
}

std::string nested(int depth) {
  return std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
}

std::string synth(TempDir& d) {
  auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + d.file("m"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return d.file("m");
}

const Json kMsgs = {{{"role", "user"}, {"content", "hi"}}};

class SemanticsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerProcess(synth(*dir_), {"--parallel", "4", "--ctx", "256"});
    ASSERT_TRUE(server_->ready()) << server_->log();
  }
  static void TearDownTestSuite() {
    EXPECT_EQ(server_->stop(), 0) << server_->log();
    delete server_;
    delete dir_;
  }
  static TempDir* dir_;
  static ServerProcess* server_;
  const ServerProcess& s() { return *server_; }
  void expect_400(const std::string& path, const std::string& body, const std::string& needle) {
    auto [st, r] = s().post(path, body);
    EXPECT_EQ(st, 400) << body.substr(0, 200);
    ASSERT_TRUE(r.is_object() && r.contains("error")) << r;
    const std::string msg = r["error"]["message"];
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  }
};
TempDir* SemanticsTest::dir_ = nullptr;
ServerProcess* SemanticsTest::server_ = nullptr;

// 130,000 nested arrays overflowed the stack (SIGSEGV; ASan: stack-overflow) in every endpoint.
TEST_F(SemanticsTest, DeepJsonIsRefusedWhileParsing) {
  const std::string deep = nested(130000);
  const std::string in_message =
      "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\",\"x\":" + deep + "}]}";
  for (const char* path : {"/v1/chat/completions", "/tokenize", "/apply-template"})
    expect_400(path, in_message, "limit of 64");
  expect_400("/v1/chat/completions",
             "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":{"
             "\"x\":" +
                 deep + "}}",
             "limit of 64");
  expect_400("/v1/completions", "{\"prompt\":\"hi\",\"x\":" + deep + "}", "limit of 64");
  expect_400("/detokenize", "{\"tokens\":" + deep + "}", "limit of 64");
  // A tool call's arguments arrive as a JSON string: parsed with the same bound.
  Json call = {{"role", "assistant"},
               {"content", nullptr},
               {"tool_calls",
                {{{"id", "c"},
                  {"type", "function"},
                  {"function", {{"name", "f"}, {"arguments", "{\"a\":" + deep + "}"}}}}}}};
  expect_400("/v1/chat/completions", Json{{"messages", {kMsgs[0], call}}}.dump(), "limit of 64");
  // The bound is exact: the body object is level 1, so 63 arrays inside it pass and 64 do not.
  auto [ok, r] = s().post("/tokenize", "{\"prompt\":\"hi\",\"x\":" + nested(63) + "}");
  EXPECT_EQ(ok, 200) << r;
  expect_400("/tokenize", "{\"prompt\":\"hi\",\"x\":" + nested(64) + "}", "limit of 64");
  EXPECT_EQ(s().get("/health").first, 200);
}

// Token ids are range-checked as 64-bit values: -4294967291 used to wrap to id 5 ("&").
TEST_F(SemanticsTest, TokenIdsAreCheckedBeforeNarrowing) {
  for (const char* ids : {"[-4294967291]", "[4294967301]", "[18446744073709551615]", "[-1]"}) {
    expect_400("/detokenize", std::string("{\"tokens\":") + ids + "}", "out of range");
    expect_400("/v1/completions", std::string("{\"max_tokens\":1,\"prompt\":") + ids + "}",
               "out of range");
  }
  auto [st, r] = s().post("/detokenize", std::string("{\"tokens\":[5]}"));
  EXPECT_EQ(st, 200) << r;
}

// chat_template_kwargs cannot replace the validated messages (an image part that is no image is
// refused on the normal path), the tools, or the generation prompt.
TEST_F(SemanticsTest, TemplateKwargsCannotOverrideValidatedFields) {
  const Json image = {
      {{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}};
  expect_400("/apply-template", Json{{"messages", image}}.dump(), "nor valid base64");
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, Json>>{{"messages", image},
                                                 {"tools", Json::array({{{"type", "function"}}})},
                                                 {"add_generation_prompt", false},
                                                 {"documents", Json::array()}}) {
    const Json body = {{"messages", kMsgs}, {"chat_template_kwargs", {{key, value}}}};
    for (const char* path : {"/apply-template", "/v1/chat/completions", "/tokenize"})
      expect_400(path, body.dump(), "'" + key + "'");
  }
  auto [st, r] =
      s().post("/apply-template",
               Json{{"messages", kMsgs}, {"chat_template_kwargs", {{"enable_thinking", false}}}});
  EXPECT_EQ(st, 200) << r;
}

TEST_F(SemanticsTest, UnsupportedFieldsAreRefusedByName) {
  const std::string chat = "/v1/chat/completions", cmpl = "/v1/completions";
  const std::vector<std::tuple<std::string, std::string, Json>> refused = {
      {chat, "logit_bias", {{"5", 10}}},
      {cmpl, "logit_bias", {{"5", -100}}},
      {chat, "functions", Json::array({{{"name", "f"}}})},
      {chat, "function_call", "auto"},
      {chat, "audio", {{"voice", "alloy"}}},
      {chat, "modalities", {"text", "audio"}},
      {cmpl, "suffix", "tail"},
      {cmpl, "best_of", 3},
  };
  for (const auto& [path, name, value] : refused) {
    Json body = path == chat ? Json{{"messages", kMsgs}} : Json{{"prompt", "hi"}};
    body[name] = value;
    auto [st, r] = s().post(path, body);
    EXPECT_EQ(st, 400) << body;
    ASSERT_TRUE(r.contains("error")) << r;
    EXPECT_EQ(r["error"]["param"], name) << r;
    const std::string msg = r["error"]["message"];
    EXPECT_NE(msg.find("'" + name + "' is not supported"), std::string::npos) << msg;
  }
  // The values that ask for nothing special are accepted.
  Json ok = {{"messages", kMsgs},
             {"max_tokens", 1},
             {"response_format", {{"type", "text"}}},
             {"logit_bias", Json::object()},
             {"tool_choice", "none"},
             {"parallel_tool_calls", true},
             {"verbosity", "low"},
             {"modalities", {"text"}},
             {"prediction", {{"type", "content"}, {"content", "In the beginning"}}},
             {"user", "u"},
             {"store", false},
             {"metadata", {{"k", "v"}}}};
  auto [st, r] = s().post(chat, ok);
  EXPECT_EQ(st, 200) << r;
  auto [st2, r2] = s().post(
      cmpl, Json{{"prompt", "hi"}, {"max_tokens", 1}, {"best_of", 1}, {"suffix", ""}, {"n", 1}});
  EXPECT_EQ(st2, 200) << r2;
}

// The message a server without a default budget answers `req` with.
std::pair<int, std::string> srv_free_reasoning(const std::string& model, const Json& req) {
  ServerProcess srv(model, {"--parallel", "1", "--ctx", "512"});
  if (!srv.ready()) return {0, srv.log()};
  auto [st, r] = srv.post("/v1/chat/completions", req);
  srv.stop();
  return {st, st == 200 ? r["choices"][0]["message"].dump() : r.dump()};
}

// The reasoning budget (issue 19): with "thinking_token_budget": B the thinking block holds at
// most B sampled tokens, then </think> is forced; every token before the cut is what the same
// seeded request samples without a budget, and drafted == plain holds under it.
// "reasoning_effort" maps to budgets, "none" to thinking off; bad values are 400s by name.
TEST(SemanticsReasoning, BudgetForcesTheEndOfThinking) {
  const std::string model = std::string(QWEN35_SOURCE_DIR) + "/models/qwen35-tiny-kjv";
  ServerProcess srv(model, {"--parallel", "2", "--ctx", "512"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  auto [ts, tk] = srv.post("/tokenize", Json{{"prompt", "</think>"}});
  ASSERT_EQ(ts, 200) << tk;
  ASSERT_EQ(tk["tokens"].size(), 1u) << tk;
  const int32_t end_id = tk["tokens"][0];
  const std::string prompt = "<|im_start|>user\nWho begat Enos?<|im_end|>\n<|im_start|>assistant\n<think>\n";
  auto ids_of = [&](Json req) {
    req["return_token_ids"] = true;
    auto [st, r] = srv.post("/v1/completions", req);
    EXPECT_EQ(st, 200) << r;
    return r["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  };
  const Json base = {{"prompt", prompt}, {"max_tokens", 16}, {"temperature", 0.9}, {"seed", 11}};
  const std::vector<int32_t> free_run = ids_of(base);
  int forced = 0;
  for (int budget : {0, 3, 7}) {
    Json req = base;
    req["thinking_token_budget"] = budget;
    const std::vector<int32_t> got = ids_of(req);
    const auto end = std::find(got.begin(), got.end(), end_id);
    ASSERT_NE(end, got.end()) << "budget " << budget;
    const int64_t at = end - got.begin();
    EXPECT_LE(at, budget);
    forced += at == budget;
    EXPECT_TRUE(std::equal(got.begin(), end, free_run.begin())) << "budget " << budget;
    Json spec = req;
    spec["speculative"] = {{"method", "lookup"}, {"draft_tokens", 3}};
    EXPECT_EQ(ids_of(spec), got) << "drafted == plain, budget " << budget;
  }
  EXPECT_GT(forced, 0) << "the model ended every thinking block itself";

  // Chat: the reasoning is cut and the answer follows.
  const Json msgs = {{{"role", "user"}, {"content", "Who begat Enos?"}}};
  Json chat = {{"messages", msgs}, {"max_tokens", 24}, {"temperature", 0.9}, {"seed", 5},
               {"thinking_token_budget", 2}};
  auto [cs, cr] = srv.post("/v1/chat/completions", chat);
  ASSERT_EQ(cs, 200) << cr;
  const Json msg = cr["choices"][0]["message"];
  ASSERT_TRUE(msg["reasoning_content"].is_string()) << cr;
  ASSERT_TRUE(msg["content"].is_string()) << cr;
  auto [ns, nr] = srv.post("/tokenize", Json{{"prompt", msg["reasoning_content"]}});
  ASSERT_EQ(ns, 200);
  EXPECT_LE(nr["count"].get<int>(), 2) << msg;

  // reasoning_effort: "none" renders thinking off (no open <think>, no reasoning); the others
  // are budgets; bad values and contradictions are refused by name.
  Json off = {{"messages", msgs}, {"max_tokens", 4}, {"reasoning_effort", "none"}};
  auto [os, orr] = srv.post("/v1/chat/completions", off);
  ASSERT_EQ(os, 200) << orr;
  EXPECT_TRUE(orr["choices"][0]["message"]["reasoning_content"].is_null()) << orr;
  Json on = off;
  on.erase("reasoning_effort");
  auto [ons, onr] = srv.post("/v1/chat/completions", on);
  ASSERT_EQ(ons, 200) << onr;
  EXPECT_GT(orr["usage"]["prompt_tokens"].get<int>(), onr["usage"]["prompt_tokens"].get<int>());
  for (const char* e : {"minimal", "low", "medium", "high", "xhigh"}) {
    Json r = on;
    r["reasoning_effort"] = e;
    EXPECT_EQ(srv.post("/v1/chat/completions", r).first, 200) << e;
  }
  const std::vector<std::pair<Json, std::string>> refused = {
      {{{"reasoning_effort", "extreme"}}, "reasoning_effort"},
      {{{"reasoning_effort", 3}}, "reasoning_effort"},
      {{{"reasoning_effort", "none"}, {"chat_template_kwargs", {{"enable_thinking", true}}}}, "reasoning_effort"},
      {{{"thinking_token_budget", -1}}, "thinking_token_budget"},
      {{{"thinking_token_budget", "5"}}, "thinking_token_budget"},
  };
  for (const auto& [extra, param] : refused) {
    Json r = on;
    r.update(extra);
    auto [st, e] = srv.post("/v1/chat/completions", r);
    EXPECT_EQ(st, 400) << r;
    EXPECT_EQ(e["error"]["param"], param) << e;
  }
  EXPECT_EQ(srv.stop(), 0) << srv.log();

  // The server's default (--reasoning-budget 0): chat requests think not at all unless they ask.
  ServerProcess capped(model, {"--parallel", "1", "--ctx", "512", "--reasoning-budget", "0"});
  ASSERT_TRUE(capped.ready()) << capped.log();
  Json greedy = {{"messages", msgs}, {"max_tokens", 8}, {"temperature", 0}};
  auto [gs, gr] = capped.post("/v1/chat/completions", greedy);
  ASSERT_EQ(gs, 200) << gr;
  const Json& gm = gr["choices"][0]["message"];
  EXPECT_TRUE(gm["reasoning_content"].is_null() || gm["reasoning_content"] == "") << gr;
  greedy["thinking_token_budget"] = 100;
  auto [hs, hr] = capped.post("/v1/chat/completions", greedy);
  ASSERT_EQ(hs, 200) << hr;
  auto [us, ur] = srv_free_reasoning(model, greedy);
  EXPECT_EQ(hr["choices"][0]["message"].dump(), ur) << "an explicit budget replaces the default";
  EXPECT_EQ(capped.stop(), 0) << capped.log();
  EXPECT_EQ(us, 200);
}

// More choices than the engine can ever hold (slots + queue places) is a 400 that says why,
// not a retryable 429: 35 prompts x n=2 = 70 > 4 slots + 64 queue places.
TEST_F(SemanticsTest, TooManyChoicesForTheEngineIs400) {
  Json prompts = Json::array();
  for (int i = 0; i < 35; ++i)
    prompts.push_back(std::string(size_t(i % 5 + 1), char('a' + i % 26)));
  auto [st, r] =
      s().post("/v1/completions", Json{{"prompt", prompts}, {"n", 2}, {"max_tokens", 1}});
  EXPECT_EQ(st, 400) << r;
  const std::string msg = r["error"]["message"];
  EXPECT_NE(msg.find("70"), std::string::npos) << msg;
  EXPECT_NE(msg.find("68"), std::string::npos) << msg;
  EXPECT_EQ(r["error"]["param"], "n");
}

// /metrics gauges fall back to idle once the requests are answered (kv_tokens_used kept the
// value of the last step).
TEST_F(SemanticsTest, GaugesReturnToIdleAfterRequests) {
  for (int i = 0; i < 3; ++i) {
    auto [st, r] = s().post(
        "/v1/completions",
        Json{{"prompt", "hello there"}, {"max_tokens", 6}, {"ignore_eos", true}, {"n", 2}});
    ASSERT_EQ(st, 200) << r;
  }
  auto events = s().stream("/v1/chat/completions",
                           Json{{"messages", kMsgs}, {"max_tokens", 4}, {"stream", true}});
  ASSERT_FALSE(events.empty());
  double running = -1;
  for (int i = 0; i < 100 && running != 0; ++i) {  // a stream's last bytes can beat its cleanup
    running = s().metric("qwen35_running_sequences");
    if (running != 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(running, 0);
  EXPECT_EQ(s().metric("qwen35_kv_tokens_used"), 0);
  EXPECT_EQ(s().metric("qwen35_kv_usage_ratio"), 0);
  EXPECT_EQ(s().metric("qwen35_slots_used"), 0);
  EXPECT_EQ(s().metric("qwen35_queue_depth"), 0);
}

// The issue's case: n = 13 on --parallel 4 --max-queue 8 always answered "the request queue is
// full; retry later". Also a chat template that loops until its step bound: a 500 (the
// server's template is at fault) that names the bound (its steps are counted, so how long it
// takes follows the machine, and is not asserted here).
TEST(SemanticsAdmission, NeverServableIs400AndRunawayTemplateIs500) {
  TempDir d;
  const std::string dir = synth(d);
  {
    std::ofstream f(dir + "/chat_template.jinja");
    f << "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  }
  ServerProcess srv(dir, {"--parallel", "4", "--max-queue", "8"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  auto [st, r] = srv.post("/v1/completions", Json{{"prompt", "hi"}, {"n", 13}, {"max_tokens", 1}});
  EXPECT_EQ(st, 400) << r;
  const std::string msg = r["error"]["message"];
  for (const char* want : {"13", "12", "4 running", "8 waiting"})
    EXPECT_NE(msg.find(want), std::string::npos) << msg;
  auto [st12, r12] =
      srv.post("/v1/completions", Json{{"prompt", "hi"}, {"n", 12}, {"max_tokens", 1}});
  EXPECT_EQ(st12, 200) << r12;
  EXPECT_EQ(r12["choices"].size(), 12u);

  auto [ts, tr] = srv.post("/v1/chat/completions", Json{{"messages", kMsgs}});
  EXPECT_EQ(ts, 500) << tr;
  EXPECT_EQ(tr["error"]["type"], "server_error") << tr;
  EXPECT_NE(tr["error"]["message"].get<std::string>().find("steps"), std::string::npos) << tr;
  EXPECT_EQ(srv.get("/health").first, 200);
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

// A queue that is full now is a 429 with Retry-After; a group that can never fit is a 400; the
// depth limit follows --max-json-depth.
TEST(SemanticsAdmission, FullQueueIs429WithRetryAfter) {
  TempDir d;
  ServerProcess srv(synth(d), {"--parallel", "1", "--max-queue", "0", "--max-json-depth", "8"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  // One stream holds the only slot until its connection closes.
  const int hold = connect_to(srv.port());
  ASSERT_GE(hold, 0);
  ASSERT_TRUE(send_post(
      hold, "/v1/completions",
      Json{{"prompt", "go"}, {"max_tokens", 100000}, {"ignore_eos", true}, {"stream", true}}
          .dump()));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = read(hold, buf, sizeof buf);
    ASSERT_GT(n, 0) << got;
    got.append(buf, size_t(n));
  }
  const std::string full =
      raw_post(srv.port(), "/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 2}}.dump());
  EXPECT_EQ(full.rfind("HTTP/1.1 429", 0), 0u) << full;
  EXPECT_NE(full.find("\r\nRetry-After: 1\r\n"), std::string::npos) << full;
  const std::string never = raw_post(srv.port(), "/v1/completions",
                                     Json{{"prompt", "x"}, {"max_tokens", 2}, {"n", 2}}.dump());
  EXPECT_EQ(never.rfind("HTTP/1.1 400", 0), 0u) << never;
  EXPECT_EQ(never.find("Retry-After"), std::string::npos) << never;
  close(hold);
  auto [st, r] = srv.post("/tokenize", "{\"prompt\":\"hi\",\"x\":" + nested(8) + "}");
  EXPECT_EQ(st, 400) << r;
  EXPECT_NE(r["error"]["message"].get<std::string>().find("limit of 8"), std::string::npos) << r;
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

}  // namespace
}  // namespace qwen35
