#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace qwen35::tokenizer {

namespace {

// Unicode White_Space, the set Oniguruma's `\s` matches.
constexpr std::string_view kWhiteSpace =
    R"(\x{9}-\x{d}\x{20}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f})"
    R"(\x{3000})";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  if (pcre2_get_error_message(code, buf, sizeof(buf)) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

core::Result<std::string> translate_oniguruma(std::string_view p) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 >= p.size()) return core::error("pattern ends with a lone backslash");
      const char e = p[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        if (in_class) return core::error("\\S inside a character class is not supported");
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == '[') return core::error("nested character classes are not supported");
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  if (in_class) return core::error("unterminated character class");
  return out;
}

struct RegexSplitter::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

RegexSplitter::RegexSplitter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

core::Result<RegexSplitter> RegexSplitter::create(std::string_view pattern,
                                                  const std::string& label) {
  auto translated = translate_oniguruma(pattern);
  if (!translated.ok()) return translated.status().with_context(label);
  int err = 0;
  PCRE2_SIZE offset = 0;
  auto impl = std::make_unique<Impl>();
  impl->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated->data()), translated->size(),
                             PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
  if (impl->code == nullptr) {
    return core::error(label + ": regex does not compile at offset " + std::to_string(offset) +
                       ": " + pcre2_message(err));
  }
  // JIT is an optimization: when unavailable, pcre2_match interprets.
  pcre2_jit_compile(impl->code, PCRE2_JIT_COMPLETE);
  return RegexSplitter(std::move(impl));
}

core::Status RegexSplitter::split(std::string_view text,
                                  std::vector<std::pair<size_t, size_t>>* pieces) const {
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create(1, nullptr), &pcre2_match_data_free);
  std::unique_ptr<pcre2_jit_stack, decltype(&pcre2_jit_stack_free)> big_stack(
      nullptr, &pcre2_jit_stack_free);
  std::unique_ptr<pcre2_match_context, decltype(&pcre2_match_context_free)> mctx(
      nullptr, &pcre2_match_context_free);
  if (!md) return core::error("[tokenizer] out of memory for regex match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, last_end = 0;
  while (pos < text.size()) {
    // The text was validated once up front, so PCRE2 need not re-check it at every start.
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, md.get(),
                         mctx.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !big_stack) {
      // Very long runs can exhaust the default 32 KiB JIT stack; retry with a large one.
      big_stack.reset(pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr));
      mctx.reset(pcre2_match_context_create(nullptr));
      if (!big_stack || !mctx) return core::error("[tokenizer] out of memory for the JIT stack");
      pcre2_jit_stack_assign(mctx.get(), nullptr, big_stack.get());
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) return core::error("[tokenizer] pre-tokenizer regex failed: " + pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match produces no piece; step over one code point.
      ++pos;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > last_end) pieces->emplace_back(last_end, begin);
    pieces->emplace_back(begin, end);
    last_end = pos = end;
  }
  if (last_end < text.size()) pieces->emplace_back(last_end, text.size());
  return core::ok_status();
}

}  // namespace qwen35::tokenizer
