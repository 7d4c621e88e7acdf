// One choice of a completion: drains its engine stream, turns token ids into text (streaming
// detokenizer, stop strings), splits chat text into content / reasoning / tool calls, and hands
// out deltas for SSE chunks or for the accumulated response. Used by one HTTP thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/output_parser.h"
#include "server/request.h"
#include "tokenizer/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::server {

struct Delta {
  std::string text;       // completions: text; chat: content
  std::string reasoning;  // chat
  std::vector<ToolCall> calls;
  std::vector<runtime::SampleResult> samples;  // tokens of this delta (for logprobs / ids)
  std::string finish_reason;                   // set on the last delta of the choice
  bool empty() const {
    return text.empty() && reasoning.empty() && calls.empty() && samples.empty() &&
           finish_reason.empty();
  }
};

class ChoiceRunner {
 public:
  ChoiceRunner(int index, const CompletionRequest& req, const tokenizer::Tokenizer& tok,
               std::shared_ptr<runtime::RequestStream> stream);
  ~ChoiceRunner();  // cancels the engine request if it is still running

  // Handles at most one engine event, waiting up to `timeout` for it. False when none came.
  bool poll(std::chrono::milliseconds timeout, Delta* d);
  bool done() const { return done_; }
  void cancel();
  int index() const { return index_; }
  // Which prompt of a batched completions request this choice continues (0 otherwise).
  int prompt = 0;
  int64_t generated() const { return generated_; }
  const std::string& error() const { return error_; }
  int n_calls() const { return n_calls_; }
  // The stop string that ended the choice (finish reason "stop"); "" when none did.
  const std::string& stop_sequence() const { return stop_.matched(); }
  // Prompt tokens resumed from the prefix cache instead of computed.
  int64_t cached_tokens() const { return stream_->timing().prompt_reused; }
  runtime::RequestTiming timing() const { return stream_->timing(); }
  // Called on the engine thread after each event the engine pushes to this choice.
  void set_waker(std::function<void()> w) { stream_->set_waker(std::move(w)); }

  // Prompt tokens 1.. with their log-probabilities (requests with prompt_logprobs).
  std::vector<runtime::SampleResult> prompt_samples;
  // Wall-clock times of token arrivals (for TTFT and inter-token latency).
  std::vector<std::chrono::steady_clock::time_point> token_times;

 private:
  void feed(const std::string& text, Delta* d);
  void finish(Delta* d, const std::string& reason);
  void take_call(ToolCall call, Delta* d);  // keeps at most max_calls_

  int index_;
  std::shared_ptr<runtime::RequestStream> stream_;
  tokenizer::StreamDecoder dec_;
  tokenizer::StopMatcher stop_;
  std::optional<OutputParser> parser_;
  bool done_ = false;
  int64_t generated_ = 0;
  int max_calls_ = -1;  // CompletionRequest::max_tool_calls
  int n_calls_ = 0;
  std::string error_;
};

// JSON helpers for responses.
Json chat_logprob_entry(const tokenizer::Tokenizer& tok, const runtime::SampleResult& s);
Json tool_call_json(const ToolCall& c, int index, bool with_index);
// Completions-style logprobs for `samples`; text offsets start at `offset`. A NaN logprob (the
// first prompt token of an echo) is written as null.
Json completion_logprobs(const tokenizer::Tokenizer& tok,
                         const std::vector<runtime::SampleResult>& samples, size_t offset);
std::string random_id(const char* prefix);

}  // namespace qwen35::server
