#include "server/auth.h"

#include <algorithm>
#include <cstdint>

namespace qwen35::server {

bool constant_time_equal(std::string_view a, std::string_view b) {
  const size_t n = std::max(a.size(), b.size());
  // Both sizes go into the accumulated difference rather than an early return; every index up
  // to the longer length is visited (a byte past the end of the shorter reads as 0).
  uint64_t diff = uint64_t(a.size() ^ b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= uint64_t(x ^ y);
  }
  // Keeps the compiler from turning the loop back into an early exit.
  volatile uint64_t sink = diff;
  return sink == 0;
}

bool bearer_matches(std::string_view header, std::string_view key) {
  // credentials = auth-scheme 1*SP token68 (RFC 9110 §11.4), and the scheme is case-insensitive
  // (§11.1): "bearer KEY" and "BEARER KEY" are the same credentials. The scheme is no secret, so
  // only the key is compared in constant time; when the scheme is wrong the key is still
  // compared (with "" in its place), so either way the time depends on lengths alone.
  constexpr std::string_view kScheme = "bearer";
  bool scheme = header.size() > kScheme.size() && header[kScheme.size()] == ' ';
  for (size_t i = 0; scheme && i < kScheme.size(); ++i) scheme = (header[i] | 0x20) == kScheme[i];
  std::string_view given;
  if (scheme) {
    given = header.substr(kScheme.size());
    while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  }
  const bool key_ok = constant_time_equal(given, key);
  return scheme && key_ok;
}

bool api_key_matches(std::string_view authorization, std::string_view x_api_key,
                     std::string_view key) {
  const bool bearer = bearer_matches(authorization, key);
  // An absent x-api-key never matches, even an empty key (the server then needs none anyway).
  const bool x = !x_api_key.empty() && constant_time_equal(x_api_key, key);
  return bearer || x;
}

}  // namespace qwen35::server
