// Structured outputs: `response_format` (json_object, json_schema) and forced tool calls
// (`tool_choice` "required" or a named function) as grammars the sampler masks with
// (grammar/matcher.h). With thinking on the reasoning stays free: the grammar applies from
// </think>.
//
// Forced tool calls follow Qwen3.5's XML format, which the chat template writes and the output
// parser reads:
//   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// with calls separated by "\n". A parameter whose schema is {"type": "string", ...} is written
// raw (the parser keeps it as text); any other is JSON text under its schema (the parser reads
// it as JSON). Parameters come in the schema's order, the required ones always.
#pragma once

#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "server/chat_request.h"
#include "tokenizer/tokenizer.h"

namespace qwen35::server {

// The grammar vocabulary of a tokenizer: every token's bytes; special tokens and the thinking
// tags never appear inside a constrained value.
// Ids from the tokenizer's size up to model_vocab (embedding rows with no token) are never used.
std::shared_ptr<const grammar::Vocab> grammar_vocab(const tokenizer::Tokenizer& tok,
                                                    int64_t model_vocab);

// Compiled automata by request (the schema text, the kind, the end tokens), least recently used
// first out: a client that sends the same schema again reuses the masks computed for it.
// Thread-safe.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const grammar::Vocab> vocab, size_t capacity = 32)
      : vocab_(std::move(vocab)), capacity_(capacity) {}
  const std::shared_ptr<const grammar::Vocab>& vocab() const { return vocab_; }
  // The automaton for `key`, compiled by `build` when it is not cached.
  core::Result<std::shared_ptr<grammar::Automaton>> get(
      const std::string& key, const std::vector<int32_t>& end_ids,
      const std::function<core::Result<grammar::Grammar>()>& build);

 private:
  std::shared_ptr<const grammar::Vocab> vocab_;
  size_t capacity_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::Automaton>>> lru_;  // newest first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

// The grammar of forced tool calls: one call of `name`, or (name empty) one or more calls of
// any of `tools` (OpenAI's tools array, validated). after_think: the output opens with a thinking
// block, after which up to two newlines may come.
core::Result<grammar::Grammar> tool_call_grammar(const Json& tools, const std::string& name,
                                                 bool after_think);

// Sets r->sampling's grammar from the output format or the forced tool call (r's prompt,
// in_reasoning, tools, max_tokens and eos_ids are set already); `names` names the fields of the
// client's API in errors.
std::optional<ApiError> set_structured_output(const OutputFormat& format, const ToolChoice& tc,
                                              const ChatNames& names, const ModelInfo& mi,
                                              CompletionRequest* r);

}  // namespace qwen35::server
