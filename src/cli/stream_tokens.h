// Counting what an OpenAI-compatible stream generated, whoever serves it (`qwen35 loadtest`
// against our server, a balancer, llama-server, vLLM, SGLang). Our server adds the ids of each
// chunk's tokens (`token_ids`); the others stream text chunks and, asked with
// stream_options.include_usage, put `usage` in the last chunk. The count comes from the best
// source the stream has, in this order:
//   token_ids                 exact, per chunk
//   usage.completion_tokens   exact, once at the end
//   non-empty chunks          one token per choice's chunk that carries generated text (what
//                             llama-server, vLLM and SGLang send while no stop string holds
//                             text back), an estimate
// Arrival times (TTFT, inter-token latency) come from the chunks either way.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace qwen35::cli {

enum class TokenSource { kNone, kTokenIds, kUsage, kChunks };

// "token_ids", "usage.completion_tokens", "non-empty chunks", "none".
const char* token_source_name(TokenSource s);

struct StreamTally {
  int64_t token_ids = 0;          // ids in choices[].token_ids
  int64_t chunks = 0;             // choices' chunks with generated text (or a tool call)
  int64_t usage_completion = -1;  // usage.completion_tokens; -1 while no event had it
  int64_t prompt_tokens = -1;     // usage.prompt_tokens; -1 while no event had it
  int64_t cached_tokens = -1;     // usage.prompt_tokens_details.cached_tokens; -1: not reported

  // Reads one event's JSON. Returns how many tokens arrived with it, for the latency figures:
  // its token_ids when it has them, else the number of its choices that carry generated text,
  // else 0 (a role-only delta, the finish chunk, the usage chunk).
  int64_t add(const nlohmann::json& event);

  TokenSource source() const;
  int64_t tokens() const;  // by source()
};

// The figures a report gives about its token counts: the source used by every request, or
// "mixed (token_ids 3, non-empty chunks 1)" when they differ.
class SourceCount {
 public:
  void add(TokenSource s);
  std::string describe() const;
  bool any_estimated() const { return n_[int(TokenSource::kChunks)] > 0; }

 private:
  int64_t n_[4] = {0, 0, 0, 0};
};

}  // namespace qwen35::cli
