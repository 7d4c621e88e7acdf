// `qwen35 loadtest --few-shot`: prompts that branch, against a running server. Two parts:
//   - branches: --requests completions that share a few-shot prefix of about --prefix-tokens
//     tokens and end in different questions (the shape of evaluation harnesses and few-shot
//     prompting), --clients at a time;
//   - forks: --fork-requests completions with n = --fork-n, each on a prompt of its own of the
//     same length (nothing of it cached), one at a time.
// Reports, per part, the time to first token (p50/p99/mean) and until every choice has its
// first token (p50), the share of prompt tokens the
// server resumed (usage.prompt_tokens_details.cached_tokens) and, from /metrics, the prompt rows
// the server received and the prefill rows it computed.
#pragma once

#include <cstdint>

#include "cli/multiturn.h"

namespace qwen35::cli {

struct FewShotOptions {
  MultiTurnOptions server;  // host, port, api_key, clients, max_tokens, json
  int requests = 20;
  int64_t prefix_tokens = 2000;
  int fork_requests = 3;
  int fork_n = 4;
};

int run_few_shot(const FewShotOptions& o);

}  // namespace qwen35::cli
