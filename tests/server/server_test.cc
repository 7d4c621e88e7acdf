// qwen35 serve end to end on a synthetic tiny checkpoint: every endpoint, OpenAI response shapes,
// SSE framing, errors (400 with an error object, and the server stays healthy), 429 when the
// queue is full, a client that hangs up mid-stream, and SIGTERM.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <set>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server_process.h"

namespace qwen35 {
namespace {

using testing::Json;
using testing::ServerProcess;
using testing::TempDir;

class ServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + dir_->file("m"));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    server_ = new ServerProcess(dir_->file("m"), {"--parallel", "4", "--ctx", "256"});
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
};
TempDir* ServerTest::dir_ = nullptr;
ServerProcess* ServerTest::server_ = nullptr;

TEST_F(ServerTest, InfoEndpoints) {
  auto [st, body] = s().get("/health");
  EXPECT_EQ(st, 200);
  auto models = Json::parse(s().get("/v1/models").second);
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "m");
  auto [ts, tok] = s().post("/tokenize", Json{{"prompt", "hello world"}});
  ASSERT_EQ(ts, 200) << tok;
  EXPECT_GT(tok["count"].get<int>(), 0);
  auto [ds, detok] = s().post("/detokenize", Json{{"tokens", tok["tokens"]}});
  ASSERT_EQ(ds, 200);
  EXPECT_EQ(detok["prompt"], "hello world");
  auto [as, tmpl] =
      s().post("/apply-template", Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                       {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(as, 200) << tmpl;
  EXPECT_NE(tmpl["prompt"].get<std::string>().find("<|im_start|>user\nhi<|im_end|>"),
            std::string::npos);
  const std::string metrics = s().get("/metrics").second;
  for (const char* m :
       {"qwen35_requests_total", "qwen35_queue_depth", "qwen35_running_sequences",
        "qwen35_time_to_first_token_seconds_bucket", "qwen35_inter_token_latency_seconds_count",
        "qwen35_kv_usage_ratio", "qwen35_slots_used", "qwen35_generation_tokens_total"})
    EXPECT_NE(metrics.find(m), std::string::npos) << m;
}

TEST_F(ServerTest, ChatCompletion) {
  Json req = {{"model", "m"},
              {"messages",
               {{{"role", "system"}, {"content", "be brief"}},
                {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}},
              {"max_tokens", 12},
              {"seed", 3},
              {"logprobs", true},
              {"top_logprobs", 2},
              {"return_token_ids", true}};
  auto [st, r] = s().post("/v1/chat/completions", req);
  ASSERT_EQ(st, 200) << r;
  EXPECT_EQ(r["object"], "chat.completion");
  ASSERT_EQ(r["choices"].size(), 1u);
  const auto& c = r["choices"][0];
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_TRUE(c["finish_reason"] == "length" || c["finish_reason"] == "stop");
  const int64_t n = r["usage"]["completion_tokens"];
  EXPECT_LE(n, 12);
  EXPECT_EQ(c["token_ids"].size(), size_t(n));
  EXPECT_EQ(c["logprobs"]["content"].size(), size_t(n));
  if (n > 0) {
    EXPECT_EQ(c["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
    EXPECT_LE(c["logprobs"]["content"][0]["logprob"].get<double>(), 0.0);
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], r["prompt_token_ids"].size());
  EXPECT_EQ(r["usage"]["total_tokens"].get<int64_t>(),
            r["usage"]["prompt_tokens"].get<int64_t>() + n);
}

TEST_F(ServerTest, CompletionLengthStopEchoAndN) {
  Json req = {{"prompt", "Once upon a time"},
              {"max_tokens", 10},
              {"ignore_eos", true},
              {"temperature", 0},
              {"echo", true},
              {"n", 2}};
  auto [st, r] = s().post("/v1/completions", req);
  ASSERT_EQ(st, 200) << r;
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 20);
  const std::string text = r["choices"][0]["text"];
  EXPECT_EQ(text.rfind("Once upon a time", 0), 0u);
  EXPECT_EQ(r["choices"][0]["text"], r["choices"][1]["text"]);  // greedy: same answer
  // A stop string taken from the greedy answer cuts it right there.
  const std::string gen = text.substr(16);
  ASSERT_GE(gen.size(), 4u);
  const std::string stop = gen.substr(2, 2);
  req = {{"prompt", "Once upon a time"},
         {"max_tokens", 10},
         {"ignore_eos", true},
         {"temperature", 0},
         {"stop", {stop}}};
  auto [st2, r2] = s().post("/v1/completions", req);
  ASSERT_EQ(st2, 200);
  EXPECT_EQ(r2["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r2["choices"][0]["text"], gen.substr(0, gen.find(stop)));
}

// A batch of prompts (strings or token-id lists): choice index = prompt * n + i, each choice as
// if its prompt came alone, prompt tokens counted once per prompt.
TEST_F(ServerTest, BatchedPrompts) {
  const Json req = {{"prompt", {"Hello there", "World"}}, {"n", 2}, {"max_tokens", 4}, {"temperature", 0},
                    {"return_token_ids", true}, {"echo", true}};
  auto [st, r] = s().post("/v1/completions", req);
  ASSERT_EQ(st, 200) << r.dump();
  ASSERT_EQ(r["choices"].size(), 4u);
  int64_t prompt_tokens = 0;
  for (int pi = 0; pi < 2; ++pi) {
    const std::string text = pi == 0 ? "Hello there" : "World";
    auto [st1, solo] = s().post("/v1/completions", Json{{"prompt", text}, {"max_tokens", 4}, {"temperature", 0},
                                                        {"return_token_ids", true}, {"echo", true}});
    ASSERT_EQ(st1, 200);
    prompt_tokens += solo["usage"]["prompt_tokens"].get<int64_t>();
    EXPECT_EQ(r["prompt_token_ids"][pi], solo["prompt_token_ids"]);
    for (int i = 0; i < 2; ++i) {
      const Json& c = r["choices"][pi * 2 + i];
      EXPECT_EQ(c["index"], pi * 2 + i);
      EXPECT_EQ(c["text"], solo["choices"][0]["text"]) << "prompt " << pi << " choice " << i;
      EXPECT_EQ(c["token_ids"], solo["choices"][0]["token_ids"]);
    }
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(r["usage"]["completion_tokens"], 16);
  // Token-id lists, streamed: every index appears.
  auto events = s().stream("/v1/completions", Json{{"prompt", Json::array({Json::array({1, 2, 3}), Json::array({4, 5})})},
                                                   {"max_tokens", 2}, {"stream", true}});
  std::set<int> seen;
  for (const auto& e : events) {
    if (e == "[DONE]") continue;
    const Json chunk = Json::parse(e);
    for (const auto& c : chunk["choices"]) seen.insert(c["index"].get<int>());
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1}));
  // Malformed batches.
  for (const Json& bad : {Json::array({Json::array()}), Json::array({"a", 5}), Json::array({Json::array({"x"})})}) {
    auto [st2, e] = s().post("/v1/completions", Json{{"prompt", bad}, {"max_tokens", 2}});
    EXPECT_EQ(st2, 400) << bad.dump();
  }
}

TEST_F(ServerTest, EchoWithPromptLogprobs) {
  auto [ts, tok] = s().post("/tokenize", Json{{"prompt", "Once upon a time"}});
  ASSERT_EQ(ts, 200);
  const size_t n_prompt = tok["tokens"].size();
  Json req = {{"prompt", "Once upon a time"},
              {"max_tokens", 3},
              {"ignore_eos", true},
              {"temperature", 0},
              {"echo", true},
              {"logprobs", 2}};
  auto [st, r] = s().post("/v1/completions", req);
  ASSERT_EQ(st, 200) << r;
  const auto& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), n_prompt + 3) << lp;
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  for (size_t i = 1; i < n_prompt + 3; ++i) {
    EXPECT_LE(lp["token_logprobs"][i].get<double>(), 0.0);
    EXPECT_EQ(lp["top_logprobs"][i].size(), 2u);
  }
  std::string joined;
  for (const auto& t : lp["tokens"]) joined += t.get<std::string>();
  EXPECT_EQ(joined, r["choices"][0]["text"]);
}

TEST_F(ServerTest, StreamingFraming) {
  std::string raw;
  auto events = s().stream("/v1/chat/completions",
                           Json{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                {"max_tokens", 8},
                                {"stream", true},
                                {"seed", 1},
                                {"stream_options", {{"include_usage", true}}}},
                           &raw);
  ASSERT_GE(events.size(), 3u) << raw;
  EXPECT_EQ(raw.rfind("data: ", 0), 0u);
  EXPECT_EQ(events.back(), "[DONE]");
  auto first = Json::parse(events[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  auto usage = Json::parse(events[events.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 0);
  auto last = Json::parse(events[events.size() - 3]);
  EXPECT_FALSE(last["choices"][0]["finish_reason"].is_null()) << last;

  // Streamed completion text equals the non-streamed one.
  Json req = {{"prompt", "abc"}, {"max_tokens", 12}, {"ignore_eos", true}, {"temperature", 0}};
  auto [st, whole] = s().post("/v1/completions", req);
  ASSERT_EQ(st, 200);
  req["stream"] = true;
  std::string text;
  for (const auto& e : s().stream("/v1/completions", req)) {
    if (e == "[DONE]") break;
    text += Json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, whole["choices"][0]["text"]);

  // Raw framing as curl sees it: `data: ` lines, blank-line separated, `data: [DONE]` last.
  if (std::system("command -v curl >/dev/null 2>&1") != 0) GTEST_SKIP() << "curl not installed";
  TempDir d;
  const std::string cmd = "curl -sN -H 'Content-Type: application/json' -d '" + req.dump() +
                          "' http://127.0.0.1:" + std::to_string(s().port()) +
                          "/v1/completions > " + d.file("out") + " -D " + d.file("headers");
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::string out = testing::read_file(d.file("out"));
  const std::string headers = testing::read_file(d.file("headers"));
  EXPECT_NE(headers.find("text/event-stream"), std::string::npos) << headers;
  EXPECT_EQ(out.rfind("data: {", 0), 0u);
  const std::string tail = "data: [DONE]\n\n";
  ASSERT_GE(out.size(), tail.size());
  EXPECT_EQ(out.substr(out.size() - tail.size()), tail);
  size_t n_events = 0;
  for (size_t p = 0; (p = out.find("\n\n", p)) != std::string::npos; p += 2) ++n_events;
  EXPECT_GE(n_events, 3u);   // opening chunk, text chunks, finish, [DONE]
  EXPECT_LE(n_events, 15u);  // at most one chunk per token
}

TEST_F(ServerTest, MalformedRequestsGet400) {
  const std::string chat = "/v1/chat/completions";
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {chat, "{not json"},
      {chat, "[1,2]"},
      {chat, Json{{"messages", "hi"}}.dump()},
      {chat, Json{{"messages", Json::array()}}.dump()},
      {chat, Json{{"messages", {{{"role", "wizard"}, {"content", "hi"}}}}}.dump()},
      {chat, Json{{"messages", msgs}, {"max_tokens", -1}}.dump()},
      {chat, Json{{"messages", msgs}, {"max_tokens", "ten"}}.dump()},
      {chat, Json{{"messages", msgs}, {"temperature", -0.5}}.dump()},
      {chat, Json{{"messages", msgs}, {"top_p", 0}}.dump()},
      {chat, Json{{"messages", msgs}, {"stream", "yes"}}.dump()},
      {chat, Json{{"messages", msgs}, {"stop", 5}}.dump()},
      {chat, Json{{"messages", msgs}, {"n", 0}}.dump()},
      {chat, std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}")},
      {"/v1/completions", Json{{"prompt", 7}}.dump()},
      {"/v1/completions", Json{{"prompt", "x"}, {"logprobs", 99}}.dump()},
  };
  for (const auto& [path, body] : cases) {
    auto [st, r] = s().post(path, body);
    EXPECT_EQ(st, 400) << body;
    ASSERT_TRUE(r.is_object()) << body;
    ASSERT_TRUE(r.contains("error")) << r;
    EXPECT_FALSE(r["error"]["message"].get<std::string>().empty());
  }
  // A model this server does not serve is a 404 model_not_found, as OpenAI answers it.
  auto [stm, rm] = s().post(chat, Json{{"messages", msgs}, {"model", "gpt-4"}}.dump());
  EXPECT_EQ(stm, 404) << rm;
  EXPECT_EQ(rm["error"]["type"], "model_not_found") << rm;
  EXPECT_EQ(rm["error"]["param"], "model") << rm;
  // A prompt longer than the context names both numbers.
  std::vector<int> ids(300, 5);
  auto [st, r] = s().post("/v1/completions", Json{{"prompt", ids}});
  EXPECT_EQ(st, 400);
  const std::string msg = r["error"]["message"];
  EXPECT_NE(msg.find("300"), std::string::npos) << msg;
  EXPECT_NE(msg.find("256"), std::string::npos) << msg;
  EXPECT_EQ(s().get("/no/such/route").first, 404);
  EXPECT_EQ(s().get("/health").first, 200);
}

// One route table: an unknown path is a 404, a known path with another method a 405 that says
// which methods it takes (Allow), each in its API's error shape.
TEST_F(ServerTest, UnknownRoutesAre404AndWrongMethods405) {
  auto c = s().client();
  auto nope = c.send("POST", "/v1/nope", "{}", nullptr);
  EXPECT_EQ(nope.status, 404);
  EXPECT_EQ(Json::parse(nope.body), Json::parse(R"({"error": {"message": "no route for POST /v1/nope",
      "type": "not_found_error", "param": null, "code": 404}})"));
  auto get_chat = c.get("/v1/chat/completions");
  EXPECT_EQ(get_chat.status, 405);
  EXPECT_EQ(get_chat.header("Allow"), "POST");
  EXPECT_EQ(Json::parse(get_chat.body),
            Json::parse(R"({"error": {"message": "/v1/chat/completions takes POST, not GET",
      "type": "invalid_request_error", "param": null, "code": 405}})"));
  auto post_health = c.send("POST", "/health", "{}", nullptr);
  EXPECT_EQ(post_health.status, 405);
  EXPECT_EQ(post_health.header("Allow"), "GET, HEAD");  // a GET route answers HEAD too
  auto get_messages = c.get("/v1/messages");
  EXPECT_EQ(get_messages.status, 405);
  EXPECT_EQ(Json::parse(get_messages.body),
            Json::parse(R"({"type": "error", "error": {"type": "invalid_request_error",
      "message": "/v1/messages takes POST, not GET"}})"));
  // The one prelude: a body that is not a JSON object, in each API's shape.
  auto bad_chat = c.post("/v1/chat/completions", "[1]");
  EXPECT_EQ(bad_chat.status, 400);
  EXPECT_EQ(Json::parse(bad_chat.body),
            Json::parse(R"({"error": {"message": "the request body is not a valid JSON object",
      "type": "invalid_request_error", "param": null, "code": 400}})"));
  auto bad_messages = c.post("/v1/messages", "[1]");
  EXPECT_EQ(Json::parse(bad_messages.body),
            Json::parse(R"({"type": "error", "error": {"type": "invalid_request_error",
      "message": "the request body is not a valid JSON object"}})"));
  EXPECT_EQ(s().get("/health").first, 200);
}

TEST_F(ServerTest, DisconnectFreesTheSlot) {
  for (int k = 0; k < 3; ++k) {
    int chunks = 0;
    s().client().send(
        "POST", "/v1/completions",
        Json{{"prompt", "go"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}}.dump(),
        [&](std::string_view) { return ++chunks < 3; });
  }
  double used = -1;
  for (int i = 0; i < 200; ++i) {
    used = s().metric("qwen35_slots_used");
    if (used == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(s().get("/health").first, 200);
}

// A non-streaming request whose client hangs up is cancelled too (its slot freed, counted as
// cancelled), not run to its max_tokens.
TEST(ServerDisconnect, NonStreamingRequestIsCancelled) {
  TempDir d;
  auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + d.file("m"));
  ASSERT_EQ(r.exit_code, 0);
  ServerProcess srv(d.file("m"), {"--parallel", "2", "--ctx", "8192"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(srv.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body =
      Json{{"prompt", "go"}, {"max_tokens", 8000}, {"ignore_eos", true}}.dump();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  const std::string msg = head + body;
  ASSERT_EQ(write(fd, msg.data(), msg.size()), ssize_t(msg.size()));
  double used = 0;
  for (int i = 0; i < 400 && used != 1; ++i) {
    used = srv.metric("qwen35_slots_used");
    if (used != 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(used, 1) << "the request never started";
  const double cancelled = srv.metric("qwen35_engine_cancelled_total");
  close(fd);
  for (int i = 0; i < 200 && used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    used = srv.metric("qwen35_slots_used");
  }
  EXPECT_EQ(used, 0) << "the slot was not freed";
  EXPECT_EQ(srv.metric("qwen35_engine_cancelled_total"), cancelled + 1);
  EXPECT_EQ(srv.get("/health").first, 200);
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

TEST(ServerAdmission, QueueFullGives429AndApiKey) {
  TempDir d;
  auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + d.file("m"));
  ASSERT_EQ(r.exit_code, 0);
  ServerProcess srv(d.file("m"), {"--parallel", "1", "--max-queue", "0", "--api-key", "sekret",
                                  "--max-body", "4096"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  auto c = srv.client();
  EXPECT_EQ(c.get("/v1/models").status, 401);
  c.set_bearer_token("sekret");
  EXPECT_EQ(c.get("/v1/models").status, 200);
  auto big = c.post("/v1/completions", Json{{"prompt", std::string(5000, 'a')}}.dump());
  ASSERT_TRUE(big) << big.error;
  EXPECT_EQ(big.status, 413);
  // One long stream holds the only slot; a second request is refused with 429.
  std::atomic<bool> started{false}, release{false};
  std::thread t([&] {
    auto c2 = srv.client();
    c2.set_bearer_token("sekret");
    int chunks = 0;
    c2.send("POST", "/v1/completions",
            Json{{"prompt", "go"}, {"max_tokens", 100000}, {"ignore_eos", true}, {"stream", true}}
                .dump(),
            [&](std::string_view) {
              if (++chunks == 3) started = true;
              return !release.load();  // holds the slot until the second request is answered
            });
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto res = c.post("/v1/completions", Json{{"prompt", "x"}, {"max_tokens", 2}}.dump());
  release = true;
  t.join();
  ASSERT_TRUE(res) << res.error;
  EXPECT_EQ(res.status, 429) << res.body;
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

}  // namespace
}  // namespace qwen35

namespace qwen35 {
namespace {

// SIGTERM while a stream is running: the stream ends (finish_reason "abort", then [DONE]) and
// the server exits 0.
TEST(ServerShutdown, SigtermCancelsInFlightAndExitsZero) {
  TempDir d;
  auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + d.file("m"));
  ASSERT_EQ(r.exit_code, 0);
  ServerProcess srv(d.file("m"), {"--parallel", "2"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  std::string raw;
  std::atomic<int> chunks{0};
  std::thread t([&] {
    srv.client().send(
        "POST", "/v1/completions",
        Json{{"prompt", "go"}, {"max_tokens", 100000}, {"ignore_eos", true}, {"stream", true}}
            .dump(),
        [&](std::string_view p) {
          raw.append(p);
          ++chunks;
          return true;
        });
  });
  while (chunks < 5) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(srv.stop(), 0) << srv.log();
  t.join();
  EXPECT_NE(raw.find("\"finish_reason\":\"abort\""), std::string::npos);
  EXPECT_NE(raw.find("data: [DONE]"), std::string::npos);
}

}  // namespace
}  // namespace qwen35

namespace qwen35 {
namespace {

// The load tool against a live server: no errors, clients that hang up leave it healthy, and
// /metrics is back to idle (no leaked slot, KV block or snapshot) afterwards. A short version of issue 6's load run.
TEST(ServerLoad, LoadtestLeavesTheServerIdle) {
  TempDir d;
  auto r = testing::run_qwen35("synth --preset tiny --quiet --out " + d.file("m"));
  ASSERT_EQ(r.exit_code, 0);
  ServerProcess srv(d.file("m"), {"--parallel", "8"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const std::string port = std::to_string(srv.port());
  r = testing::run_qwen35("loadtest --port " + port + " -c 16 -n 48 --max-tokens 8 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  auto j = Json::parse(r.out);
  EXPECT_EQ(j["ok"], 48);
  EXPECT_EQ(j["errors"], 0);
  EXPECT_EQ(j["generated_tokens"], 48 * 8);
  EXPECT_EQ(j["token_source"], "token_ids");  // ours: exact, per chunk (cli/stream_tokens.h)
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  r = testing::run_qwen35("loadtest --port " + port +
                          " -c 8 -n 8 --disconnect 8 --max-tokens 500 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(Json::parse(r.out)["disconnected"], 8);
  double used = -1;
  for (int i = 0; i < 200 && used != 0; ++i) {
    used = srv.metric("qwen35_slots_used");
    if (used != 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(used, 0);
  EXPECT_EQ(srv.metric("qwen35_queue_depth"), 0);
  // The prefix cache is on (the default): the only KV blocks held are its snapshots' own.
  EXPECT_EQ(srv.metric("qwen35_kv_tokens_used"), 0);
  EXPECT_GE(srv.metric("qwen35_prefix_cache_snapshots"), 0);
  EXPECT_EQ(srv.metric("qwen35_kv_blocks_used"), srv.metric("qwen35_prefix_cache_blocks"));
  EXPECT_EQ(srv.get("/health").first, 200);
  EXPECT_EQ(srv.stop(), 0) << srv.log();
}

}  // namespace
}  // namespace qwen35
