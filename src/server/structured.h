// Structured outputs: `response_format` (json_object, json_schema) and forced tool calls
// (`tool_choice` "required" or a named function) as grammars the sampler masks with
// (grammar/matcher.h). With thinking on the reasoning stays free: the grammar applies from
// </think>.
//
// Forced tool calls follow the form the model's chat template writes and the output parser
// reads (ToolCallFormat), with calls separated by "\n". Qwen3.5's XML form:
//   <tool_call>\n<function=NAME>\n<parameter=ARG>\nVALUE\n</parameter>\n...</function>\n</tool_call>
// A parameter whose schema is {"type": "string", ...} is written raw (the parser keeps it as
// text); any other is JSON text under its schema (the parser reads it as JSON). Parameters come
// in the schema's order, the required ones always (for a tool that is not strict, each value is
// any JSON value: see tool_call_grammar). Qwen3's Hermes-style JSON form:
//   <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
// the arguments a JSON object under the function's parameters schema.
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

// What structured outputs may cost a server (serve's --grammar-max-states, --grammar-max-mb,
// --grammar-cache-mb). A grammar is refused before its automaton is built when its states
// (grammar::Builder::states: nested repeats multiply, properties add) pass max_states; an
// automaton that grows past automaton_bytes while in use ends the requests that need more of
// it with an error; the cache keeps automata for reuse up to cache_bytes and `capacity`.
struct GrammarLimits {
  int64_t max_states = 250000;
  size_t automaton_bytes = size_t(128) << 20;
  size_t cache_bytes = size_t(512) << 20;
  size_t capacity = 32;
};

// Compiled automata by request (the schema text, the kind, the end tokens), least recently used
// first out: a client that sends the same schema again reuses the masks computed for it. Only
// requests that pass every check are kept, so a refused request leaves nothing behind. The
// bytes of the kept automata are summed afresh at each keep() (they grow while in use), and the
// oldest go while the sum is over cache_bytes; an exhausted automaton is never handed out again.
// Thread-safe; never waits for an automaton's own lock.
class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const grammar::Vocab> vocab, GrammarLimits limits = {})
      : vocab_(std::move(vocab)), limits_(limits) {}
  const std::shared_ptr<const grammar::Vocab>& vocab() const { return vocab_; }
  const GrammarLimits& limits() const { return limits_; }
  using Build = std::function<core::Result<grammar::Grammar>(int64_t max_states)>;
  // The automaton for `key`: the cached one, else a new one from build(limits().max_states),
  // not cached until keep().
  core::Result<std::shared_ptr<grammar::Automaton>> get(const std::string& key,
                                                        const std::vector<int32_t>& end_ids,
                                                        const Build& build);
  // Caches `a` for `key` (a request for it passed its checks).
  void keep(const std::string& key, const std::vector<int32_t>& end_ids,
            std::shared_ptr<grammar::Automaton> a);
  size_t size() const;
  size_t bytes() const;  // of the cached automata, now

 private:
  static std::string full_key(const std::string& key, const std::vector<int32_t>& end_ids);
  void trim();  // under mu_: the bounds

  std::shared_ptr<const grammar::Vocab> vocab_;
  GrammarLimits limits_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<grammar::Automaton>>> lru_;  // newest first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
};

// Whether a function tool (chat's form) is strict: {"function": {"strict": true, ...}}.
bool strict_tool(const Json& tool);

// The grammar of forced tool calls: one call of `name`, or (name empty) one or more calls of
// any of `tools` (OpenAI's tools array, validated), in `format`. after_think: the output opens
// with a thinking block, after which up to two newlines may come. More than max_states states is
// an error; errors name a tool's fields as `names` says (chat's by default).
//
// As OpenAI and Anthropic define it, only a strict tool's arguments are held to its schema (any
// keyword the compiler does not enforce is an error there). Any other tool's call is its
// envelope and a JSON object of the declared properties (the required ones always), each any
// JSON value: no keyword of its schema makes the request fail (the size bounds still hold).
core::Result<grammar::Grammar> tool_call_grammar(const Json& tools, const std::string& name,
                                                 bool after_think, ToolCallFormat format,
                                                 int64_t max_states = grammar::Builder::kInf,
                                                 const ChatNames* names = nullptr);

// Sets r->sampling's grammar from the output format or the forced tool call (r's prompt,
// in_reasoning, tools, max_tokens and eos_ids are set already); `names` names the fields of the
// client's API in errors. A grammar over the limits is a 400 that says which; running out of
// memory while compiling one is a 500.
std::optional<ApiError> set_structured_output(const OutputFormat& format, const ToolChoice& tc,
                                              const ChatNames& names, const ModelInfo& mi,
                                              CompletionRequest* r);

}  // namespace qwen35::server
