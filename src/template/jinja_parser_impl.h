// The parser's class, shared by jinja_parser.cc (statements) and jinja_parse_expr.cc
// (expressions). Internal to the chat-template interpreter.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace qwen35::tmpl::jinja {

// Bounds the nesting of expressions and statements: deeper templates are refused rather than
// risking the stack in the parser or the interpreter.
constexpr int kMaxParseDepth = 128;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  Body parse() {
    Body body = subparse({});
    if (cur().type != TokType::kEof) fail("unexpected " + quoted(cur()));
    return body;
  }

 private:
  struct Guard {
    explicit Guard(Parser* p) : p(p) {
      if (++p->depth_ > kMaxParseDepth) p->fail("template nested too deeply");
    }
    ~Guard() { --p->depth_; }
    Parser* p;
  };

  [[noreturn]] void fail(const std::string& msg) const { throw TemplateError(msg, cur().line); }
  static std::string quoted(const Token& t) {
    std::string q(1, '\'');
    q.append(describe(t)).push_back('\'');
    return q;
  }

  const Token& cur() const { return toks_[std::min(pos_, toks_.size() - 1)]; }
  const Token& peek() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  // The current token; advances past it (the vector never changes, so the reference stays valid).
  const Token& take() {
    const Token& t = cur();
    if (pos_ < toks_.size() - 1) ++pos_;
    return t;
  }
  bool is_op(const char* op) const { return cur().type == TokType::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == TokType::kName && cur().text == n; }
  bool is_name_in(const std::vector<std::string>& names) const {
    return cur().type == TokType::kName &&
           std::find(names.begin(), names.end(), cur().text) != names.end();
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    take();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    take();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected token '") + op + "', got " + quoted(cur()));
  }
  void expect(TokType type, const char* what) {
    if (cur().type != type) fail(std::string("expected ") + what + ", got " + quoted(cur()));
    take();
  }
  std::string expect_name() {
    if (cur().type != TokType::kName) fail("expected name, got " + quoted(cur()));
    return take().text;
  }

  ExprPtr node(ExprKind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }
  // Records the subtree height once the children are attached.
  ExprPtr done(ExprPtr e) {
    int d = 0;
    for (const auto& k : e->kids)
      if (k) d = std::max(d, k->depth);
    for (const auto& kw : e->kwargs) d = std::max(d, kw.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxParseDepth) throw TemplateError("expression nested too deeply", e->line);
    return e;
  }
  ExprPtr binary(ExprKind kind, int line, ExprPtr a, ExprPtr b, std::string name = {}) {
    auto e = node(kind, line);
    e->name = std::move(name);
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return done(std::move(e));
  }

  // ---- statements ----

  // ---- statements (jinja_parser.cc) ----

  Body subparse(const std::vector<std::string>& end_tokens);
  // Body up to one of end_tokens; the current token is then that end tag's name.
  Body parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle);
  StmtPtr parse_statement();
  StmtPtr parse_if(StmtPtr s);
  StmtPtr parse_for(StmtPtr s);
  StmtPtr parse_set(StmtPtr s);
  void parse_signature(Stmt* s);
  StmtPtr parse_macro(StmtPtr s);
  StmtPtr parse_call_block(StmtPtr s);
  StmtPtr parse_with(StmtPtr s);
  ExprPtr parse_assign_target(bool with_tuple, bool name_only,
                              const std::vector<std::string>& extra_end, bool with_namespace);

  // ---- expressions (jinja_parse_expr.cc) ----

  // ---- expressions ----
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_condexpr();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary(bool with_namespace);
  ExprPtr parse_list_or_dict(ExprKind kind, const char* close);
  bool is_tuple_end(const std::vector<std::string>& extra_end) const;
  ExprPtr parse_tuple(bool simplified, bool with_condexpr,
                      const std::vector<std::string>& extra_end, bool explicit_parens,
                      bool with_namespace);
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  // An index or a slice [start:stop:step]; a slice is returned as kSlice without its object.
  ExprPtr parse_subscribed();
  void parse_call_args(Expr* e);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr obj, bool start_inline);
  ExprPtr parse_test(ExprPtr obj);

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace qwen35::tmpl::jinja
