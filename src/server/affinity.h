// The affinity key: what a load balancer hashes so that every turn of a conversation lands on
// the replica whose prefix cache holds it (docs/design.md "Replicas behind a load balancer",
// deploy/haproxy/haproxy.cfg reads the same fields in the same order).
//
// A client names it, first found wins: OpenAI's "prompt_cache_key" (chat, completions,
// Responses), an "X-Session-Id" header, OpenAI's "user", Anthropic's "metadata.user_id". Without
// any, the server derives one from the prompt's shared prefix. Either way the answer carries it
// in kAffinityHeader, so a client (or a balancer) can send it back as X-Session-Id.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/request.h"

namespace qwen35::server {

inline constexpr const char* kAffinityHeader = "X-Qwen35-Affinity-Key";

// The key the client named ("" when none). A key that could not travel in a header as written
// (longer than 128 bytes, or with bytes outside printable ASCII) comes back as "h-" and the
// 16 hex digits of its FNV-1a 64-bit hash.
std::string affinity_key(const Json& body, std::string_view session_header);

// The key derived from a prompt: "prefix-" and the 16 hex digits of the FNV-1a 64-bit hash of
// its first `cut` token ids (each as 4 little-endian bytes), where `cut` is the end of the
// shared system part and tools (the chat parsers' snapshot hint) rounded down to the 64-token
// grid of the prefix cache, or, without such a part, the first 64 tokens (the whole prompt when
// shorter). Turns of one conversation, and conversations that share a system prompt of 64
// tokens or more, share the key; so they share what the prefix cache keeps.
std::string prefix_affinity_key(const std::vector<int32_t>& ids, const std::vector<int64_t>& hints);

// FNV-1a 64 over bytes (exposed for the tests' independent expectation of the format).
uint64_t fnv1a64(std::string_view bytes);

}  // namespace qwen35::server
