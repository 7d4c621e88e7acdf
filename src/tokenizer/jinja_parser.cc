#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_lexer.h"

namespace qwen35::tokenizer::jinja {

namespace {

// Bounds the nesting of expressions and statements: deeper templates are refused rather than
// risking the stack in the parser or the interpreter.
constexpr int kMaxDepth = 128;

using Names = std::initializer_list<const char*>;

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
      if (++p->depth_ > kMaxDepth) p->fail("template nested too deeply");
    }
    ~Guard() { --p->depth_; }
    Parser* p;
  };

  [[noreturn]] void fail(const std::string& msg) const { throw TemplateError(msg, cur().line); }
  static std::string quoted(const Token& t) { return "'" + describe(t) + "'"; }

  const Token& cur() const { return toks_[std::min(pos_, toks_.size() - 1)]; }
  const Token& peek() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  Token take() {
    Token t = cur();
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
    if (e->depth > kMaxDepth) throw TemplateError("expression nested too deeply", e->line);
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

  Body subparse(const std::vector<std::string>& end_tokens) {
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
  Body parse_statements(const std::vector<std::string>& end_tokens, bool drop_needle) {
    skip_op(":");
    expect(TokType::kBlockEnd, "end of statement block");
    Body body = subparse(end_tokens);
    if (drop_needle) take();
    return body;
  }

  StmtPtr parse_statement() {
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
    static const char* kUnsupported[] = {"block", "extends", "include", "import",
                                         "from",  "autoescape", "raw"};
    for (const char* u : kUnsupported)
      if (tag == u) fail("tag '" + tag + "' is not supported");
    fail("Encountered unknown tag '" + tag + "'.");
  }

  StmtPtr parse_if(StmtPtr s) {
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

  StmtPtr parse_for(StmtPtr s) {
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

  StmtPtr parse_set(StmtPtr s) {
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

  void parse_signature(Stmt* s) {
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

  StmtPtr parse_macro(StmtPtr s) {
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

  StmtPtr parse_call_block(StmtPtr s) {
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

  StmtPtr parse_with(StmtPtr s) {
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

  ExprPtr parse_assign_target(bool with_tuple, bool name_only,
                              const std::vector<std::string>& extra_end, bool with_namespace) {
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
      ok = std::all_of(t->kids.begin(), t->kids.end(), [&](const ExprPtr& k) {
        return assignable(*k);
      });
    if (!ok) throw TemplateError("can't assign to this expression", t->line);
    return t;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr) {
    Guard g(this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
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

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const int line = take().line;
      left = binary(ExprKind::kOr, line, std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const int line = take().line;
      left = binary(ExprKind::kAnd, line, std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Guard g(this);
      auto e = node(ExprKind::kNot, take().line);
      e->kids.push_back(parse_not());
      return done(std::move(e));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token t = take();
      left = binary(ExprKind::kBinary, t.line, std::move(left), parse_concat(), t.text);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = cur().line;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    auto e = node(ExprKind::kConcat, line);
    e->kids.push_back(std::move(first));
    while (skip_op("~")) e->kids.push_back(parse_math2());
    return done(std::move(e));
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token t = take();
      left = binary(ExprKind::kBinary, t.line, std::move(left), parse_pow(), t.text);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token t = take();
      left = binary(ExprKind::kBinary, t.line, std::move(left), parse_unary(true), t.text);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary(bool with_namespace) {
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
      e->value = t.type == TokType::kInteger ? Value::integer(t.int_value)
                                             : Value::number(t.float_value);
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

  ExprPtr parse_list_or_dict(ExprKind kind, const char* close) {
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

  bool is_tuple_end(const std::vector<std::string>& extra_end) const {
    if (cur().type == TokType::kVarEnd || cur().type == TokType::kBlockEnd || is_op(")"))
      return true;
    return !extra_end.empty() && is_name_in(extra_end);
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra_end,
                      bool explicit_parens, bool with_namespace) {
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

  ExprPtr parse_postfix(ExprPtr e) {
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

  ExprPtr parse_filter_expr(ExprPtr e) {
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

  ExprPtr parse_subscript(ExprPtr obj) {
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
  ExprPtr parse_subscribed() {
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

  void parse_call_args(Expr* e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(ExprKind::kCall, cur().line);
    e->kids.push_back(std::move(callee));
    parse_call_args(e.get());
    return done(std::move(e));
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr obj, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) take();
      start_inline = false;
      const int line = cur().line;
      auto e = node(ExprKind::kFilter, line);
      e->name = dotted_name();
      if (!has_filter(e->name)) throw TemplateError(unknown_filter_message(e->name), line);
      e->kids.push_back(std::move(obj));
      if (is_op("(")) parse_call_args(e.get());
      obj = done(std::move(e));
    }
    return obj;
  }

  ExprPtr parse_test(ExprPtr obj) {
    const int line = take().line;
    const bool negated = skip_name("not");
    auto e = node(ExprKind::kTest, line);
    e->name = dotted_name();
    if (!has_test(e->name)) throw TemplateError(unknown_test_message(e->name), line);
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

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Body parse_template(std::string_view source) { return Parser(lex_template(source)).parse(); }

}  // namespace qwen35::tokenizer::jinja
