// Expression parsing: jinja2's grammar and operator precedence.
#include <algorithm>

#include "template/jinja_builtins.h"
#include "template/jinja_parser_impl.h"

namespace qwen35::tmpl::jinja {

// ---- expressions ----
ExprPtr Parser::parse_expression(bool with_condexpr) {
  Guard g(this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

ExprPtr Parser::parse_condexpr() {
  const int line = cur().line;
  ExprPtr expr1 = parse_or();
  while (skip_name("if")) {
    auto e = node(ExprKind::kCondExpr, line);
    e->kids.push_back(parse_or());
    e->kids.push_back(std::move(expr1));
    if (skip_name("else")) {
      Guard g(this);
      e->kids.push_back(parse_condexpr());
    } else {
      e->kids.push_back(nullptr);
    }
    expr1 = done(std::move(e));
  }
  return expr1;
}

ExprPtr Parser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const int line = take().line;
    left = binary(ExprKind::kOr, line, std::move(left), parse_and());
  }
  return left;
}

ExprPtr Parser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const int line = take().line;
    left = binary(ExprKind::kAnd, line, std::move(left), parse_not());
  }
  return left;
}

ExprPtr Parser::parse_not() {
  if (is_name("not")) {
    Guard g(this);
    auto e = node(ExprKind::kNot, take().line);
    e->kids.push_back(parse_not());
    return done(std::move(e));
  }
  return parse_compare();
}

ExprPtr Parser::parse_compare() {
  const int line = cur().line;
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    if (cur().type == TokType::kOp &&
        (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" ||
         cur().text == ">" || cur().text == ">=")) {
      op = take().text;
    } else if (skip_name("in")) {
      op = "in";
    } else if (is_name("not") && peek().type == TokType::kName && peek().text == "in") {
      take();
      take();
      op = "notin";
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::kCompare, line);
      cmp->kids.push_back(std::move(first));
    }
    cmp->ops.push_back(op);
    cmp->kids.push_back(parse_math1());
  }
  return cmp ? done(std::move(cmp)) : std::move(first);
}

ExprPtr Parser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token t = take();
    left = binary(ExprKind::kBinary, t.line, std::move(left), parse_concat(), t.text);
  }
  return left;
}

ExprPtr Parser::parse_concat() {
  const int line = cur().line;
  ExprPtr first = parse_math2();
  if (!is_op("~")) return first;
  auto e = node(ExprKind::kConcat, line);
  e->kids.push_back(std::move(first));
  while (skip_op("~")) e->kids.push_back(parse_math2());
  return done(std::move(e));
}

ExprPtr Parser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token t = take();
    left = binary(ExprKind::kBinary, t.line, std::move(left), parse_pow(), t.text);
  }
  return left;
}

ExprPtr Parser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token t = take();
    left = binary(ExprKind::kBinary, t.line, std::move(left), parse_unary(true), t.text);
  }
  return left;
}

ExprPtr Parser::parse_unary(bool with_filter) {
  Guard g(this);
  ExprPtr e;
  if (is_op("-") || is_op("+")) {
    const Token t = take();
    e = node(t.text == "-" ? ExprKind::kNeg : ExprKind::kPos, t.line);
    e->kids.push_back(parse_unary(false));
    e = done(std::move(e));
  } else {
    e = parse_primary(false);
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr Parser::parse_primary(bool with_namespace) {
  Guard g(this);
  const Token t = cur();
  if (t.type == TokType::kName) {
    take();
    if (t.text == "true" || t.text == "false" || t.text == "True" || t.text == "False") {
      auto e = node(ExprKind::kConst, t.line);
      e->value = Value::boolean(t.text == "true" || t.text == "True");
      return e;
    }
    if (t.text == "none" || t.text == "None") {
      auto e = node(ExprKind::kConst, t.line);
      e->value = Value::none();
      return e;
    }
    if (with_namespace && is_op(".")) {
      take();
      auto e = node(ExprKind::kNsRef, t.line);
      e->name = t.text;
      e->attr = expect_name();
      return e;
    }
    auto e = node(ExprKind::kName, t.line);
    e->name = t.text;
    return e;
  }
  if (t.type == TokType::kString) {
    std::string s;
    while (cur().type == TokType::kString) s += take().text;
    auto e = node(ExprKind::kConst, t.line);
    e->value = Value::string(std::move(s));
    return e;
  }
  if (t.type == TokType::kInteger || t.type == TokType::kFloat) {
    take();
    auto e = node(ExprKind::kConst, t.line);
    e->value =
        t.type == TokType::kInteger ? Value::integer(t.int_value) : Value::number(t.float_value);
    return e;
  }
  if (is_op("(")) {
    take();
    ExprPtr e = parse_tuple(false, true, {}, true, false);
    expect_op(")");
    return e;
  }
  if (is_op("[")) return parse_list_or_dict(ExprKind::kList, "]");
  if (is_op("{")) return parse_list_or_dict(ExprKind::kDict, "}");
  fail("unexpected " + quoted(t));
}

ExprPtr Parser::parse_list_or_dict(ExprKind kind, const char* close) {
  auto e = node(kind, take().line);
  while (!is_op(close)) {
    if (!e->kids.empty()) expect_op(",");
    if (is_op(close)) break;
    e->kids.push_back(parse_expression(true));
    if (kind == ExprKind::kDict) {
      expect_op(":");
      e->kids.push_back(parse_expression(true));
    }
  }
  expect_op(close);
  return done(std::move(e));
}

bool Parser::is_tuple_end(const std::vector<std::string>& extra_end) const {
  if (cur().type == TokType::kVarEnd || cur().type == TokType::kBlockEnd || is_op(")")) return true;
  return !extra_end.empty() && is_name_in(extra_end);
}

ExprPtr Parser::parse_tuple(bool simplified, bool with_condexpr,
                            const std::vector<std::string>& extra_end, bool explicit_parens,
                            bool with_namespace) {
  const int line = cur().line;
  std::vector<ExprPtr> args;
  bool is_tuple = false;
  while (true) {
    if (!args.empty()) expect_op(",");
    if (is_tuple_end(extra_end)) break;
    args.push_back(simplified ? parse_primary(with_namespace) : parse_expression(with_condexpr));
    if (is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!args.empty()) return std::move(args[0]);
    if (!explicit_parens) fail("Expected an expression, got " + quoted(cur()));
  }
  auto e = node(ExprKind::kTuple, line);
  e->kids = std::move(args);
  return done(std::move(e));
}

ExprPtr Parser::parse_postfix(ExprPtr e) {
  while (true) {
    if (is_op(".") || is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (is_op("|")) {
      e = parse_filter(std::move(e), false);
    } else if (is_name("is")) {
      e = parse_test(std::move(e));
    } else if (is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr Parser::parse_subscript(ExprPtr obj) {
  const Token t = take();
  if (t.text == ".") {
    const Token a = take();
    if (a.type == TokType::kName) {
      auto e = node(ExprKind::kGetattr, t.line);
      e->name = a.text;
      e->kids.push_back(std::move(obj));
      return done(std::move(e));
    }
    if (a.type != TokType::kInteger) fail("expected name or number");
    auto e = node(ExprKind::kGetitem, t.line);
    auto k = node(ExprKind::kConst, a.line);
    k->value = Value::integer(a.int_value);
    e->kids.push_back(std::move(obj));
    e->kids.push_back(std::move(k));
    return done(std::move(e));
  }
  std::vector<ExprPtr> args;
  while (!is_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() == 1 && args[0]->kind == ExprKind::kSlice) {
    args[0]->kids.insert(args[0]->kids.begin(), std::move(obj));
    return done(std::move(args[0]));
  }
  auto e = node(ExprKind::kGetitem, t.line);
  e->kids.push_back(std::move(obj));
  if (args.size() == 1) {
    e->kids.push_back(std::move(args[0]));
  } else {
    auto tup = node(ExprKind::kTuple, t.line);
    tup->kids = std::move(args);
    e->kids.push_back(done(std::move(tup)));
  }
  return done(std::move(e));
}

// An index or a slice [start:stop:step]; a slice is returned as kSlice without its object.
ExprPtr Parser::parse_subscribed() {
  const int line = cur().line;
  ExprPtr start;
  if (!is_op(":")) {
    start = parse_expression(true);
    if (!is_op(":")) return start;
  }
  take();
  auto e = node(ExprKind::kSlice, line);
  e->kids.push_back(std::move(start));
  if (!is_op(":") && !is_op("]") && !is_op(",")) {
    e->kids.push_back(parse_expression(true));
  } else {
    e->kids.push_back(nullptr);
  }
  if (skip_op(":") && !is_op("]") && !is_op(",")) {
    e->kids.push_back(parse_expression(true));
  } else {
    e->kids.push_back(nullptr);
  }
  return e;
}

void Parser::parse_call_args(Expr* e) {
  expect_op("(");
  bool need_comma = false;
  while (!is_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (is_op(")")) break;
    }
    if (is_op("*") || is_op("**")) fail("*args / **kwargs in calls are not supported");
    if (cur().type == TokType::kName && peek().type == TokType::kOp && peek().text == "=") {
      std::string key = take().text;
      take();
      e->kwargs.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!e->kwargs.empty()) fail("invalid syntax for function call expression");
      e->kids.push_back(parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(")");
}

ExprPtr Parser::parse_call(ExprPtr callee) {
  auto e = node(ExprKind::kCall, cur().line);
  e->kids.push_back(std::move(callee));
  parse_call_args(e.get());
  return done(std::move(e));
}

std::string Parser::dotted_name() {
  std::string name = expect_name();
  while (skip_op(".")) {
    name.push_back('.');
    name += expect_name();
  }
  return name;
}

ExprPtr Parser::parse_filter(ExprPtr obj, bool start_inline) {
  while (is_op("|") || start_inline) {
    if (!start_inline) take();
    start_inline = false;
    const int line = cur().line;
    auto e = node(ExprKind::kFilter, line);
    e->name = dotted_name();
    e->kids.push_back(std::move(obj));
    if (is_op("(")) parse_call_args(e.get());
    obj = done(std::move(e));
  }
  return obj;
}

ExprPtr Parser::parse_test(ExprPtr obj) {
  const int line = take().line;
  const bool negated = skip_name("not");
  auto e = node(ExprKind::kTest, line);
  e->name = dotted_name();
  e->kids.push_back(std::move(obj));
  const TokType ty = cur().type;
  if (is_op("(")) {
    parse_call_args(e.get());
  } else if ((ty == TokType::kName || ty == TokType::kString || ty == TokType::kInteger ||
              ty == TokType::kFloat || is_op("[") || is_op("{")) &&
             !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("You cannot chain multiple tests with is");
    e->kids.push_back(parse_postfix(parse_primary(false)));
  }
  ExprPtr test = done(std::move(e));
  if (!negated) return test;
  auto n = node(ExprKind::kNot, line);
  n->kids.push_back(std::move(test));
  return done(std::move(n));
}

}  // namespace qwen35::tmpl::jinja
