#include "template/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "template/jinja_pystr.h"
#include "template/jinja_value.h"

namespace qwen35::tmpl::jinja {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// jinja2 first splits on \r\n, \r and \n, drops one trailing empty line, and joins with \n.
std::string normalize_newlines(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : src_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t at = find_open(pos_);
      if (at == std::string::npos) {
        emit_data(src_.substr(pos_), line_);
        break;
      }
      const char kind = src_[at + 1];
      size_t after = at + 2;
      const char sign =
          (after < src_.size() && (src_[after] == '-' || src_[after] == '+')) ? src_[after] : 0;
      size_t raw_end = 0;
      const bool raw = kind == '%' && match_raw_begin(at, &raw_end);
      std::string text = src_.substr(pos_, at - pos_);
      const int data_line = line_;
      strip_data(text, sign, kind != '{');
      emit_data(std::move(text), data_line);
      advance_to(at);
      if (raw) {
        lex_raw(raw_end);
      } else if (kind == '#') {
        lex_comment(after + (sign ? 1 : 0));
      } else {
        lex_tag(kind == '%', after + (sign ? 1 : 0));
      }
    }
    Token eof;
    eof.type = TokType::kEof;
    eof.line = line_;
    toks_.push_back(eof);
    return std::move(toks_);
  }

 private:
  [[noreturn]] void fail(const std::string& msg) { throw TemplateError(msg, line_); }

  size_t find_open(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  void advance_to(size_t p) {
    line_ += static_cast<int>(std::count(src_.begin() + static_cast<std::ptrdiff_t>(pos_),
                                         src_.begin() + static_cast<std::ptrdiff_t>(p), '\n'));
    pos_ = p;
  }

  // Moves past a tag end at `end`, remembering whether the match ended a line (lstrip_blocks).
  void finish_at(size_t end) {
    advance_to(end);
    line_starting_ = end > 0 && src_[end - 1] == '\n';
  }

  // Skips Python whitespace (re's \s on str) from p.
  size_t skip_space(size_t p) const {
    while (p < src_.size()) {
      const auto c = static_cast<unsigned char>(src_[p]);
      if (c < 0x80) {
        if (!py_isspace(c)) break;
        ++p;
        continue;
      }
      const std::u32string cp = decode_utf8(std::string_view(src_).substr(p, 4));
      if (!py_isspace(cp[0])) break;
      std::string enc;
      append_utf8(enc, cp[0]);
      p += enc.size();
    }
    return p;
  }

  bool all_space(std::string_view s) const {
    const std::u32string cps = decode_utf8(s);
    return !cps.empty() && std::all_of(cps.begin(), cps.end(), py_isspace);
  }

  void strip_data(std::string& text, char sign, bool lstrip_applies) {
    if (sign == '-') {
      text = py_strip(text, std::nullopt, false, true);
    } else if (sign != '+' && lstrip_applies) {
      const size_t nl = text.rfind('\n');
      const size_t l = nl == std::string::npos ? 0 : nl + 1;
      if ((l > 0 || line_starting_) && all_space(std::string_view(text).substr(l))) text.resize(l);
    }
  }

  void emit_data(std::string text, int line) {
    if (text.empty()) return;
    Token t;
    t.type = TokType::kData;
    t.line = line;
    t.text = std::move(text);
    toks_.push_back(std::move(t));
  }

  void emit(TokType type, std::string text = {}) {
    Token t;
    t.type = type;
    t.line = line_;
    t.text = std::move(text);
    toks_.push_back(std::move(t));
  }

  // `{%[-+]? raw (-%}\s*|%})` at `at`; *end is just past it.
  bool match_raw_begin(size_t at, size_t* end) const {
    size_t p = at + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_space(p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_space(p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      *end = skip_space(p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      *end = p + 2;
      return true;
    }
    return false;
  }

  // Ends `%}` of a block: `+%}`, `-%}` + whitespace, or `%}` + one newline (trim_blocks).
  size_t match_block_end(size_t p) const {
    if (src_.compare(p, 3, "+%}") == 0) return p + 3;
    if (src_.compare(p, 3, "-%}") == 0) return skip_space(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2 + (p + 2 < src_.size() && src_[p + 2] == '\n');
    return 0;
  }

  void lex_raw(size_t body) {
    finish_at(body);
    for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 1)) {
      size_t p = q + 2;
      const char sign = (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ? src_[p] : 0;
      if (sign) ++p;
      p = skip_space(p);
      if (src_.compare(p, 6, "endraw") != 0) continue;
      const size_t end = match_block_end(skip_space(p + 6));
      if (!end) continue;
      std::string text = src_.substr(body, q - body);
      const int data_line = line_;
      strip_data(text, sign, true);
      emit_data(std::move(text), data_line);
      finish_at(end);
      return;
    }
    fail("Missing end of raw directive");
  }

  void lex_comment(size_t body) {
    const size_t r = src_.find("#}", body);
    if (r == std::string::npos) fail("Missing end of comment tag");
    size_t end;
    if (r > body && src_[r - 1] == '-') {
      end = skip_space(r + 2);
    } else if (r > body && src_[r - 1] == '+') {
      end = r + 2;
    } else {
      end = r + 2 + (r + 2 < src_.size() && src_[r + 2] == '\n');
    }
    finish_at(end);
  }

  void lex_tag(bool block, size_t p) {
    emit(block ? TokType::kBlockBegin : TokType::kVarBegin);
    advance_to(p);
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) fail("unexpected end of template inside a tag");
      if (balance.empty()) {
        size_t end = 0;
        if (block) {
          end = match_block_end(pos_);
        } else if (src_.compare(pos_, 3, "-}}") == 0) {
          end = skip_space(pos_ + 3);
        } else if (src_.compare(pos_, 2, "}}") == 0) {
          end = pos_ + 2;
        }
        if (end) {
          emit(block ? TokType::kBlockEnd : TokType::kVarEnd);
          finish_at(end);
          return;
        }
      }
      const size_t ws = skip_space(pos_);
      if (ws != pos_) {
        advance_to(ws);
        continue;
      }
      lex_expr_token(balance);
    }
  }

  // (\d+_)*\d+ at p; returns the end or 0.
  size_t scan_digits(size_t p) const {
    if (p >= src_.size() || !is_digit(src_[p])) return 0;
    while (true) {
      while (p < src_.size() && is_digit(src_[p])) ++p;
      if (p + 1 < src_.size() && src_[p] == '_' && is_digit(src_[p + 1])) {
        ++p;
        continue;
      }
      return p;
    }
  }

  size_t scan_float(size_t p) const {
    if (p > 0 && src_[p - 1] == '.') return 0;
    const size_t q = scan_digits(p);
    if (!q) return 0;
    size_t r = q;
    if (r < src_.size() && src_[r] == '.') {
      if (const size_t f = scan_digits(r + 1)) r = f;
    }
    if (r < src_.size() && (src_[r] == 'e' || src_[r] == 'E')) {
      size_t s = r + 1;
      if (s < src_.size() && (src_[s] == '+' || src_[s] == '-')) ++s;
      if (const size_t e = scan_digits(s)) return e;
    }
    if (src_[q] == '.') {
      if (const size_t f = scan_digits(q + 1)) return f;
    }
    return 0;
  }

  size_t scan_integer(size_t p, int* base) const {
    *base = 10;
    if (src_[p] == '0' && p + 1 < src_.size()) {
      const char x = static_cast<char>(src_[p + 1] | 0x20);
      if (x == 'b' || x == 'o' || x == 'x') {
        *base = x == 'b' ? 2 : (x == 'o' ? 8 : 16);
        size_t q = p + 2;
        size_t end = 0;
        while (true) {
          size_t d = q;
          if (d < src_.size() && src_[d] == '_') ++d;
          if (d >= src_.size()) break;
          const char c = static_cast<char>(src_[d] | 0x20);
          const bool ok = *base == 2   ? (c == '0' || c == '1')
                          : *base == 8 ? (c >= '0' && c <= '7')
                                       : (is_digit(c) || (c >= 'a' && c <= 'f'));
          if (!ok) break;
          q = d + 1;
          end = q;
        }
        if (end) return end;
        *base = 10;
      }
    }
    if (!is_digit(src_[p])) return 0;
    const char first = src_[p];
    size_t q = p + 1;
    while (true) {
      size_t d = q;
      if (d < src_.size() && src_[d] == '_') ++d;
      if (d >= src_.size() || !is_digit(src_[d]) || (first == '0' && src_[d] != '0')) break;
      q = d + 1;
    }
    return q;
  }

  void lex_number(size_t end, bool is_float, int base) {
    std::string digits;
    for (size_t i = pos_; i < end; ++i)
      if (src_[i] != '_') digits.push_back(src_[i]);
    Token t;
    t.line = line_;
    t.text = src_.substr(pos_, end - pos_);
    if (is_float) {
      t.type = TokType::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.type = TokType::kInteger;
      errno = 0;
      const char* s = digits.c_str() + (base == 10 ? 0 : 2);
      char* stop = nullptr;
      const unsigned long long v = std::strtoull(s, &stop, base);
      if (errno == ERANGE || v > static_cast<unsigned long long>(INT64_MAX))
        fail("integer literal " + t.text + " is too large");
      t.int_value = static_cast<int64_t>(v);
    }
    toks_.push_back(std::move(t));
    advance_to(end);
  }

  void lex_expr_token(std::vector<char>& balance) {
    const char c = src_[pos_];
    if (const size_t f = scan_float(pos_)) return lex_number(f, true, 10);
    int base = 10;
    if (is_digit(c)) {
      const size_t end = scan_integer(pos_, &base);
      return lex_number(end, false, base);
    }
    if (is_name_start(c)) {
      size_t q = pos_;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      emit(TokType::kName, src_.substr(pos_, q - pos_));
      advance_to(q);
      return;
    }
    if (c == '\'' || c == '"') return lex_string(c);
    static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/",
                                 "*",  "%",  "~",  "[",  "]",  "(",  ")", "{", "}",
                                 ">",  "<",  "=",  ".",  ":",  "|",  ",", ";"};
    for (const char* op : kOps) {
      const size_t len = std::char_traits<char>::length(op);
      if (src_.compare(pos_, len, op) != 0) continue;
      if (len == 1) check_balance(c, balance);
      emit(TokType::kOp, op);
      advance_to(pos_ + len);
      return;
    }
    std::string ch;
    append_utf8(ch, decode_utf8(std::string_view(src_).substr(pos_, 4))[0]);
    fail("unexpected char " + py_repr_str(ch));
  }

  void check_balance(char c, std::vector<char>& balance) {
    if (c == '(') balance.push_back(')');
    if (c == '[') balance.push_back(']');
    if (c == '{') balance.push_back('}');
    if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) fail(std::string("unexpected '") + c + "'");
      if (balance.back() != c)
        fail(std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      balance.pop_back();
    }
  }

  void lex_string(char quote) {
    size_t q = pos_ + 1;
    while (q < src_.size() && src_[q] != quote) q += src_[q] == '\\' ? 2 : 1;
    if (q >= src_.size())
      fail(std::string("unexpected char '") + quote + "' (unterminated string)");
    Token t;
    t.type = TokType::kString;
    t.line = line_;
    t.text = unescape(std::string_view(src_).substr(pos_ + 1, q - pos_ - 1));
    toks_.push_back(std::move(t));
    advance_to(q + 1);
  }

  // Python's unicode-escape decoding of a string literal body.
  std::string unescape(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out.push_back(s[i]);
        continue;
      }
      const char e = s[++i];
      switch (e) {
        case '\n':
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          const std::string hex(s.substr(i + 1, n));
          if (hex.size() != n || !std::all_of(hex.begin(), hex.end(), [](char h) {
                return std::isxdigit(static_cast<unsigned char>(h)) != 0;
              }))
            fail(std::string("truncated \\") + e + " escape");
          unsigned long cp = std::strtoul(hex.c_str(), nullptr, 16);
          if (cp > 0x10FFFF) fail("illegal Unicode character");
          i += n;
          // A \uD8xx\uDCxx surrogate pair becomes its code point; a lone surrogate U+FFFD.
          if (cp >= 0xD800 && cp <= 0xDBFF && s.substr(i + 1, 2) == "\\u") {
            const unsigned long lo =
                std::strtoul(std::string(s.substr(i + 3, 4)).c_str(), nullptr, 16);
            if (lo >= 0xDC00 && lo <= 0xDFFF && s.substr(i + 3, 4).size() == 4) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              i += 6;
            }
          }
          append_utf8(out, (cp >= 0xD800 && cp <= 0xDFFF) ? 0xFFFD : static_cast<char32_t>(cp));
          break;
        }
        case 'N':
          fail("\\N{...} escapes are not supported");
        default:
          if (e >= '0' && e <= '7') {
            unsigned cp = static_cast<unsigned>(e - '0');
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
              cp = cp * 8 + static_cast<unsigned>(s[++i] - '0');
            append_utf8(out, cp);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> lex_template(std::string_view source) {
  if (!valid_utf8(source)) throw TemplateError("template is not valid UTF-8", 1);
  return Lexer(normalize_newlines(source)).run();
}

std::string describe(const Token& t) {
  switch (t.type) {
    case TokType::kData:
      return "template data";
    case TokType::kVarBegin:
      return "begin of print statement";
    case TokType::kVarEnd:
      return "end of print statement";
    case TokType::kBlockBegin:
      return "begin of statement block";
    case TokType::kBlockEnd:
      return "end of statement block";
    case TokType::kString:
      return "string";
    case TokType::kInteger:
      return "integer";
    case TokType::kFloat:
      return "float";
    case TokType::kEof:
      return "end of template";
    default:
      return t.text;
  }
}

}  // namespace qwen35::tmpl::jinja
