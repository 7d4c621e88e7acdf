// Speculative decoding: what drafts tokens for the engine to verify (docs/design.md §6,
// *drafted == plain*). A draft is only a guess: the engine verifies the drafted tokens in one
// forward call and keeps those that equal what plain decoding samples at their positions, so
// what a drafter proposes changes the speed, never the tokens.
#pragma once

#include <array>
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

// How many tokens a request drafts next. A drafted token costs a verified row (and, with the MTP
// head, a pass of the head) whether or not it is accepted, so a request drafts at position i only
// while the chance that the drafts up to i are all accepted is at least kMinAcceptance. That
// chance is the product of per-position acceptance rates, each an exponential moving average
// (weight kAcceptanceWeight, starting at 1) over the steps whose drafts reached that position
// (every earlier one accepted). Every kProbeInterval steps a request drafts one position more
// than that, so a rate that fell is measured again and drafting resumes where the text turns
// predictable. It depends on the request's own history alone, so it is batch-invariant like the
// drafts themselves.
class DraftLength {
 public:
  static constexpr float kMinAcceptance = 0.25f;
  static constexpr float kAcceptanceWeight = 0.25f;
  static constexpr int kProbeInterval = 8;

  DraftLength() { rate_.fill(1.0f); }
  // Before a step: how many tokens to draft, at most k_max.
  int64_t next(int64_t k_max);
  // After it: `drafted` tokens were verified and the first `accepted` of them kept.
  void update(int64_t drafted, int64_t accepted);

 private:
  std::array<float, 16> rate_{};  // per draft position, given the earlier ones accepted
  int since_probe_ = 0;
};

}  // namespace qwen35::runtime
