// /v1/messages and /v1/messages/count_tokens (the Anthropic Messages API) against a live server
// on the bundled trained model: with greedy decoding a Message's thinking, text and tool_use
// blocks equal the chat answer for the same conversation; the streamed events are well-formed,
// in order, and give the same blocks; usage adds up to the chat's; count_tokens is the length of
// the rendered prompt; bad requests are 400s in Anthropic's error format; x-api-key
// authenticates every route.
#include <atomic>
#include <thread>

#include "api_compat.h"

namespace qwen35 {
namespace {

struct MsgAnswer {
  std::string text, thinking;
  std::vector<std::pair<std::string, Json>> calls;
};

MsgAnswer message_answer(const Json& content) {
  MsgAnswer a;
  for (const auto& b : content) {
    if (b["type"] == "text") a.text += b["text"].get<std::string>();
    if (b["type"] == "thinking") a.thinking += b["thinking"].get<std::string>();
    if (b["type"] == "tool_use") a.calls.emplace_back(b["name"], b["input"]);
  }
  return a;
}

void expect_message_as_chat(const Json& msg, const Json& chat) {
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
  const MsgAnswer a = message_answer(msg["content"]);
  const Json& m = chat["choices"][0]["message"];
  EXPECT_EQ(a.text, visible(m["content"])) << msg.dump();
  EXPECT_EQ(a.thinking, visible(m["reasoning_content"])) << msg.dump();
  const size_t n_calls = m.contains("tool_calls") ? m["tool_calls"].size() : 0;
  ASSERT_EQ(a.calls.size(), n_calls);
  for (size_t i = 0; i < n_calls; ++i) {
    EXPECT_EQ(a.calls[i].first, m["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(a.calls[i].second,
              Json::parse(m["tool_calls"][i]["function"]["arguments"].get<std::string>()));
  }
  const Json& u = msg["usage"];
  EXPECT_EQ(u["input_tokens"].get<int64_t>() + u["cache_read_input_tokens"].get<int64_t>(),
            chat["usage"]["prompt_tokens"].get<int64_t>());
  EXPECT_EQ(u["output_tokens"], chat["usage"]["completion_tokens"]);
  const std::string fr = chat["choices"][0]["finish_reason"];
  const std::string want = fr == "length"       ? "max_tokens"
                           : fr == "tool_calls" ? "tool_use"
                                                : "end_turn";
  EXPECT_EQ(msg["stop_reason"], want);
}

TEST_F(ApiCompatTest, MessagesEqualsChat) {
  const Json user = {
      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hello there"}}}}}};
  // No "thinking": off, as Anthropic's default is.
  auto [st, r] = post(s(), "/v1/messages",
                      Json{{"system", "Be brief."},
                           {"messages", user},
                           {"max_tokens", 40},
                           {"temperature", 0},
                           {"metadata", {{"user_id", "u"}}}});
  ASSERT_EQ(st, 200) << r;
  const Json plain = {{{"role", "system"}, {"content", "Be brief."}},
                      {{"role", "user"}, {"content", "Hello there"}}};
  expect_message_as_chat(r, chat({{"messages", plain},
                               {"max_tokens", 40},
                               {"chat_template_kwargs", {{"enable_thinking", false}}}}));
  // Thinking with a budget: the thinking block first, then the answer.
  auto [st2, r2] = post(s(), "/v1/messages",
                        Json{{"system", {{{"type", "text"}, {"text", "Be brief."}}}},
                             {"messages", user},
                             {"max_tokens", 48},
                             {"temperature", 0},
                             {"thinking", {{"type", "enabled"}, {"budget_tokens", 12}}}});
  ASSERT_EQ(st2, 200) << r2;
  const Json c2 = chat({{"messages", plain},
                        {"max_tokens", 48},
                        {"thinking_token_budget", 12},
                        {"chat_template_kwargs", {{"enable_thinking", true}}}});
  expect_message_as_chat(r2, c2);
  if (!visible(c2["choices"][0]["message"]["reasoning_content"]).empty()) {
    EXPECT_EQ(r2["content"][0]["type"], "thinking");
    EXPECT_EQ(r2["content"][0]["signature"], "");
  }
}

// Thinking blocks, whole and streamed (thinking_delta, then a signature_delta), against chat's
// reasoning_content with the same budget.
TEST(MessagesThinking, ThinkingModel) {
  RandomModel m;
  ASSERT_TRUE(m.s().ready()) << m.s().log();
  const Json req = {{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                    {"max_tokens", 12},
                    {"temperature", 0},
                    {"thinking", {{"type", "enabled"}, {"budget_tokens", 5}}}};
  auto [st, r] = post(m.s(), "/v1/messages", req);
  ASSERT_EQ(st, 200) << r;
  auto [cs, c] = post(m.s(), "/v1/chat/completions",
                      Json{{"messages", {{{"role", "user"}, {"content", "Hello"}}}},
                           {"max_tokens", 12},
                           {"temperature", 0},
                           {"thinking_token_budget", 5},
                           {"chat_template_kwargs", {{"enable_thinking", true}}}});
  ASSERT_EQ(cs, 200) << c;
  ASSERT_FALSE(visible(c["choices"][0]["message"]["reasoning_content"]).empty()) << c;
  expect_message_as_chat(r, c);
  EXPECT_EQ(r["content"][0]["type"], "thinking");
  Json sreq = req;
  sreq["stream"] = true;
  std::string thinking;
  bool signed_ = false;
  for (const auto& e : named_events(m.s(), "/v1/messages", sreq)) {
    if (e.name != "content_block_delta") continue;
    if (e.data["delta"]["type"] == "thinking_delta") {
      EXPECT_FALSE(signed_);
      thinking += e.data["delta"]["thinking"].get<std::string>();
    }
    if (e.data["delta"]["type"] == "signature_delta") signed_ = true;
  }
  EXPECT_TRUE(signed_);
  EXPECT_EQ(thinking, r["content"][0]["thinking"]);
  // A thinking block in the history is the assistant turn's reasoning_content.
  auto [hs, h] = post(m.s(), "/v1/messages",
                      Json{{"messages",
                            {{{"role", "user"}, {"content", "a"}},
                             {{"role", "assistant"},
                              {"content",
                               {{{"type", "thinking"}, {"thinking", "hmm"}, {"signature", "x"}},
                                {{"type", "text"}, {"text", "b"}}}}},
                             {{"role", "user"}, {"content", "c"}}}},
                           {"max_tokens", 4},
                           {"temperature", 0}});
  ASSERT_EQ(hs, 200) << h;
  auto [hc, hchat] =
      post(m.s(), "/v1/chat/completions",
           Json{{"messages",
                 {{{"role", "user"}, {"content", "a"}},
                  {{"role", "assistant"}, {"content", "b"}, {"reasoning_content", "hmm"}},
                  {{"role", "user"}, {"content", "c"}}}},
                {"max_tokens", 4},
                {"temperature", 0},
                {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(hc, 200);
  expect_message_as_chat(h, hchat);
}

TEST_F(ApiCompatTest, MessagesToolHistory) {
  const Json tools = {{{"name", "get_weather"},
                       {"description", "the weather in a city"},
                       {"input_schema", kTools[0]["function"]["parameters"]}}};
  const Json req = {{"tools", tools},
                    {"tool_choice", {{"type", "auto"}}},
                    {"messages",
                     {{{"role", "user"}, {"content", "Weather in Paris?"}},
                      {{"role", "assistant"},
                       {"content",
                        {{{"type", "text"}, {"text", "Let me look."}},
                         {{"type", "tool_use"},
                          {"id", "toolu_1"},
                          {"name", "get_weather"},
                          {"input", {{"city", "Paris"}}}}}}},
                      {{"role", "user"},
                       {"content",
                        {{{"type", "tool_result"},
                          {"tool_use_id", "toolu_1"},
                          {"content", {{{"type", "text"}, {"text", "sunny"}}}}}}}}}},
                    {"max_tokens", 24},
                    {"temperature", 0}};
  auto [st, r] = post(s(), "/v1/messages", req);
  ASSERT_EQ(st, 200) << r;
  expect_message_as_chat(
      r, chat({{"tools", kTools},
               {"chat_template_kwargs", {{"enable_thinking", false}}},
               {"messages",
                {{{"role", "user"}, {"content", "Weather in Paris?"}},
                 {{"role", "assistant"},
                  {"content", "Let me look."},
                  {"tool_calls",
                   {{{"id", "toolu_1"},
                     {"type", "function"},
                     {"function",
                      {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
                 {{"role", "tool"}, {"tool_call_id", "toolu_1"}, {"content", "sunny"}}}},
               {"max_tokens", 24}}));
}

// tool_choice any / tool map onto chat's "required" / a named function; until constrained
// decoding lands in the chat path these are skipped (the chat endpoint refuses the equivalent
// request as "not supported").
TEST_F(ApiCompatTest, MessagesForcedTools) {
  const Json chat_req = {
      {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
      {"tools", kTools},
      {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
      {"max_tokens", 160},
      {"temperature", 0},
      {"chat_template_kwargs", {{"enable_thinking", false}}}};
  if (chat_refuses(chat_req)) GTEST_SKIP() << "constrained decoding is not in the chat path yet";
  const Json tools = {{{"name", "get_weather"},
                       {"description", "the weather in a city"},
                       {"input_schema", kTools[0]["function"]["parameters"]}}};
  for (const char* type : {"tool", "any"}) {
    Json choice = {{"type", type}};
    Json creq = chat_req;
    if (std::string(type) == "tool") {
      choice["name"] = "get_weather";
    } else {
      creq["tool_choice"] = "required";
    }
    auto [st, r] = post(s(), "/v1/messages",
                        Json{{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                             {"tools", tools},
                             {"tool_choice", choice},
                             {"max_tokens", 160},
                             {"temperature", 0}});
    ASSERT_EQ(st, 200) << r;
    expect_message_as_chat(r, chat(creq));
    EXPECT_EQ(r["stop_reason"], "tool_use");
  }
}

// On a Qwen3 checkpoint (Hermes-style JSON calls in its template): forced calls ("tool" and
// "any"), thinking on and off, equal the chat answer; streamed, the tool_use block's input is the
// same.
TEST(MessagesQwen3, ForcedToolsSameAsChat) {
  RandomModel m("qwen3-tiny");
  ASSERT_TRUE(m.s().ready()) << m.s().log();
  const Json tools = {{{"name", "get_weather"},
                       {"description", "the weather in a city"},
                       {"input_schema", kTools[0]["function"]["parameters"]}}};
  for (const bool think : {false, true})
    for (const char* type : {"tool", "any"}) {
      SCOPED_TRACE(std::string(type) + (think ? " thinking" : ""));
      Json choice = {{"type", type}};
      Json creq = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                   {"tools", kTools}, {"max_tokens", 60}, {"temperature", 0},
                   {"chat_template_kwargs", {{"enable_thinking", think}}}};
      if (std::string(type) == "tool") {
        choice["name"] = "get_weather";
        creq["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
      } else {
        creq["tool_choice"] = "required";
      }
      Json req = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                  {"tools", tools}, {"tool_choice", choice}, {"max_tokens", 60},
                  {"temperature", 0}};
      if (think) req["thinking"] = {{"type", "enabled"}, {"budget_tokens", 16}};
      if (think) creq["thinking_token_budget"] = 16;
      auto [st, r] = post(m.s(), "/v1/messages", req);
      ASSERT_EQ(st, 200) << r;
      auto [cs, c] = post(m.s(), "/v1/chat/completions", creq);
      ASSERT_EQ(cs, 200) << c;
      expect_message_as_chat(r, c);
      EXPECT_EQ(r["stop_reason"], "tool_use");
      const MsgAnswer a = message_answer(r["content"]);
      ASSERT_EQ(a.calls.size(), 1u) << r;
      EXPECT_TRUE(a.calls[0].second["city"].is_string()) << r;
      req["stream"] = true;
      Json input;
      for (const auto& e : named_events(m.s(), "/v1/messages", req))
        if (e.name == "content_block_delta" && e.data["delta"]["type"] == "input_json_delta")
          input = Json::parse(e.data["delta"]["partial_json"].get<std::string>());
      EXPECT_EQ(input, a.calls[0].second);
    }
}

TEST_F(ApiCompatTest, MessagesStopSequence) {
  const Json base = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                     {"max_tokens", 24},
                     {"temperature", 0}};
  auto [st, whole] = post(s(), "/v1/messages", base);
  ASSERT_EQ(st, 200) << whole;
  const std::string text = message_answer(whole["content"]).text;
  if (text.size() < 8) GTEST_SKIP() << "the answer is too short to cut: " << text;
  const std::string stop = text.substr(4, 3);
  Json req = base;
  req["stop_sequences"] = {stop};
  auto [st2, cut] = post(s(), "/v1/messages", req);
  ASSERT_EQ(st2, 200) << cut;
  EXPECT_EQ(cut["stop_reason"], "stop_sequence");
  EXPECT_EQ(cut["stop_sequence"], stop);
  EXPECT_EQ(message_answer(cut["content"]).text, text.substr(0, text.find(stop)));
}

// Streaming: message_start first, each block started, filled and stopped in index order,
// message_delta then message_stop last; the blocks equal the non-streamed answer.
TEST_F(ApiCompatTest, MessagesStreaming) {
  for (const bool think : {false, true}) {
    Json req = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                {"max_tokens", 40},
                {"temperature", 0}};
    if (think) req["thinking"] = {{"type", "enabled"}, {"budget_tokens", 16}};
    auto [st, whole] = post(s(), "/v1/messages", req);
    ASSERT_EQ(st, 200) << whole;
    req["stream"] = true;
    const auto events = named_events(s(), "/v1/messages", req);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.front().name, "message_start");
    EXPECT_EQ(events.back().name, "message_stop");
    EXPECT_EQ(events[events.size() - 2].name, "message_delta");
    const Json& start = events.front().data["message"];
    EXPECT_TRUE(start["content"].empty());
    EXPECT_TRUE(start["stop_reason"].is_null());
    Json blocks = Json::array();
    int open = -1;
    for (const auto& e : events) {
      EXPECT_EQ(e.data["type"], e.name);
      if (e.name == "content_block_start") {
        EXPECT_EQ(open, -1);
        open = e.data["index"];
        EXPECT_EQ(size_t(open), blocks.size());
        blocks.push_back(e.data["content_block"]);
      } else if (e.name == "content_block_delta") {
        ASSERT_EQ(e.data["index"], open);
        const Json& d = e.data["delta"];
        Json& b = blocks[size_t(open)];
        if (d["type"] == "text_delta")
          b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
        if (d["type"] == "thinking_delta")
          b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
        if (d["type"] == "input_json_delta")
          b["input"] = Json::parse(d["partial_json"].get<std::string>());
      } else if (e.name == "content_block_stop") {
        EXPECT_EQ(e.data["index"], open);
        open = -1;
      }
    }
    EXPECT_EQ(open, -1);
    const Json& md = events[events.size() - 2].data;
    EXPECT_EQ(md["delta"]["stop_reason"], whole["stop_reason"]);
    EXPECT_EQ(md["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
    const MsgAnswer a = message_answer(blocks), b = message_answer(whole["content"]);
    EXPECT_EQ(a.text, b.text) << think;
    EXPECT_EQ(a.thinking, b.thinking) << think;
    EXPECT_EQ(blocks.size(), whole["content"].size());
  }
}

TEST_F(ApiCompatTest, MessagesCountTokens) {
  const Json messages = {{{"role", "user"}, {"content", "Weather in Paris?"}}};
  const Json tools = {
      {{"name", "get_weather"}, {"input_schema", kTools[0]["function"]["parameters"]}}};
  auto [st, r] = post(s(), "/v1/messages/count_tokens",
                      Json{{"system", "Be brief."}, {"messages", messages}, {"tools", tools}});
  ASSERT_EQ(st, 200) << r;
  const Json chat_tools = {
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"}, {"parameters", kTools[0]["function"]["parameters"]}}}}};
  auto [ts, tok] =
      post(s(), "/tokenize",
           Json{{"messages", {{{"role", "system"}, {"content", "Be brief."}}, messages[0]}},
                {"tools", chat_tools},
                {"chat_template_kwargs", {{"enable_thinking", false}}}});
  ASSERT_EQ(ts, 200) << tok;
  EXPECT_EQ(r["input_tokens"], tok["count"]);
  EXPECT_GT(r["input_tokens"].get<int>(), 0);
}

void expect_anthropic_error(int st, const Json& r, int status, const char* type) {
  EXPECT_EQ(st, status) << r;
  EXPECT_EQ(r["type"], "error") << r;
  EXPECT_EQ(r["error"]["type"], type) << r;
  EXPECT_FALSE(r["error"]["message"].get<std::string>().empty()) << r;
}

TEST_F(ApiCompatTest, MessagesErrors) {
  const Json msgs = {{{"role", "user"}, {"content", "hi"}}};
  const std::vector<std::pair<Json, std::string>> cases = {
      {Json{{"messages", msgs}}, "max_tokens"},
      {Json{{"messages", msgs}, {"max_tokens", 0}}, "max_tokens"},
      {Json{{"messages", "hi"}, {"max_tokens", 4}}, "messages"},
      {Json{{"messages", Json::array()}, {"max_tokens", 4}}, "messages"},
      {Json{{"messages", {{{"role", "user"}, {"content", {{{"type", "image"}}}}}}},
            {"max_tokens", 4}},
       "messages[0].content[0].source"},
      {Json{{"messages", {{{"role", "robot"}, {"content", "x"}}}}, {"max_tokens", 4}},
       "messages[0].role"},
      {Json{{"messages",
             {{{"role", "assistant"},
               {"content", {{{"type", "tool_use"}, {"id", "t"}, {"name", "f"}}}}}}},
            {"max_tokens", 4}},
       "messages[0].content[0].input"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"stop_sequences", {""}}}, "stop_sequences"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"temperature", "x"}}, "temperature"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"thinking", {{"type", "maybe"}}}},
       "thinking.type"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"tool_choice", "auto"}}, "tool_choice"},
  };
  for (const auto& [body, what] : cases) {
    auto [st, r] = post(s(), "/v1/messages", body);
    expect_anthropic_error(st, r, 400, "invalid_request_error");
    EXPECT_NE(r["error"]["message"].get<std::string>().find(what), std::string::npos)
        << what << ": " << r;
  }
  // Whole bodies, in Anthropic's shape: no param, the message leads with the Messages name of
  // the field, from the Messages parser and from the chat parser under it alike.
  const std::vector<std::pair<Json, std::string>> exact = {
      {Json{{"messages", msgs}}, "max_tokens: 'max_tokens' is required"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"stop_sequences", {""}}},
       "stop_sequences: the strings of 'stop_sequences' must not be empty"},
      {Json{{"messages", msgs},
            {"max_tokens", 4},
            {"thinking", {{"type", "enabled"}, {"budget_tokens", "lots"}}}},
       "thinking.budget_tokens: 'thinking.budget_tokens' must be an integer"},
      {Json{{"messages", msgs}, {"max_tokens", 4}, {"temperature", "x"}},
       "temperature: 'temperature' must be a number"},
      {Json{{"messages", {{{"role", "robot"}, {"content", "x"}}}}, {"max_tokens", 4}},
       "messages[0].role: unknown role 'robot' in 'messages[0]' (expected user, assistant or "
       "system)"},
  };
  for (const auto& [body, message] : exact) {
    auto [st, r] = post(s(), "/v1/messages", body);
    EXPECT_EQ(st, 400) << body.dump();
    EXPECT_EQ(r, (Json{{"type", "error"},
                       {"error", {{"type", "invalid_request_error"}, {"message", message}}}}))
        << body.dump();
  }
  auto [st, r] = post(s(), "/v1/messages", std::string("{not json"));
  expect_anthropic_error(st, r, 400, "invalid_request_error");
  auto [st2, r2] = post(s(), "/v1/messages/nope", Json{{"max_tokens", 1}});
  expect_anthropic_error(st2, r2, 404, "not_found_error");
  EXPECT_EQ(s().get("/health").first, 200);
}

TEST(ApiKeyTest, XApiKeyOnEveryRoute) {
  ServerProcess srv(bundled_model(), {"--api-key", "sekret", "--ctx", "256"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const Json msg = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  for (const char* path : {"/v1/messages", "/v1/chat/completions"}) {
    auto c = srv.client();
    auto none = c.post(path, msg.dump());
    EXPECT_EQ(none.status, 401) << path;
    c.set_header("x-api-key", "wrong");
    EXPECT_EQ(c.post(path, msg.dump()).status, 401) << path;
    auto ok = srv.client();
    ok.set_header("x-api-key", "sekret");
    ok.set_header("anthropic-version", "2023-06-01");
    EXPECT_EQ(ok.post(path, msg.dump()).status, 200) << path;
    auto bearer = srv.client();
    bearer.set_bearer_token("sekret");
    EXPECT_EQ(bearer.post(path, msg.dump()).status, 200) << path;
  }
  auto c = srv.client();
  auto r = c.post("/v1/messages", msg.dump());
  expect_anthropic_error(r.status, Json::parse(r.body), 401, "authentication_error");
  auto m = srv.client();
  m.set_header("x-api-key", "sekret");
  EXPECT_EQ(m.get("/v1/models").status, 200);
  auto resp = m.post("/v1/responses", Json{{"input", "hi"}, {"max_output_tokens", 2}}.dump());
  EXPECT_EQ(resp.status, 200) << resp.body;
}

}  // namespace
}  // namespace qwen35

namespace qwen35 {
namespace {

// SIGTERM while a Responses and a Messages stream run (a random model, which rarely stops by
// itself): each ends in its API's terms, response.failed and an error event, and the server
// exits 0.
TEST(ApiShutdown, StreamsEndInTheirApisTerms) {
  testing::TempDir dir;
  ASSERT_EQ(testing::run_qwen35("synth --preset tiny --quiet --out " + dir.file("m")).exit_code, 0);
  ServerProcess srv(dir.file("m"), {"--ctx", "8192", "--parallel", "2"});
  ASSERT_TRUE(srv.ready()) << srv.log();
  const std::vector<std::pair<std::string, Json>> reqs = {
      {"/v1/responses", {{"input", "go"}, {"max_output_tokens", 8000}, {"stream", true}}},
      {"/v1/messages",
       {{"messages", {{{"role", "user"}, {"content", "go"}}}},
        {"max_tokens", 8000},
        {"stream", true}}}};
  std::vector<std::string> raw(reqs.size());
  std::atomic<int> started{0};
  std::vector<std::thread> clients;
  for (size_t i = 0; i < reqs.size(); ++i)
    clients.emplace_back([&, i] {
      bool counted = false;
      srv.client().send("POST", reqs[i].first, reqs[i].second.dump(), [&](std::string_view d) {
        raw[i].append(d);
        if (!counted && raw[i].find("delta") != std::string::npos) counted = true, ++started;
        return true;
      });
    });
  for (int k = 0; k < 500 && started.load() < 2; ++k)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(started.load(), 2);
  EXPECT_EQ(srv.stop(), 0) << srv.log();
  for (auto& t : clients) t.join();
  auto last_event = [](const std::string& all) {
    const size_t e = all.rfind("event: ", all.size() > 2 ? all.size() - 2 : 0);
    return e == std::string::npos ? "" : all.substr(e + 7, all.find('\n', e) - e - 7);
  };
  EXPECT_EQ(last_event(raw[0]), "response.failed") << raw[0].substr(raw[0].size() - 400);
  EXPECT_EQ(last_event(raw[1]), "error") << raw[1].substr(raw[1].size() - 400);
  EXPECT_NE(raw[1].find("overloaded_error"), std::string::npos);
}

}  // namespace
}  // namespace qwen35
