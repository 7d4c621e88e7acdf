// `qwen35 loadtest --multi-turn`: conversations against a running server, each a series of chat
// turns that resend the whole history, all sharing one system prompt and set of tool
// definitions of a chosen length, as agents and chat clients do. Reports, per turn, the time to
// first token (p50/p99 over the conversations) and the share of prompt tokens the server resumed
// from its prefix cache (usage.prompt_tokens_details.cached_tokens).
#pragma once

#include <cstdint>
#include <string>

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
  // Each conversation sends its own key (prompt_cache_key and X-Session-Id) for a balancer.
  bool affinity_key = true;
};

// Reports also which replicas answered (X-Qwen35-Replica) and how many conversations stayed on
// one replica, when the server names them.
int run_multi_turn(const MultiTurnOptions& o);

// "http://HOST:PORT" (a trailing slash allowed; IPv6 in brackets) into host and port; the
// reason when it is not one (another scheme, a path, no port number), else "".
std::string parse_base_url(const std::string& url, std::string* host, int* port);

}  // namespace qwen35::cli
