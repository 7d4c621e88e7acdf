// `qwen35 loadtest --multi-turn`: conversations against a running server, each a series of chat
// turns that resend the whole history, all sharing one system prompt and set of tool
// definitions of a chosen length, as agents and chat clients do. Reports, per turn, the time to
// first token (p50/p99 over the conversations) and the share of prompt tokens the server resumed
// from its prefix cache (usage.prompt_tokens_details.cached_tokens; "not reported" for a server
// that gives no such figure), and the generated tokens (cli/stream_tokens.h).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "server/http_client.h"

namespace qwen35::cli {

struct MultiTurnOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key;
  int clients = 4;            // conversations running at once
  int conversations = 8;
  int turns = 6;
  int64_t system_tokens = 2000;  // the shared system prompt, about this many tokens
  int64_t tool_tokens = 0;       // shared tool definitions, about this many tokens (0: none)
  int64_t max_tokens = 32;       // per answer
  bool thinking = false;
  bool json = false;
  std::string kv_type;  // non-empty: each request's "kv_type" (the server's must match)
  // Each conversation sends its own key (prompt_cache_key and X-Session-Id) for a balancer.
  bool affinity_key = true;
};

// Reports also which replicas answered (X-Qwen35-Replica) and how many conversations stayed on
// one replica, when the server names them.
int run_multi_turn(const MultiTurnOptions& o);

// Shared with the other loadtest modes (cli/fewshot.h): a client of the server `o` names, the
// server's token count of `text` (its /tokenize; -1 without an answer), and text of about
// `tokens` tokens made of numbered sentences about `what`, no two stretches of it alike.
server::HttpClient loadtest_client(const MultiTurnOptions& o);
int64_t count_tokens(const MultiTurnOptions& o, const std::string& text);
std::string text_of(const MultiTurnOptions& o, int64_t tokens, const std::string& what);

// A streamed answer's server-sent events: appends `d` to `buf` and hands the JSON of each whole
// "data:" event to `on_event` in order (false from it stops reading); sets *done at
// "data: [DONE]". False, with *error, at an event that is not JSON or carries an error.
bool feed_sse(std::string& buf, std::string_view d, bool* done, std::string* error,
              const std::function<bool(const nlohmann::json&)>& on_event);

// "http://HOST:PORT" (a trailing slash allowed; IPv6 in brackets) into host and port; the
// reason when it is not one (another scheme, a path, no port number), else "".
std::string parse_base_url(const std::string& url, std::string* host, int* port);

}  // namespace qwen35::cli
