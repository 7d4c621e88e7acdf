#include "server/affinity.h"

#include <algorithm>
#include <cstdio>

namespace qwen35::server {
namespace {

std::string hex16(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(h));
  return b;
}

// A key as it may travel in a header: printable ASCII without spaces at its ends, bounded.
std::string header_safe(const std::string& key) {
  bool ok = !key.empty() && key.size() <= 128 && key.front() != ' ' && key.back() != ' ';
  for (unsigned char c : key) ok = ok && c >= 0x20 && c < 0x7f;
  return ok ? key : "h-" + hex16(fnv1a64(key));
}

// A non-empty string field, "" otherwise (a key of another type is no key).
std::string string_field(const Json& o, const char* name) {
  if (!o.is_object()) return "";
  const auto it = o.find(name);
  return it != o.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

uint64_t fnv1a64(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string affinity_key(const Json& body, std::string_view session_header) {
  std::string key = string_field(body, "prompt_cache_key");
  if (key.empty()) key = std::string(session_header);
  if (key.empty()) key = string_field(body, "user");
  if (key.empty() && body.is_object() && body.contains("metadata"))
    key = string_field(body["metadata"], "user_id");
  return key.empty() ? key : header_safe(key);
}

std::string prefix_affinity_key(const std::vector<int32_t>& ids, const std::vector<int64_t>& hints) {
  constexpr int64_t kGrid = 64;  // the prefix cache's block: snapshots sit on this grid
  int64_t cut = 0;
  if (!hints.empty()) cut = hints.front() / kGrid * kGrid;
  if (cut < kGrid) cut = std::min<int64_t>(kGrid, int64_t(ids.size()));
  cut = std::min<int64_t>(cut, int64_t(ids.size()));
  std::string bytes;
  bytes.reserve(size_t(cut) * 4);
  for (int64_t i = 0; i < cut; ++i) {
    const uint32_t v = uint32_t(ids[size_t(i)]);
    for (int b = 0; b < 4; ++b) bytes.push_back(char((v >> (8 * b)) & 0xff));
  }
  return "prefix-" + hex16(fnv1a64(bytes));
}

}  // namespace qwen35::server
