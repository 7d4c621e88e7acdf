// API-key authentication, compared in constant time so that the response time does not tell
// an attacker how many leading bytes of a guess were right.
#pragma once

#include <string_view>

namespace qwen35::server {

// Equal contents and lengths. The time depends only on the two lengths, never on where the
// bytes first differ; a length mismatch still reads every byte of the longer string.
bool constant_time_equal(std::string_view a, std::string_view b);

// `header` (the Authorization header's value) is "Bearer", in any case, one or more spaces and
// exactly `key`.
bool bearer_matches(std::string_view header, std::string_view key);

// A request carries the key: "Authorization: Bearer KEY" (OpenAI's clients) or "x-api-key: KEY"
// (Anthropic's). Either header may be the empty string (absent); both are compared, in
// constant time, so the time does not tell which one was tried.
bool api_key_matches(std::string_view authorization, std::string_view x_api_key,
                     std::string_view key);

}  // namespace qwen35::server
