#include "template/jinja_pystr.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "template/jinja_value.h"

namespace qwen35::tmpl::jinja {

namespace {

// Decodes one code point at s[*pos]; advances *pos. Invalid sequences yield U+FFFD, one byte.
char32_t next_cp(std::string_view s, size_t* pos) {
  const auto b0 = static_cast<unsigned char>(s[*pos]);
  int len = 0;
  char32_t cp = 0;
  if (b0 < 0x80) {
    ++*pos;
    return b0;
  } else if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07;
  } else {
    ++*pos;
    return 0xFFFD;
  }
  if (*pos + len > s.size()) {
    ++*pos;
    return 0xFFFD;
  }
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[*pos + k]);
    if ((b & 0xC0) != 0x80) {
      ++*pos;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  const bool overlong =
      (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
  if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++*pos;
    return 0xFFFD;
  }
  *pos += len;
  return cp;
}

bool is_cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

bool py_isprintable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

template <typename F>
std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) append_utf8(out, f(next_cp(s, &pos)));
  return out;
}

char32_t upper_cp(char32_t c) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c)));
}
char32_t lower_cp(char32_t c) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c)));
}
char32_t title_cp(char32_t c) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c)));
}

}  // namespace

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (pos < s.size()) out.push_back(next_cp(s, &pos));
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool valid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t before = pos;
    if (next_cp(s, &pos) == 0xFFFD && !(pos - before == 3 && s.substr(before, 3) == "\xEF\xBF\xBD"))
      return false;
  }
  return true;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    next_cp(s, &pos);
    ++n;
  }
  return n;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left,
                     bool right) {
  const std::u32string cps = decode_utf8(s);
  const std::u32string set = chars ? decode_utf8(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) {
    return chars ? set.find(c) != std::u32string::npos : py_isspace(c);
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return encode_utf8(cps.substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (maxsplit < 0) maxsplit = INT64_MAX;
  if (sep) {
    if (sep->empty()) throw TemplateError("ValueError: empty separator");
    if (!from_right) {
      size_t start = 0;
      while (static_cast<int64_t>(parts.size()) < maxsplit) {
        const size_t at = s.find(*sep, start);
        if (at == std::string_view::npos) break;
        parts.emplace_back(s.substr(start, at - start));
        start = at + sep->size();
      }
      parts.emplace_back(s.substr(start));
    } else {
      size_t end = s.size();
      std::vector<std::string> rev;
      while (static_cast<int64_t>(rev.size()) < maxsplit && end >= sep->size()) {
        const size_t at = s.rfind(*sep, end - sep->size());
        if (at == std::string_view::npos) break;
        rev.emplace_back(s.substr(at + sep->size(), end - at - sep->size()));
        end = at;
      }
      rev.emplace_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
    return parts;
  }
  const std::u32string cps = decode_utf8(s);
  const size_t n = cps.size();
  if (!from_right) {
    size_t i = 0;
    while (i < n) {
      while (i < n && py_isspace(cps[i])) ++i;
      if (i == n) break;
      if (static_cast<int64_t>(parts.size()) == maxsplit) {
        parts.push_back(encode_utf8(cps.substr(i)));
        break;
      }
      size_t j = i;
      while (j < n && !py_isspace(cps[j])) ++j;
      parts.push_back(encode_utf8(cps.substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  size_t i = n;
  std::vector<std::string> rev;
  while (i > 0) {
    while (i > 0 && py_isspace(cps[i - 1])) --i;
    if (i == 0) break;
    if (static_cast<int64_t>(rev.size()) == maxsplit) {
      rev.push_back(encode_utf8(cps.substr(0, i)));
      break;
    }
    size_t j = i;
    while (j > 0 && !py_isspace(cps[j - 1])) --j;
    rev.push_back(encode_utf8(cps.substr(j, i - j)));
    i = j;
  }
  parts.assign(rev.rbegin(), rev.rend());
  return parts;
}

std::string py_replace(std::string_view s, std::string_view old_s, std::string_view new_s,
                       int64_t count) {
  if (count < 0) count = INT64_MAX;
  std::string out;
  int64_t done = 0;
  if (old_s.empty()) {
    // Python inserts `new` before every code point and at the end.
    size_t pos = 0;
    while (pos < s.size()) {
      if (done < count) {
        out += new_s;
        ++done;
      }
      const size_t before = pos;
      next_cp(s, &pos);
      out += s.substr(before, pos - before);
    }
    if (done < count) out += new_s;
    return out;
  }
  size_t start = 0;
  while (done < count) {
    const size_t at = s.find(old_s, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += new_s;
    start = at + old_s.size();
    ++done;
  }
  out += s.substr(start);
  return out;
}

std::string py_upper(std::string_view s) { return map_cps(s, upper_cp); }
std::string py_lower(std::string_view s) { return map_cps(s, lower_cp); }

std::string py_capitalize(std::string_view s) {
  bool first = true;
  return map_cps(s, [&](char32_t c) {
    const char32_t r = first ? title_cp(c) : lower_cp(c);
    first = false;
    return r;
  });
}

std::string py_title(std::string_view s) {
  bool prev_cased = false;
  return map_cps(s, [&](char32_t c) {
    const char32_t r = prev_cased ? lower_cp(c) : title_cp(c);
    prev_cased = is_cased(c);
    return r;
  });
}

bool py_is(std::string_view s, std::string_view what) {
  const std::u32string cps = decode_utf8(s);
  if (cps.empty()) return false;
  if (what == "lower" || what == "upper") {
    bool any = false;
    for (char32_t c : cps) {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      if (cat == UTF8PROC_CATEGORY_LT) return false;
      if (cat == (what == "lower" ? UTF8PROC_CATEGORY_LU : UTF8PROC_CATEGORY_LL)) return false;
      if (cat == (what == "lower" ? UTF8PROC_CATEGORY_LL : UTF8PROC_CATEGORY_LU)) any = true;
    }
    return any;
  }
  for (char32_t c : cps) {
    const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    const bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
    const bool digit = cat == UTF8PROC_CATEGORY_ND;
    const bool number = cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
    bool ok = false;
    if (what == "alpha")
      ok = alpha;
    else if (what == "digit" || what == "decimal")
      ok = digit;
    else if (what == "numeric")
      ok = number;
    else if (what == "alnum")
      ok = alpha || number;
    else if (what == "space")
      ok = py_isspace(c);
    if (!ok) return false;
  }
  return true;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  const std::u32string cps = decode_utf8(s);
  std::vector<std::string> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (c == '\r' && eol < cps.size() && cps[eol] == '\n') ++eol;
    out.push_back(encode_utf8(cps.substr(start, (keepends ? eol : i) - start)));
    start = i = eol;
  }
  if (start < cps.size()) out.push_back(encode_utf8(cps.substr(start)));
  return out;
}

std::string py_repr_str(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  char buf[16];
  while (pos < s.size()) {
    const char32_t c = next_cp(s, &pos);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (py_isprintable(c)) {
      append_utf8(out, c);
    } else {
      const unsigned v = static_cast<unsigned>(c);
      if (v < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", v);
      } else if (v < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", v);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", v);
      }
      out += buf;
    }
  }
  out.push_back(quote);
  return out;
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // "-d.ddde+XX"
  const size_t e_at = sci.find('e');
  std::string mant = sci.substr(0, e_at);
  const int exp = std::atoi(sci.c_str() + e_at + 1);
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exp) + 1) + "." +
             digits.substr(static_cast<size_t>(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + buf;
}

std::string json_quote(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  char buf[16];
  size_t pos = 0;
  while (pos < s.size()) {
    const char32_t c = next_cp(s, &pos);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            const unsigned v = static_cast<unsigned>(c) - 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (v >> 10),
                          0xDC00 + (v & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          }
          out += buf;
        } else {
          append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

}  // namespace qwen35::tmpl::jinja
