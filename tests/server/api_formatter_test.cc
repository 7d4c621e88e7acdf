// The Responses and Messages formatters on a scripted answer (thinking, text, then a tool call:
// what the tiny bundled model hardly ever writes by itself): the tokens are pushed into a
// RequestStream as the engine would, drained by a ChoiceRunner, and formatted as the driver does
// (generation.cc), streamed and whole. The function_call item / tool_use block, its argument
// events, the stop reason, and the same answer both ways.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>

#include "server/messages.h"
#include "server/responses.h"
#include "bundled_model_info.h"

namespace qwen35::server {
namespace {

constexpr const char* kScript =
    "plan</think>\n\nLet me check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
    "</parameter>\n</function>\n</tool_call>";

using testing_model::BundledModelInfo;
BundledModelInfo& model() { return testing_model::bundled_model_info(); }

struct Event {
  std::string name;
  Json data;
};

std::vector<Event> parse_sse(const std::string& all) {
  std::vector<Event> out;
  size_t p = 0, e;
  while ((e = all.find("\n\n", p)) != std::string::npos) {
    const std::string ev = all.substr(p, e - p);
    p = e + 2;
    const size_t d = ev.find("\ndata: ");
    EXPECT_EQ(ev.rfind("event: ", 0), 0u) << ev;
    if (d == std::string::npos) continue;
    out.push_back({ev.substr(7, d - 7), Json::parse(ev.substr(d + 7))});
  }
  return out;
}

// A job whose request `parse` reads and whose one choice reads the scripted tokens; the
// formatter is set by the caller.
std::shared_ptr<Job> scripted_job(
    const std::function<std::optional<ApiError>(CompletionRequest*)>& parse) {
  auto job = std::make_shared<Job>();
  auto err = parse(&job->req);
  EXPECT_FALSE(err) << (err ? err->message : "");
  job->id = "id_1";
  job->created = 1;
  auto ids = model().tok->encode(kScript);
  EXPECT_TRUE(ids.ok());
  auto stream = std::make_shared<runtime::RequestStream>(int64_t(job->req.batch[0].ids.size()));
  for (int32_t id : *ids) {
    runtime::StreamEvent ev;
    ev.sample.token = id;
    stream->push(std::move(ev));
  }
  runtime::StreamEvent done;
  done.kind = runtime::StreamEvent::kDone;
  done.finish_reason = "stop";
  stream->push(std::move(done));
  job->choices.push_back(std::make_unique<ChoiceRunner>(0, job->req, *model().tok, stream));
  return job;
}

// The driver's two ways, by hand: the SSE text, or the whole body.
std::string run_stream(Job& job) {
  std::string out;
  job.fmt->open(job, &out);
  auto& c = *job.choices[0];
  Delta d;
  while (!c.done())
    if (c.poll(std::chrono::milliseconds(100), &(d = Delta{}))) job.fmt->delta(job, c, d, &out);
  job.fmt->close(job, &out);
  return out;
}
Json run_whole(Job& job) {
  auto& c = *job.choices[0];
  Delta d;
  while (!c.done())
    if (c.poll(std::chrono::milliseconds(100), &(d = Delta{}))) job.fmt->collect(job, 0, d);
  return job.fmt->body(job);
}

TEST(ApiFormatters, ResponsesFunctionCall) {
  const Json body = {
      {"input", "Weather in Paris?"},
      {"tools",
       {{{"type", "function"},
         {"name", "get_weather"},
         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  ResponsesOptions opt;
  auto parse = [&](CompletionRequest* r) {
    return parse_responses_request(body, model().mi, r, &(opt = ResponsesOptions{}));
  };
  auto streamed = scripted_job(parse), whole = scripted_job(parse);
  ASSERT_TRUE(streamed->req.in_reasoning);
  streamed->fmt = make_responses_formatter(opt, streamed->req);
  whole->fmt = make_responses_formatter(opt, whole->req);
  const auto events = parse_sse(run_stream(*streamed));
  const Json r = run_whole(*whole);
  ASSERT_EQ(r["output"].size(), 3u) << r.dump();
  EXPECT_EQ(r["output"][0]["type"], "reasoning");
  EXPECT_EQ(r["output"][0]["summary"][0]["text"], "plan");
  EXPECT_EQ(r["output"][1]["content"][0]["text"], "Let me check.\n");
  const Json& call = r["output"][2];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(call["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(Json::parse(call["arguments"].get<std::string>()), Json({{"city", "Paris"}}));
  EXPECT_EQ(r["status"], "completed");
  // "plan</think>" and the newlines after it: more than none, fewer than all.
  const int64_t thought = r["usage"]["output_tokens_details"]["reasoning_tokens"];
  EXPECT_GT(thought, 1);
  EXPECT_LT(thought, r["usage"]["output_tokens"].get<int64_t>());
  // The call's events, in order, and the final response as the whole one.
  std::vector<std::string> call_events;
  for (const auto& e : events)
    if (e.data.contains("output_index") && e.data["output_index"] == 2)
      call_events.push_back(e.name);
  EXPECT_EQ(call_events,
            (std::vector<std::string>{
                "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done"}));
  for (const auto& e : events) {
    if (e.name == "response.function_call_arguments.done") {
      EXPECT_EQ(Json::parse(e.data["arguments"].get<std::string>()), Json({{"city", "Paris"}}));
      EXPECT_EQ(e.data["item_id"], events.back().data["response"]["output"][2]["id"]);
    }
  }
  ASSERT_EQ(events.back().name, "response.completed");
  const Json& fin = events.back().data["response"];
  ASSERT_EQ(fin["output"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(fin["output"][i]["type"], r["output"][i]["type"]);
  EXPECT_EQ(fin["output"][2]["arguments"], call["arguments"]);
  for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].data["sequence_number"], int(i));
}

TEST(ApiFormatters, MessagesToolUse) {
  const Json body = {
      {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
      {"max_tokens", 64},
      {"thinking", {{"type", "enabled"}, {"budget_tokens", 100}}},
      {"tools",
       {{{"name", "get_weather"},
         {"input_schema",
          {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  MessagesOptions opt;
  auto parse = [&](CompletionRequest* r) {
    return parse_messages_request(body, false, model().mi, r, &(opt = MessagesOptions{}));
  };
  auto streamed = scripted_job(parse), whole = scripted_job(parse);
  streamed->fmt = make_messages_formatter(opt, streamed->req);
  whole->fmt = make_messages_formatter(opt, whole->req);
  const auto events = parse_sse(run_stream(*streamed));
  const Json m = run_whole(*whole);
  ASSERT_EQ(m["content"].size(), 3u) << m.dump();
  EXPECT_EQ(m["content"][0], Json({{"type", "thinking"}, {"thinking", "plan"}, {"signature", ""}}));
  EXPECT_EQ(m["content"][1]["text"], "Let me check.\n");
  EXPECT_EQ(m["content"][2]["type"], "tool_use");
  EXPECT_EQ(m["content"][2]["input"], Json({{"city", "Paris"}}));
  EXPECT_EQ(m["content"][2]["id"].get<std::string>().rfind("toolu_", 0), 0u);
  EXPECT_EQ(m["stop_reason"], "tool_use");
  // Streamed: the tool_use block starts with an empty input, its JSON comes as one delta.
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "message_stop");
  const Event& md = events[events.size() - 2];
  EXPECT_EQ(md.data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(md.data["usage"]["output_tokens"], m["usage"]["output_tokens"]);
  bool started = false;
  for (const auto& e : events) {
    if (e.name == "content_block_start" && e.data["index"] == 2) {
      started = true;
      EXPECT_EQ(e.data["content_block"]["type"], "tool_use");
      EXPECT_EQ(e.data["content_block"]["input"], Json::object());
      EXPECT_EQ(e.data["content_block"]["name"], "get_weather");
    }
    if (e.name == "content_block_delta" && e.data["index"] == 2) {
      EXPECT_EQ(e.data["delta"]["type"], "input_json_delta");
      EXPECT_EQ(Json::parse(e.data["delta"]["partial_json"].get<std::string>()),
                Json({{"city", "Paris"}}));
    }
  }
  EXPECT_TRUE(started);
}

}  // namespace
}  // namespace qwen35::server
