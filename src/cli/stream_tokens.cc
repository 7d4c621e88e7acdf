#include "cli/stream_tokens.h"

namespace qwen35::cli {
namespace {

using Json = nlohmann::json;

bool non_empty_string(const Json& o, const char* key) {
  auto it = o.find(key);
  return it != o.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// Whether a choice of a chunk carries generated output: completion text, chat content,
// reasoning (the field names the servers use for it) or a tool call's pieces.
bool carries_output(const Json& choice) {
  if (non_empty_string(choice, "text")) return true;
  auto d = choice.find("delta");
  if (d == choice.end() || !d->is_object()) return false;
  if (non_empty_string(*d, "content") || non_empty_string(*d, "reasoning_content") ||
      non_empty_string(*d, "reasoning"))
    return true;
  auto tc = d->find("tool_calls");
  return tc != d->end() && tc->is_array() && !tc->empty();
}

}  // namespace

const char* token_source_name(TokenSource s) {
  switch (s) {
    case TokenSource::kTokenIds:
      return "token_ids";
    case TokenSource::kUsage:
      return "usage.completion_tokens";
    case TokenSource::kChunks:
      return "non-empty chunks";
    case TokenSource::kNone:
      break;
  }
  return "none";
}

int64_t StreamTally::add(const Json& j) {
  if (!j.is_object()) return 0;
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    auto num = [&](const Json& o, const char* k) {
      auto it = o.find(k);
      return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : int64_t(-1);
    };
    if (const int64_t c = num(*u, "completion_tokens"); c >= 0) usage_completion = c;
    if (const int64_t p = num(*u, "prompt_tokens"); p >= 0) prompt_tokens = p;
    if (auto d = u->find("prompt_tokens_details"); d != u->end() && d->is_object())
      if (const int64_t c = num(*d, "cached_tokens"); c >= 0) cached_tokens = c;
  }
  auto ch = j.find("choices");
  if (ch == j.end() || !ch->is_array()) return 0;
  int64_t ids = 0, outputs = 0;  // outputs: choices (of n) that brought generated text
  for (const Json& c : *ch) {
    if (!c.is_object()) continue;
    int64_t k = 0;
    if (auto t = c.find("token_ids"); t != c.end() && t->is_array()) k = int64_t(t->size());
    ids += k;
    outputs += k > 0 || carries_output(c);
  }
  token_ids += ids;
  chunks += outputs;
  return ids > 0 ? ids : outputs;
}

TokenSource StreamTally::source() const {
  if (token_ids > 0) return TokenSource::kTokenIds;
  if (usage_completion >= 0) return TokenSource::kUsage;
  if (chunks > 0) return TokenSource::kChunks;
  return TokenSource::kNone;
}

int64_t StreamTally::tokens() const {
  switch (source()) {
    case TokenSource::kTokenIds:
      return token_ids;
    case TokenSource::kUsage:
      return usage_completion;
    case TokenSource::kChunks:
      return chunks;
    case TokenSource::kNone:
      break;
  }
  return 0;
}

void SourceCount::add(TokenSource s) { ++n_[int(s)]; }

std::string SourceCount::describe() const {
  std::string used;
  int kinds = 0;
  for (TokenSource s : {TokenSource::kTokenIds, TokenSource::kUsage, TokenSource::kChunks}) {
    if (n_[int(s)] == 0) continue;
    ++kinds;
    if (!used.empty()) used += ", ";
    used += std::string(token_source_name(s)) + " " + std::to_string(n_[int(s)]);
  }
  if (kinds == 0) return "none";
  if (kinds > 1) return "mixed (" + used + ")";
  for (TokenSource s : {TokenSource::kTokenIds, TokenSource::kUsage, TokenSource::kChunks})
    if (n_[int(s)] > 0) return token_source_name(s);
  return "none";
}

}  // namespace qwen35::cli
