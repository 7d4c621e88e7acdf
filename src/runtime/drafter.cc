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

}  // namespace qwen35::runtime
