// Python arithmetic and slicing on interpreter Values.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string_view>

#include "template/jinja_builtins.h"
#include "template/jinja_interp.h"
#include "template/jinja_pystr.h"

namespace qwen35::tmpl::jinja {

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  throw TemplateError("TypeError: unsupported operand type(s) for " + op + ": '" + type_name(a) +
                      "' and '" + type_name(b) + "'");
}

[[noreturn]] void overflow() { throw TemplateError("integer overflow"); }

Value int_op(const std::string& op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op == "+") {
    if (__builtin_add_overflow(x, y, &r)) overflow();
  } else if (op == "-") {
    if (__builtin_sub_overflow(x, y, &r)) overflow();
  } else if (op == "*") {
    if (__builtin_mul_overflow(x, y, &r)) overflow();
  } else if (op == "/") {
    if (y == 0) throw TemplateError("ZeroDivisionError: division by zero");
    return Value::number(static_cast<double>(x) / static_cast<double>(y));
  } else if (op == "//" || op == "%") {
    if (y == 0) throw TemplateError("ZeroDivisionError: integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) overflow();
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    r = op == "//" ? q : m;
  } else {  // **
    if (y < 0) {
      if (x == 0)
        throw TemplateError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
    }
    r = 1;
    int64_t base = x;
    for (int64_t e = y; e > 0; e >>= 1) {
      if ((e & 1) && __builtin_mul_overflow(r, base, &r)) overflow();
      if (e > 1 && __builtin_mul_overflow(base, base, &base)) overflow();
    }
  }
  return Value::integer(r);
}

Value float_op(const std::string& op, double x, double y) {
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "/") {
    if (y == 0) throw TemplateError("ZeroDivisionError: float division by zero");
    return Value::number(x / y);
  }
  if (op == "//" || op == "%") {
    if (y == 0) throw TemplateError("ZeroDivisionError: float modulo");
    double mod = std::fmod(x, y);
    double div = (x - mod) / y;
    if (mod != 0) {
      if ((y < 0) != (mod < 0)) {
        mod += y;
        div -= 1.0;
      }
    } else {
      mod = std::copysign(0.0, y);
    }
    double floordiv;
    if (div != 0) {
      floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
    } else {
      floordiv = std::copysign(0.0, x / y);
    }
    return Value::number(op == "//" ? floordiv : mod);
  }
  if (x == 0 && y < 0)
    throw TemplateError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
  return Value::number(std::pow(x, y));
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    const auto count = static_cast<size_t>(n);
    if (!seq.str().empty())
      in.check_string(seq.str().size() * std::min<size_t>(count, SIZE_MAX / seq.str().size()));
    std::string out;
    for (size_t i = 0; i < count && !seq.str().empty(); ++i) out += seq.str();
    in.charge(out.size());
    return Value::string(std::move(out), seq.is_markup());
  }
  const size_t len = seq.items().size();
  if (len) in.check_list(len * std::min<size_t>(static_cast<size_t>(n), SIZE_MAX / len));
  std::vector<Value> out;
  in.charge(len * static_cast<size_t>(n) * sizeof(Value));
  for (int64_t i = 0; i < n && len; ++i)
    out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

int64_t slice_index(const Value& v) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  throw TemplateError(
      "TypeError: slice indices must be integers or None or have an __index__ "
      "method");
}

// One %-conversion of printf-style formatting: flags, width, precision and type.
std::string format_one(const std::string& spec, char type, const Value& v) {
  char buf[512];
  auto num = [&](const char* conv, bool integral) {
    require_defined(v);
    if (!v.is_number())
      throw TemplateError(std::string("TypeError: %") + type +
                          " format: a real number is required, not " + type_name(v));
    const std::string f = "%" + spec + conv;
    if (integral) {
      const double d = v.as_double();
      const long long i = v.is_float() ? static_cast<long long>(std::trunc(d)) : v.as_int();
      std::snprintf(buf, sizeof(buf), f.c_str(), i);
    } else {
      std::snprintf(buf, sizeof(buf), f.c_str(), v.as_double());
    }
    return std::string(buf);
  };
  switch (type) {
    case 's':
    case 'r':
    case 'a': {
      const std::string s = type == 's' ? to_str(v) : repr(v);
      const std::string f = "%" + spec + "s";
      if (spec.empty()) return s;
      const int n = std::snprintf(nullptr, 0, f.c_str(), s.c_str());
      std::string out(static_cast<size_t>(std::max(n, 0)), '\0');
      std::snprintf(out.data(), out.size() + 1, f.c_str(), s.c_str());
      return out;
    }
    case 'd':
    case 'i':
    case 'u':
      return num("lld", true);
    case 'x':
      return num("llx", true);
    case 'X':
      return num("llX", true);
    case 'o':
      return num("llo", true);
    case 'f':
    case 'F':
    case 'e':
    case 'E':
    case 'g':
    case 'G':
      return num(std::string(1, type).c_str(), false);
    default:
      throw TemplateError(std::string("ValueError: unsupported format character '") + type + "'");
  }
}

}  // namespace

std::string printf_format(const std::string& fmt, const Value& args) {
  std::vector<Value> pos;
  if (args.is_tuple())
    pos = args.items();
  else
    pos.push_back(args);
  size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) throw TemplateError("ValueError: incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    const Value* v = nullptr;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) throw TemplateError("ValueError: incomplete format key");
      if (!args.is_dict()) throw TemplateError("TypeError: format requires a mapping");
      v = args.dict().find(fmt.substr(i + 1, close - i - 1));
      if (!v) throw TemplateError("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      used_mapping = true;
      i = close + 1;
    }
    std::string spec;
    while (i < fmt.size() &&
           std::string_view("-+ #0123456789.").find(fmt[i]) != std::string_view::npos)
      spec.push_back(fmt[i++]);
    if (i >= fmt.size()) throw TemplateError("ValueError: incomplete format");
    if (spec.size() > 8) throw TemplateError("ValueError: format spec too long");
    if (!v) {
      if (next >= pos.size())
        throw TemplateError("TypeError: not enough arguments for format string");
      v = &pos[next++];
    }
    out += format_one(spec, fmt[i], *v);
  }
  if (!used_mapping && next < pos.size() && !(pos.size() == 1 && pos[0].is_dict()))
    throw TemplateError("TypeError: not all arguments converted during string formatting");
  return out;
}

Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_op(op, a.as_double(), b.as_double());
    return int_op(op, a.as_int(), b.as_int());
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      const bool markup = a.is_markup() || b.is_markup();
      std::string s = (markup && !a.is_markup()) ? html_escape(a.str()) : a.str();
      s += (markup && !b.is_markup()) ? html_escape(b.str()) : b.str();
      in.check_string(s.size());
      in.charge(s.size());
      return Value::string(std::move(s), markup);
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      in.check_list(a.items().size() + b.items().size());
      in.charge((a.items().size() + b.items().size()) * sizeof(Value));
      std::vector<Value> items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(items), a.is_tuple());
    }
    if (a.is_string() || a.is_list())
      throw TemplateError("TypeError: can only concatenate " + type_name(a) + " (not \"" +
                          type_name(b) + "\") to " + type_name(a));
    unsupported(op, a, b);
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
      return repeat(in, a, b.as_int());
    if ((b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
      return repeat(in, b, a.as_int());
  }
  if (op == "%" && a.is_string()) {
    std::string r = printf_format(a.str(), b);
    in.check_string(r.size());
    in.charge(r.size());
    return Value::string(std::move(r), a.is_markup());
  }
  unsupported(op == "**" ? "** or pow()" : op, a, b);
}

Value Interpreter::eval_slice(const Expr& e, const FramePtr& frame) {
  const Value obj = eval(*e.kids[0], frame);
  require_defined(obj);
  auto part = [&](size_t i) -> std::optional<int64_t> {
    if (!e.kids[i]) return std::nullopt;
    const Value v = eval(*e.kids[i], frame);
    if (v.is_none()) return std::nullopt;
    return slice_index(v);
  };
  const std::optional<int64_t> start = part(1), stop = part(2), step_opt = part(3);
  const int64_t step = step_opt.value_or(1);
  if (step == 0) throw TemplateError("ValueError: slice step cannot be zero");
  std::u32string cps;
  if (obj.is_string()) {
    cps = decode_utf8(obj.str());
  } else if (!obj.is_list()) {
    throw TemplateError("TypeError: '" + type_name(obj) + "' object is not subscriptable");
  }
  const int64_t n = static_cast<int64_t>(obj.is_string() ? cps.size() : obj.items().size());
  auto adjust = [&](std::optional<int64_t> idx, int64_t dflt) {
    if (!idx) return dflt;
    int64_t i = *idx;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const int64_t lo = adjust(start, step < 0 ? n - 1 : 0);
  const int64_t hi = adjust(stop, step < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = lo; step > 0 ? i < hi : i > hi;) {
    idx.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  if (obj.is_string()) {
    std::u32string out;
    for (int64_t i : idx) out.push_back(cps[static_cast<size_t>(i)]);
    return Value::string(encode_utf8(out), obj.is_markup());
  }
  std::vector<Value> out;
  for (int64_t i : idx) out.push_back(obj.items()[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.is_tuple());
}

}  // namespace qwen35::tmpl::jinja
