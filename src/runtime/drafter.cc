#include "runtime/drafter.h"

#include <algorithm>

namespace qwen35::runtime {

std::optional<SpecMethod> parse_spec_method(const std::string& s) {
  if (s == "off") return SpecMethod::kOff;
  if (s == "lookup") return SpecMethod::kLookup;
  if (s == "mtp") return SpecMethod::kMtp;
  return std::nullopt;
}

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kLookup: return "lookup";
    case SpecMethod::kMtp: return "mtp";
    case SpecMethod::kOff: break;
  }
  return "off";
}

void lookup_draft(std::span<const int32_t> context, int64_t max, std::vector<int32_t>* out) {
  out->clear();
  const int64_t len = int64_t(context.size());
  if (max <= 0) return;
  for (int64_t n = std::min(kLookupMaxNgram, len - 1); n >= kLookupMinNgram; --n) {
    const int32_t* suffix = context.data() + len - n;
    // The latest earlier start whose n tokens equal the suffix and that has a token after it.
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, suffix + n, context.data() + i)) continue;
      const int64_t from = i + n, to = std::min(len, from + max);
      out->assign(context.begin() + from, context.begin() + to);
      return;
    }
  }
}

int64_t DraftLength::next(int64_t k_max) {
  k_max = std::min<int64_t>(k_max, int64_t(rate_.size()));
  int64_t k = 0;
  for (float all = 1.0f; k < k_max; ++k) {
    all *= rate_[size_t(k)];
    if (all < kMinAcceptance) break;
  }
  if (k < k_max && ++since_probe_ >= kProbeInterval) {
    since_probe_ = 0;
    ++k;
  }
  return k;
}

void DraftLength::update(int64_t drafted, int64_t accepted) {
  // Position i was reached when every draft before it was accepted.
  for (int64_t i = 0; i < drafted && i <= accepted && i < int64_t(rate_.size()); ++i) {
    const float x = i < accepted ? 1.0f : 0.0f;
    rate_[size_t(i)] += kAcceptanceWeight * (x - rate_[size_t(i)]);
  }
}

}  // namespace qwen35::runtime
