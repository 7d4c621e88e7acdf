// Speculative decoding: what drafts tokens for the engine to verify (docs/design.md §6,
// *drafted == plain*). A draft is only a guess: the engine verifies the drafted tokens in one
// forward call and keeps those that equal what plain decoding samples at their positions, so
// what a drafter proposes changes the speed, never the tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace qwen35::runtime {

enum class SpecMethod { kOff, kLookup, kMtp };

// "off", "lookup", "mtp"; nullopt for anything else.
std::optional<SpecMethod> parse_spec_method(const std::string& s);
const char* spec_method_name(SpecMethod m);

struct SpecOptions {
  SpecMethod method = SpecMethod::kOff;
  int draft_tokens = 3;  // the most tokens one step drafts (1 .. model::kMaxVerifyRows - 1)
};

// Prompt lookup (n-gram copy): finds the latest earlier occurrence of the longest suffix of
// `context` of kLookupMaxNgram down to kLookupMinNgram tokens, and proposes up to `max` of the
// tokens that followed it. No weights; nothing when no suffix recurs.
inline constexpr int64_t kLookupMaxNgram = 4;
inline constexpr int64_t kLookupMinNgram = 2;
void lookup_draft(std::span<const int32_t> context, int64_t max, std::vector<int32_t>* out);

}  // namespace qwen35::runtime
