#include "template/jinja_parser.h"

#include <algorithm>

#include "template/jinja_builtins.h"
#include "template/jinja_lexer.h"
#include "template/jinja_parser_impl.h"

namespace qwen35::tmpl::jinja {

Body Parser::subparse(const std::vector<std::string>& end_tokens) {
  Body body;
  while (cur().type != TokType::kEof) {
    const Token& t = cur();
    if (t.type == TokType::kData) {
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kData;
      s->line = t.line;
      s->text = t.text;
      body.push_back(std::move(s));
      take();
    } else if (t.type == TokType::kVarBegin) {
      take();
      auto s = std::make_unique<Stmt>();
      s->kind = StmtKind::kPrint;
      s->line = cur().line;
      s->expr = parse_tuple(false, true, {}, false, false);
      expect(TokType::kVarEnd, "end of print statement");
      body.push_back(std::move(s));
    } else if (t.type == TokType::kBlockBegin) {
      take();
      if (!end_tokens.empty() && is_name_in(end_tokens)) return body;
      body.push_back(parse_statement());
      expect(TokType::kBlockEnd, "end of statement block");
    } else {
      fail("unexpected " + quoted(t));
    }
  }
  if (!end_tokens.empty()) {
    std::string want;
    for (const auto& n : end_tokens) want += (want.empty() ? "'" : " or '") + n + "'";
    fail("Unexpected end of template. Jinja was looking for the following tags: " + want + ".");
  }
  return body;
}

// Body up to one of end_tokens; the current token is then that end tag's name.
Body Parser::parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
  skip_op(":");
  expect(TokType::kBlockEnd, "end of statement block");
  Body body = subparse(end_tokens);
  if (drop_needle) take();
  return body;
}

StmtPtr Parser::parse_statement() {
  Guard g(this);
  if (cur().type != TokType::kName) fail("tag name expected");
  const std::string tag = cur().text;
  auto s = std::make_unique<Stmt>();
  s->line = cur().line;
  if (tag == "if") return parse_if(std::move(s));
  if (tag == "for") return parse_for(std::move(s));
  if (tag == "set") return parse_set(std::move(s));
  if (tag == "macro") return parse_macro(std::move(s));
  if (tag == "call") return parse_call_block(std::move(s));
  if (tag == "filter") {
    take();
    s->kind = StmtKind::kFilterBlock;
    s->filter = parse_filter(nullptr, true);
    s->bodies.push_back(parse_statements({"endfilter"}, true));
    return s;
  }
  if (tag == "with") return parse_with(std::move(s));
  if (tag == "generation") {  // transformers' AssistantTracker: a pass-through block
    take();
    s->kind = StmtKind::kScope;
    s->bodies.push_back(parse_statements({"endgeneration"}, true));
    return s;
  }
  if (tag == "print") {
    take();
    s->kind = StmtKind::kPrint;
    s->expr = parse_tuple(false, true, {}, false, false);
    return s;
  }
  if (tag == "break" || tag == "continue") {
    take();
    if (loop_depth_ == 0) fail("'" + tag + "' outside of a loop");
    s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    return s;
  }
  static const char* kUnsupported[] = {"block", "extends",    "include", "import",
                                       "from",  "autoescape", "raw"};
  for (const char* u : kUnsupported)
    if (tag == u) fail("tag '" + tag + "' is not supported");
  fail("Encountered unknown tag '" + tag + "'.");
}

StmtPtr Parser::parse_if(StmtPtr s) {
  take();
  s->kind = StmtKind::kIf;
  while (true) {
    s->conds.push_back(parse_tuple(false, false, {}, false, false));
    s->bodies.push_back(parse_statements({"elif", "else", "endif"}, false));
    const std::string t = take().text;
    if (t == "elif") continue;
    if (t == "else") s->bodies.push_back(parse_statements({"endif"}, true));
    return s;
  }
}

StmtPtr Parser::parse_for(StmtPtr s) {
  take();
  s->kind = StmtKind::kFor;
  s->target = parse_assign_target(true, false, {"in"}, false);
  if (!skip_name("in")) fail("expected 'in', got " + quoted(cur()));
  s->expr = parse_tuple(false, false, {"recursive"}, false, false);
  if (skip_name("if")) s->cond = parse_expression(true);
  if (is_name("recursive")) fail("recursive for loops are not supported");
  ++loop_depth_;
  s->bodies.push_back(parse_statements({"endfor", "else"}, false));
  --loop_depth_;
  if (take().text == "else") s->bodies.push_back(parse_statements({"endfor"}, true));
  return s;
}

StmtPtr Parser::parse_set(StmtPtr s) {
  take();
  s->target = parse_assign_target(true, false, {}, true);
  if (skip_op("=")) {
    s->kind = StmtKind::kSet;
    s->expr = parse_tuple(false, true, {}, false, false);
    return s;
  }
  s->kind = StmtKind::kSetBlock;
  if (is_op("|")) s->filter = parse_filter(nullptr, false);
  s->bodies.push_back(parse_statements({"endset"}, true));
  return s;
}

void Parser::parse_signature(Stmt* s) {
  expect_op("(");
  while (!is_op(")")) {
    if (!s->params.empty()) expect_op(",");
    s->params.push_back(expect_name());
    if (skip_op("=")) {
      s->defaults.push_back(parse_expression(true));
    } else if (!s->defaults.empty()) {
      fail("non-default argument follows default argument");
    }
  }
  expect_op(")");
}

StmtPtr Parser::parse_macro(StmtPtr s) {
  take();
  s->kind = StmtKind::kMacro;
  s->name = expect_name();
  parse_signature(s.get());
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->bodies.push_back(parse_statements({"endmacro"}, true));
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_call_block(StmtPtr s) {
  take();
  s->kind = StmtKind::kCallBlock;
  if (is_op("(")) parse_signature(s.get());
  s->expr = parse_expression(true);
  if (s->expr->kind != ExprKind::kCall) fail("expected call");
  const int saved = loop_depth_;
  loop_depth_ = 0;
  s->bodies.push_back(parse_statements({"endcall"}, true));
  loop_depth_ = saved;
  return s;
}

StmtPtr Parser::parse_with(StmtPtr s) {
  take();
  s->kind = StmtKind::kWith;
  while (cur().type != TokType::kBlockEnd) {
    if (!s->params.empty()) expect_op(",");
    s->params.push_back(expect_name());
    expect_op("=");
    s->defaults.push_back(parse_expression(true));
  }
  s->bodies.push_back(parse_statements({"endwith"}, true));
  return s;
}

ExprPtr Parser::parse_assign_target(bool with_tuple, bool name_only,
                                    const std::vector<std::string>& extra_end,
                                    bool with_namespace) {
  ExprPtr t;
  if (name_only) {
    t = node(ExprKind::kName, cur().line);
    t->name = expect_name();
    return done(std::move(t));
  }
  t = with_tuple ? parse_tuple(true, true, extra_end, false, with_namespace)
                 : parse_primary(with_namespace);
  auto assignable = [](const Expr& e) {
    return e.kind == ExprKind::kName || e.kind == ExprKind::kNsRef;
  };
  bool ok = assignable(*t);
  if (t->kind == ExprKind::kTuple)
    ok = std::all_of(t->kids.begin(), t->kids.end(),
                     [&](const ExprPtr& k) { return assignable(*k); });
  if (!ok) throw TemplateError("can't assign to this expression", t->line);
  return t;
}

namespace {

// jinja2 refuses unknown filters and tests when it compiles a template, except inside an `if`
// statement (directly, not in a nested loop or macro body) or an inline if-expression, where the
// error waits until the filter is actually applied.
void check_names(const Expr* e, bool soft) {
  if (!e) return;
  if (e->kind == ExprKind::kCondExpr) soft = true;
  if (!soft && e->kind == ExprKind::kFilter && !has_filter(e->name))
    throw TemplateError(unknown_filter_message(e->name), e->line);
  if (!soft && e->kind == ExprKind::kTest && !has_test(e->name))
    throw TemplateError(unknown_test_message(e->name), e->line);
  for (const auto& k : e->kids) check_names(k.get(), soft);
  for (const auto& kw : e->kwargs) check_names(kw.second.get(), soft);
}

void check_names(const Body& body, bool soft);

void check_names(const Stmt& s, bool soft) {
  const bool body_soft = s.kind == StmtKind::kIf ? true : (s.kind == StmtKind::kScope && soft);
  for (const ExprPtr* e : {&s.target, &s.expr, &s.cond, &s.filter}) check_names(e->get(), soft);
  for (const auto& c : s.conds) check_names(c.get(), soft || s.kind == StmtKind::kIf);
  for (const auto& d : s.defaults) check_names(d.get(), soft);
  for (const Body& b : s.bodies) check_names(b, body_soft);
}

void check_names(const Body& body, bool soft) {
  for (const auto& s : body) check_names(*s, soft);
}

}  // namespace

Body parse_template(std::string_view source) {
  Body body = Parser(lex_template(source)).parse();
  check_names(body, false);
  return body;
}

}  // namespace qwen35::tmpl::jinja
