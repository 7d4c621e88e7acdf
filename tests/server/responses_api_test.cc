// /v1/responses (the OpenAI Responses API) against a live server on the bundled trained model:
// it is the chat path under another API, so with greedy decoding its text, reasoning and tool
// calls equal what /v1/chat/completions answers for the same conversation; streamed events are
// well-formed and in order and give the same answer; usage adds up; bad requests are 400s that
// name the Responses field.
#include <filesystem>

#include "api_compat.h"
#include "core/dtype.h"
#include "formats/safetensors.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace qwen35 {
namespace {

struct RespAnswer {
  std::string text, reasoning;
  std::vector<std::pair<std::string, Json>> calls;  // name, arguments
};

RespAnswer responses_answer(const Json& r) {
  RespAnswer a;
  for (const auto& item : r["output"]) {
    if (item["type"] == "message")
      for (const auto& c : item["content"]) a.text += c["text"].get<std::string>();
    if (item["type"] == "reasoning")
      for (const auto& c : item["summary"]) a.reasoning += c["text"].get<std::string>();
    if (item["type"] == "function_call")
      a.calls.emplace_back(item["name"], Json::parse(item["arguments"].get<std::string>()));
  }
  return a;
}

void expect_response_as_chat(const Json& resp, const Json& chat) {
  const RespAnswer a = responses_answer(resp);
  const Json& m = chat["choices"][0]["message"];
  EXPECT_EQ(a.text, visible(m["content"])) << resp.dump();
  EXPECT_EQ(a.reasoning, visible(m["reasoning_content"])) << resp.dump();
  const size_t n_calls = m.contains("tool_calls") ? m["tool_calls"].size() : 0;
  ASSERT_EQ(a.calls.size(), n_calls);
  for (size_t i = 0; i < n_calls; ++i) {
    EXPECT_EQ(a.calls[i].first, m["tool_calls"][i]["function"]["name"]);
    EXPECT_EQ(a.calls[i].second,
              Json::parse(m["tool_calls"][i]["function"]["arguments"].get<std::string>()));
  }
  EXPECT_EQ(resp["usage"]["input_tokens"], chat["usage"]["prompt_tokens"]);
  EXPECT_EQ(resp["usage"]["output_tokens"], chat["usage"]["completion_tokens"]);
  EXPECT_EQ(resp["usage"]["total_tokens"], chat["usage"]["total_tokens"]);
  const bool cut = chat["choices"][0]["finish_reason"] == "length";
  EXPECT_EQ(resp["status"], cut ? "incomplete" : "completed");
  if (cut) {
    EXPECT_EQ(resp["incomplete_details"]["reason"], "max_output_tokens");
  }
}

TEST_F(ApiCompatTest, ResponsesEqualsChat) {
  // Thinking on (the template's default) and off; a string input and items with instructions.
  for (const bool think : {true, false}) {
    Json req = {{"input", "Hello there"}, {"max_output_tokens", 40}, {"temperature", 0}};
    Json creq = {{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                 {"max_tokens", 40}};
    if (!think) {
      req["reasoning"] = {{"effort", "none"}};
      creq["reasoning_effort"] = "none";
    }
    auto [st, r] = post(s(), "/v1/responses", req);
    ASSERT_EQ(st, 200) << r;
    EXPECT_EQ(r["object"], "response");
    EXPECT_EQ(r["id"].get<std::string>().rfind("resp_", 0), 0u);
    EXPECT_TRUE(r["previous_response_id"].is_null());
    EXPECT_EQ(r["max_output_tokens"], 40);
    EXPECT_TRUE(r["usage"]["input_tokens_details"].contains("cached_tokens"));
    EXPECT_TRUE(r["usage"]["output_tokens_details"].contains("reasoning_tokens"));
    if (!think) {
      EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
    }
    expect_response_as_chat(r, chat(creq));
  }
  Json req = {{"instructions", "Answer in the words of the King James Bible."},
              {"input",
               {{{"role", "user"},
                 {"content",
                  {{{"type", "input_text"}, {"text", "Who made"}},
                   {{"type", "input_text"}, {"text", " the earth?"}}}}},
                {{"type", "message"},
                 {"role", "assistant"},
                 {"content", {{{"type", "output_text"}, {"text", "God."}}}}},
                {{"role", "user"}, {"content", "And the heaven?"}}}},
              {"max_output_tokens", 24},
              {"temperature", 0}};
  auto [st, r] = post(s(), "/v1/responses", req);
  ASSERT_EQ(st, 200) << r;
  EXPECT_EQ(r["instructions"], req["instructions"]);
  expect_response_as_chat(
      r, chat({{"messages",
                {{{"role", "system"}, {"content", "Answer in the words of the King James Bible."}},
                 {{"role", "user"}, {"content", "Who made the earth?"}},
                 {{"role", "assistant"}, {"content", "God."}},
                 {{"role", "user"}, {"content", "And the heaven?"}}}},
               {"max_tokens", 24}}));
}

// Reasoning: a reasoning item whose summary is chat's reasoning_content, streamed as summary
// part and text events; reasoning_tokens counts the tokens spent thinking.
TEST(ResponsesReasoning, ThinkingModel) {
  RandomModel m;
  ASSERT_TRUE(m.s().ready()) << m.s().log();
  const Json req = {{"input", "Hello there"},
                    {"max_output_tokens", 10},
                    {"temperature", 0},
                    {"reasoning", {{"effort", "high"}}}};
  auto [st, r] = post(m.s(), "/v1/responses", req);
  ASSERT_EQ(st, 200) << r;
  auto [cs, c] = post(m.s(), "/v1/chat/completions",
                      Json{{"messages", {{{"role", "user"}, {"content", "Hello there"}}}},
                           {"max_tokens", 10},
                           {"temperature", 0},
                           {"reasoning_effort", "high"}});
  ASSERT_EQ(cs, 200) << c;
  ASSERT_FALSE(visible(c["choices"][0]["message"]["reasoning_content"]).empty()) << c;
  expect_response_as_chat(r, c);
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["reasoning"]["effort"], "high");
  if (visible(c["choices"][0]["message"]["content"]).empty()) {
    EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 10);
  }
  Json sreq = req;
  sreq["stream"] = true;
  std::vector<std::string> names;
  std::string summary;
  for (const auto& e : named_events(m.s(), "/v1/responses", sreq)) {
    if (e.name.find("reasoning") != std::string::npos) names.push_back(e.name);
    if (e.name == "response.reasoning_summary_text.delta")
      summary += e.data["delta"].get<std::string>();
    if (e.name == "response.reasoning_summary_part.done") {
      EXPECT_EQ(e.data["part"]["text"], summary);
    }
  }
  ASSERT_GE(names.size(), 4u);
  EXPECT_EQ(names.front(), "response.reasoning_summary_part.added");
  EXPECT_EQ(names[names.size() - 2], "response.reasoning_summary_text.done");
  EXPECT_EQ(names.back(), "response.reasoning_summary_part.done");
  EXPECT_EQ(summary, responses_answer(r).reasoning);
  // A reasoning item in the history is the next assistant turn's reasoning_content.
  auto [hs, h] = post(
      m.s(), "/v1/responses",
      Json{{"input",
            {{{"role", "user"}, {"content", "a"}},
             {{"type", "reasoning"}, {"summary", {{{"type", "summary_text"}, {"text", "hmm"}}}}},
             {{"role", "assistant"}, {"content", "b"}},
             {{"role", "user"}, {"content", "c"}}}},
           {"max_output_tokens", 4},
           {"temperature", 0}});
  ASSERT_EQ(hs, 200) << h;
  auto [hc, hchat] =
      post(m.s(), "/v1/chat/completions",
           Json{{"messages",
                 {{{"role", "user"}, {"content", "a"}},
                  {{"role", "assistant"}, {"content", "b"}, {"reasoning_content", "hmm"}},
                  {{"role", "user"}, {"content", "c"}}}},
                {"max_tokens", 4},
                {"temperature", 0}});
  ASSERT_EQ(hc, 200);
  expect_response_as_chat(h, hchat);
}

// A function call and its output in the history (the tiny model rarely calls tools itself).
TEST_F(ApiCompatTest, ResponsesFunctionCallHistory) {
  const Json tools = {{{"type", "function"},
                       {"name", "get_weather"},
                       {"description", "the weather in a city"},
                       {"parameters", kTools[0]["function"]["parameters"]}}};
  const Json req = {
      {"tools", tools},
      {"input",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"type", "function_call"},
         {"call_id", "call_1"},
         {"name", "get_weather"},
         {"arguments", "{\"city\": \"Paris\"}"}},
        {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "sunny"}}}},
      {"max_output_tokens", 24},
      {"temperature", 0}};
  auto [st, r] = post(s(), "/v1/responses", req);
  ASSERT_EQ(st, 200) << r;
  EXPECT_EQ(r["tools"], tools);
  expect_response_as_chat(
      r, chat({{"tools", kTools},
               {"messages",
                {{{"role", "user"}, {"content", "Weather in Paris?"}},
                 {{"role", "assistant"},
                  {"content", ""},
                  {"tool_calls",
                   {{{"id", "call_1"},
                     {"type", "function"},
                     {"function",
                      {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
                 {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}}},
               {"max_tokens", 24}}));
}

// Streaming: sequence numbers count from 0, every item is added, filled and done in order, and
// the final response is the non-streamed one.
TEST_F(ApiCompatTest, ResponsesStreaming) {
  const Json req = {{"input", "Hello there"}, {"max_output_tokens", 40}, {"temperature", 0}};
  auto [st, whole] = post(s(), "/v1/responses", req);
  ASSERT_EQ(st, 200);
  Json sreq = req;
  sreq["stream"] = true;
  const auto events = named_events(s(), "/v1/responses", sreq);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events[0].name, "response.created");
  EXPECT_EQ(events[1].name, "response.in_progress");
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  std::map<int, std::string> text, reasoning, opened;  // by output index
  std::map<int, bool> done;
  Json final_response;
  for (size_t i = 0; i < events.size(); ++i) {
    const Event& e = events[i];
    ASSERT_TRUE(e.data.is_object()) << e.name;
    EXPECT_EQ(e.data["type"], e.name);
    EXPECT_EQ(e.data["sequence_number"], int64_t(i));
    if (e.name == "response.output_item.added") {
      const int k = e.data["output_index"];
      EXPECT_FALSE(opened.count(k));
      opened[k] = e.data["item"]["id"];
    } else if (e.name == "response.output_text.delta") {
      const int k = e.data["output_index"];
      EXPECT_TRUE(opened.count(k) && !done[k]);
      EXPECT_EQ(e.data["item_id"], opened[k]);
      text[k] += e.data["delta"].get<std::string>();
    } else if (e.name == "response.output_text.done") {
      EXPECT_EQ(e.data["text"], text[e.data["output_index"].get<int>()]);
    } else if (e.name == "response.reasoning_summary_text.delta") {
      reasoning[e.data["output_index"]] += e.data["delta"].get<std::string>();
    } else if (e.name == "response.reasoning_summary_text.done") {
      EXPECT_EQ(e.data["text"], reasoning[e.data["output_index"].get<int>()]);
    } else if (e.name == "response.output_item.done") {
      const int k = e.data["output_index"];
      EXPECT_TRUE(opened.count(k));
      done[k] = true;
      EXPECT_EQ(e.data["item"]["id"], opened[k]);
    } else if (e.name == "response.completed" || e.name == "response.incomplete") {
      EXPECT_EQ(i + 1, events.size());
      final_response = e.data["response"];
    }
  }
  for (const auto& [k, id] : opened) EXPECT_TRUE(done[k]) << k;
  ASSERT_TRUE(final_response.is_object());
  EXPECT_EQ(final_response["output"].size(), opened.size());
  const RespAnswer a = responses_answer(final_response), b = responses_answer(whole);
  EXPECT_EQ(a.text, b.text);
  EXPECT_EQ(a.reasoning, b.reasoning);
  EXPECT_EQ(final_response["status"], whole["status"]);
  EXPECT_EQ(final_response["usage"], whole["usage"]);
  std::string streamed;
  for (const auto& [k, t] : text) streamed += t;
  EXPECT_EQ(streamed, a.text);
}

TEST_F(ApiCompatTest, ResponsesErrors) {
  const Json ok = {{"input", "hi"}, {"max_output_tokens", 4}};
  auto with = [&](const char* key, Json v) {
    Json b = ok;
    b[key] = std::move(v);
    return b;
  };
  const std::vector<std::pair<Json, std::string>> cases = {
      {with("previous_response_id", "resp_123"), "previous_response_id"},
      {with("input", Json::parse(R"([{"type": "mystery"}])")), "input[0].type"},
      {with("input", Json::parse(R"([{"role": "user"}])")), "input[0].content"},
      {with("input", Json::parse(R"([{"role": "user", "content": [{"type": "input_image"}]}])")),
       "input[0].content[0]"},
      {with("input", Json::parse(R"([{"role": "user", "content": [{"type": "input_file"}]}])")),
       "input[0].content[0].type"},
      {with("input", Json::parse(R"([{"type": "function_call", "name": "f"}])")),
       "input[0].call_id"},
      {with("input", 5), "input"},
      {with("max_output_tokens", -1), "max_output_tokens"},
      {with("temperature", "hot"), "temperature"},
      {with("reasoning", Json{{"effort", "extreme"}}), "reasoning.effort"},
      {with("text", Json{{"format", {{"type", "yaml"}}}}), "text.format.type"},
      {with("tool_choice", Json{{"type", "web_search"}}), "tool_choice"},
  };
  for (const auto& [body, param] : cases) {
    auto [st, r] = post(s(), "/v1/responses", body);
    EXPECT_EQ(st, 400) << body.dump();
    ASSERT_TRUE(r.contains("error")) << r;
    EXPECT_EQ(r["error"]["param"], param) << r;
    EXPECT_FALSE(r["error"]["message"].get<std::string>().empty());
  }
  // Whole bodies, in OpenAI's shape with the Responses names: from the Responses parser, and
  // from the chat parser under it (named where the error arises, not renamed).
  const std::vector<std::pair<Json, Json>> exact = {
      {with("input", 5),
       {{"message", "'input' must be a string or a list of items"}, {"param", "input"}}},
      {with("max_output_tokens", -1),
       {{"message", "'max_output_tokens' must be in [1, 9223372036854775807], got -1"},
        {"param", "max_output_tokens"}}},
      {with("reasoning", Json{{"effort", "extreme"}}),
       {{"message",
         "'reasoning.effort' must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" "
         "or \"xhigh\""},
        {"param", "reasoning.effort"}}},
      {with("text", Json{{"format", {{"type", "json_schema"}, {"name", "a"}}}}),
       {{"message", "'text.format.schema' must be a JSON schema (an object)"},
        {"param", "text.format.schema"}}},
  };
  for (const auto& [body, want] : exact) {
    auto [st, r] = post(s(), "/v1/responses", body);
    EXPECT_EQ(st, 400) << body.dump();
    EXPECT_EQ(r, (Json{{"error",
                        {{"message", want["message"]},
                         {"type", "invalid_request_error"},
                         {"param", want["param"]},
                         {"code", 400}}}}))
        << body.dump();
  }
  auto [stm, rm] = post(s(), "/v1/responses", with("model", "gpt-9"));
  EXPECT_EQ(stm, 400);
  EXPECT_EQ(rm["error"]["type"], "model_not_found") << rm;
  EXPECT_EQ(rm["error"]["param"], "model") << rm;
  // Built-in tools are left out, not refused (agent_shapes_test.cc has the rest).
  auto [st, r] =
      post(s(), "/v1/responses", with("tools", Json::parse(R"([{"type": "web_search"}])")));
  EXPECT_EQ(st, 200) << r;
  EXPECT_NE(r["warnings"][0].get<std::string>().find("web_search"), std::string::npos) << r;
  auto [st2, r2] = post(s(), "/v1/responses", with("store", false));
  EXPECT_EQ(st2, 200) << r2;  // accepted and ignored
  EXPECT_EQ(s().get("/health").first, 200);
}

// json_schema / json_object and forced tool calls map onto response_format and tool_choice;
// until constrained decoding lands in the chat path these are skipped (the chat endpoint
// refuses the equivalent request as "not supported").
TEST_F(ApiCompatTest, ResponsesStructuredAndForcedTools) {
  const Json schema = {{"type", "object"},
                       {"properties", {{"answer", {{"type", "string"}}}}},
                       {"required", {"answer"}}};
  const Json chat_req = {
      {"messages", {{{"role", "user"}, {"content", "Say hi"}}}},
      {"max_tokens", 64},
      {"temperature", 0},
      {"reasoning_effort", "none"},
      {"response_format",
       {{"type", "json_schema"},
        {"json_schema", {{"name", "a"}, {"schema", schema}, {"strict", true}}}}}};
  if (chat_refuses(chat_req)) GTEST_SKIP() << "constrained decoding is not in the chat path yet";
  auto [st, r] = post(
      s(), "/v1/responses",
      Json{{"input", "Say hi"},
           {"max_output_tokens", 64},
           {"temperature", 0},
           {"reasoning", {{"effort", "none"}}},
           {"text",
            {{"format",
              {{"type", "json_schema"}, {"name", "a"}, {"schema", schema}, {"strict", true}}}}}});
  ASSERT_EQ(st, 200) << r;
  expect_response_as_chat(r, chat(chat_req));
  Json forced = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                 {"tools", kTools},
                 {"tool_choice", "required"},
                 {"max_tokens", 160},
                 {"reasoning_effort", "none"}};
  auto [st2, r2] = post(s(), "/v1/responses",
                        Json{{"input", "Weather in Paris?"},
                             {"max_output_tokens", 160},
                             {"temperature", 0},
                             {"reasoning", {{"effort", "none"}}},
                             {"tool_choice", "required"},
                             {"tools",
                              {{{"type", "function"},
                                {"name", "get_weather"},
                                {"description", "the weather in a city"},
                                {"parameters", kTools[0]["function"]["parameters"]}}}}});
  ASSERT_EQ(st2, 200) << r2;
  expect_response_as_chat(r2, chat(forced));
  EXPECT_FALSE(responses_answer(r2).calls.empty());
}

// On a Qwen3 checkpoint (its template writes Hermes-style JSON calls and leaves <think> to the
// model): forced calls, a call in the history, thinking on and off, each the chat answer; a
// streamed forced call ends in the non-streamed response.
TEST(ResponsesQwen3, SameAsChat) {
  RandomModel m("qwen3-tiny");
  ASSERT_TRUE(m.s().ready()) << m.s().log();
  const Json params = kTools[0]["function"]["parameters"];
  const Json rtools = {{{"type", "function"}, {"name", "get_weather"},
                        {"description", "the weather in a city"}, {"parameters", params}}};
  auto chat = [&](Json body) {
    body["temperature"] = 0;
    auto [st, r] = post(m.s(), "/v1/chat/completions", body);
    EXPECT_EQ(st, 200) << r;
    return r;
  };
  for (const bool think : {true, false}) {
    Json req = {{"input", "Weather in Paris?"}, {"tools", rtools}, {"tool_choice", "required"},
                {"max_output_tokens", 60}, {"temperature", 0}};
    Json creq = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                 {"tools", kTools}, {"tool_choice", "required"}, {"max_tokens", 60}};
    if (!think) {
      req["reasoning"] = {{"effort", "none"}};
      creq["reasoning_effort"] = "none";
    }
    auto [st, r] = post(m.s(), "/v1/responses", req);
    ASSERT_EQ(st, 200) << r;
    expect_response_as_chat(r, chat(creq));
    const RespAnswer a = responses_answer(r);
    ASSERT_EQ(a.calls.size(), 1u) << r;
    EXPECT_EQ(a.calls[0].first, "get_weather");
    EXPECT_TRUE(a.calls[0].second["city"].is_string()) << r;
    req["stream"] = true;
    Json final_response;
    for (const auto& e : named_events(m.s(), "/v1/responses", req))
      if (e.name == "response.completed") final_response = e.data["response"];
    ASSERT_TRUE(final_response.is_object());
    EXPECT_EQ(responses_answer(final_response).calls, a.calls);
  }
  // The call and its output in the history: Qwen3's template writes them as JSON and
  // <tool_response>.
  auto [st, r] = post(m.s(), "/v1/responses",
                      Json{{"tools", rtools},
                           {"input", {{{"role", "user"}, {"content", "Weather in Paris?"}},
                                      {{"type", "function_call"}, {"call_id", "call_1"},
                                       {"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}},
                                      {{"type", "function_call_output"}, {"call_id", "call_1"},
                                       {"output", "sunny"}}}},
                           {"max_output_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(st, 200) << r;
  expect_response_as_chat(
      r, chat({{"tools", kTools},
               {"messages",
                {{{"role", "user"}, {"content", "Weather in Paris?"}},
                 {{"role", "assistant"}, {"content", ""},
                  {"tool_calls", {{{"id", "call_1"}, {"type", "function"},
                                   {"function", {{"name", "get_weather"},
                                                 {"arguments", "{\"city\": \"Paris\"}"}}}}}}},
                 {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}}}},
               {"max_tokens", 12}}));
}

// A copy of the checkpoint in `src` whose lm_head row of token `to` is twice the row of token
// `from`: where `from` is the greedy choice (a positive logit, the largest), `to` is chosen.
void copy_with_row_doubled(const std::string& src, const std::string& dst, int64_t from, int64_t to) {
  namespace fs = std::filesystem;
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().extension() != ".safetensors") fs::copy_file(e.path(), dst / e.path().filename());
  auto store = formats::TensorStore::open_dir(src);
  ASSERT_TRUE(store.ok()) << store.message();
  std::vector<testing::RawTensor> out;
  for (const auto& [name, v] : store->all()) {
    testing::RawTensor t{name, std::string(core::dtype_name(v.dtype)), v.shape,
                         std::string(reinterpret_cast<const char*>(v.data), v.nbytes)};
    if (name == "lm_head.weight") {
      ASSERT_EQ(v.dtype, core::DType::kBF16);
      const size_t row = size_t(v.shape[1]) * 2;
      for (size_t i = 0; i < row; i += 2) {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + size_t(from) * row + i, 2);
        h = core::f32_to_bf16(2.0f * core::bf16_to_f32(h));
        std::memcpy(t.bytes.data() + size_t(to) * row + i, &h, 2);
      }
    }
    out.push_back(std::move(t));
  }
  testing::write_file(dst + "/model.safetensors", testing::safetensors_bytes(out));
}

// A Qwen3 checkpoint whose first greedy token is <think> (its prompt leaves the tag to the
// model): the thinking the model opens is reasoning in chat, Responses and Messages alike,
// streamed or not, and a forced call comes after it.
TEST(ResponsesQwen3, ThinkingTheModelOpens) {
  testing::TempDir dir;
  auto r0 = testing::run_qwen35("synth --preset qwen3-tiny-moe --quiet --out " + dir.file("a"));
  ASSERT_EQ(r0.exit_code, 0) << r0.err;
  const Json hello = {{"role", "user"}, {"content", "Hello"}};
  int64_t first = -1;
  {
    ServerProcess a(dir.file("a"), {"--ctx", "512"});
    ASSERT_TRUE(a.ready()) << a.log();
    auto [st, r] = post(a, "/v1/chat/completions",
                        Json{{"messages", {hello}}, {"max_tokens", 1}, {"temperature", 0},
                             {"return_token_ids", true}});
    ASSERT_EQ(st, 200) << r;
    first = r["choices"][0]["token_ids"][0];
  }
  auto tok = tokenizer::Tokenizer::load(dir.file("a"));
  ASSERT_TRUE(tok.ok()) << tok.message();
  const int32_t think = tok->token_to_id("<think>");
  ASSERT_GE(think, 0);
  std::filesystem::create_directory(dir.file("b"));
  copy_with_row_doubled(dir.file("a"), dir.file("b"), first, think);
  ServerProcess b(dir.file("b"), {"--ctx", "512"});
  ASSERT_TRUE(b.ready()) << b.log();
  const Json creq = {{"messages", {hello}}, {"max_tokens", 12}, {"temperature", 0},
                     {"thinking_token_budget", 4}, {"return_token_ids", true}};
  auto [cs, c] = post(b, "/v1/chat/completions", creq);
  ASSERT_EQ(cs, 200) << c;
  EXPECT_EQ(c["choices"][0]["token_ids"][0], think) << c;
  const std::string reasoning = visible(c["choices"][0]["message"]["reasoning_content"]);
  EXPECT_FALSE(reasoning.empty()) << c;
  // Streamed: the same reasoning and content.
  Json sreq = creq;
  sreq["stream"] = true;
  std::string sr, sc;
  for (const auto& e : named_events(b, "/v1/chat/completions", sreq))
    if (e.data.is_object() && !e.data["choices"].empty()) {
      const Json& d = e.data["choices"][0]["delta"];
      if (d.contains("reasoning_content") && d["reasoning_content"].is_string()) sr += d["reasoning_content"].get<std::string>();
      if (d.contains("content") && d["content"].is_string()) sc += d["content"].get<std::string>();
    }
  EXPECT_EQ(sr, c["choices"][0]["message"]["reasoning_content"].is_string() ? c["choices"][0]["message"]["reasoning_content"].get<std::string>() : "");
  EXPECT_EQ(sc, c["choices"][0]["message"]["content"].is_string() ? c["choices"][0]["message"]["content"].get<std::string>() : "");
  // Responses (effort high: no cap, so all 12 tokens think): a reasoning item with the chat's
  // text, its tokens counted from the <think> the model wrote.
  auto [rs, r] = post(b, "/v1/responses", Json{{"input", "Hello"}, {"max_output_tokens", 12},
                                               {"temperature", 0}, {"reasoning", {{"effort", "high"}}}});
  Json creq2 = creq;
  creq2.erase("thinking_token_budget");
  creq2["reasoning_effort"] = "high";
  std::tie(cs, c) = post(b, "/v1/chat/completions", creq2);
  ASSERT_EQ(cs, 200) << c;
  ASSERT_EQ(rs, 200) << r;
  expect_response_as_chat(r, c);
  EXPECT_EQ(r["output"][0]["type"], "reasoning") << r;
  if (visible(c["choices"][0]["message"]["content"]).empty()) {
    EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 12) << r;
  }
  // A forced call after the thinking: reasoning, then the call in Qwen3's JSON form.
  auto [fs_, f] = post(b, "/v1/chat/completions",
                       Json{{"messages", {hello}}, {"tools", kTools}, {"tool_choice", "required"},
                            {"max_tokens", 60}, {"temperature", 0}, {"thinking_token_budget", 4}});
  ASSERT_EQ(fs_, 200) << f;
  const Json& m = f["choices"][0]["message"];
  EXPECT_FALSE(visible(m["reasoning_content"]).empty()) << f;
  ASSERT_TRUE(m["tool_calls"].is_array() && m["tool_calls"].size() >= 1) << f;
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_TRUE(Json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"].is_string()) << f;
}

}  // namespace
}  // namespace qwen35
