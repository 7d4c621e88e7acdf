#include "template/jinja_interp.h"

#include <algorithm>

#include "template/jinja_builtins.h"
#include "template/jinja_pystr.h"

namespace qwen35::tmpl::jinja {

namespace {

class Macro : public Callable {
 public:
  Macro(const Stmt* def, FramePtr closure) : def_(def), closure_(std::move(closure)) {}
  Value call(Interpreter& in, CallArgs args) const override {
    return in.call_macro(*def_, closure_, std::move(args));
  }
  std::string name() const override { return def_->name.empty() ? "caller" : def_->name; }

 private:
  const Stmt* def_;
  FramePtr closure_;
};

class LoopCycle : public Callable {
 public:
  explicit LoopCycle(size_t index) : index_(index) {}
  Value call(Interpreter&, CallArgs args) const override {
    if (args.pos.empty()) throw TemplateError("TypeError: no items for cycling given");
    return args.pos[index_ % args.pos.size()];
  }
  std::string name() const override { return "loop.cycle"; }

 private:
  size_t index_;
};

Value make_loop(size_t i, const std::vector<Value>& items) {
  const size_t n = items.size();
  const auto to_i = [](size_t x) { return Value::integer(static_cast<int64_t>(x)); };
  Dict d;
  d.set("index0", to_i(i));
  d.set("index", to_i(i + 1));
  d.set("revindex0", to_i(n - i - 1));
  d.set("revindex", to_i(n - i));
  d.set("first", Value::boolean(i == 0));
  d.set("last", Value::boolean(i + 1 == n));
  d.set("length", to_i(n));
  d.set("depth", to_i(1));
  d.set("depth0", to_i(0));
  if (i > 0) d.set("previtem", items[i - 1]);
  if (i + 1 < n) d.set("nextitem", items[i + 1]);
  d.set("cycle", Value::callable(std::make_shared<LoopCycle>(i)));
  return Value::dict(std::move(d));
}

}  // namespace

// A macro holds its defining frame and that frame holds the macro; a namespace may hold itself.
// Emptying every such frame and namespace when the render ends (normally or by an error) breaks
// these reference cycles, so nothing of a render outlives it.
Interpreter::~Interpreter() {
  for (const FramePtr& f : tracked_frames_) f->vars.clear();
  for (const Value& ns : tracked_namespaces_) ns.ns().clear();
}

std::string Interpreter::render(const Body& body, const FramePtr& root) {
  return render_into(body, root);
}

void Interpreter::check_string(size_t bytes) const {
  if (bytes > limits_.max_output_bytes)
    throw TemplateError::limit("string of " + std::to_string(bytes) +
                               " bytes exceeds the limit of " +
                               std::to_string(limits_.max_output_bytes));
}

void Interpreter::check_list(size_t items) const {
  if (items > limits_.max_list_items)
    throw TemplateError::limit("list of " + std::to_string(items) + " items exceeds the limit of " +
                               std::to_string(limits_.max_list_items));
}

void Interpreter::charge(size_t bytes) {
  charged_ += bytes;
  if (charged_ > limits_.max_total_bytes)
    throw TemplateError::limit("template built more than " +
                               std::to_string(limits_.max_total_bytes) + " bytes of values");
}

// Bounds the C++ recursion of the evaluator (nested statements, expressions and macro calls).
class DepthGuard {
 public:
  explicit DepthGuard(Interpreter* in) : in_(in) {
    if (++in_->eval_depth_ > in_->limits_.max_eval_depth) {
      --in_->eval_depth_;
      throw TemplateError::limit("template evaluation nested too deeply");
    }
  }
  ~DepthGuard() { --in_->eval_depth_; }
  DepthGuard(const DepthGuard&) = delete;
  DepthGuard& operator=(const DepthGuard&) = delete;

 private:
  Interpreter* in_;
};

void Interpreter::step() {
  if (++steps_ > limits_.max_steps)
    throw TemplateError::limit("template exceeded " + std::to_string(limits_.max_steps) +
                               " steps (endless loop?)");
}

void Interpreter::emit(std::string_view s) {
  check_string(out_->size() + s.size());
  charge(s.size());
  out_->append(s);
}

std::string Interpreter::render_into(const Body& body, const FramePtr& frame) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body, frame);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const FramePtr& frame) {
  for (const auto& s : body) {
    const Flow f = exec(*s, frame);
    if (f != Flow::kNormal) return f;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const FramePtr& frame) {
  step();
  DepthGuard guard(this);
  try {
    switch (s.kind) {
      case StmtKind::kData:
        emit(s.text);
        break;
      case StmtKind::kPrint:
        emit(to_str(eval(*s.expr, frame)));
        break;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conds.size(); ++i)
          if (truthy(eval(*s.conds[i], frame))) return exec_body(s.bodies[i], frame);
        if (s.bodies.size() > s.conds.size()) return exec_body(s.bodies.back(), frame);
        break;
      case StmtKind::kFor:
        return exec_for(s, frame);
      case StmtKind::kSet:
        assign(*s.target, eval(*s.expr, frame), frame);
        break;
      case StmtKind::kSetBlock: {
        Value v =
            Value::string(render_into(s.bodies[0], std::make_shared<Frame>(Frame{{}, frame})));
        if (s.filter) {
          // The filter chain was parsed with an empty operand: feed the block's text in.
          std::vector<const Expr*> chain;
          for (const Expr* f = s.filter.get(); f; f = f->kids[0].get()) chain.push_back(f);
          for (auto it = chain.rbegin(); it != chain.rend(); ++it)
            v = apply_filter(*this, (*it)->name, v, eval_args(**it, 1, frame));
        }
        assign(*s.target, v, frame);
        break;
      }
      case StmtKind::kMacro:
        frame->vars[s.name] = Value::callable(std::make_shared<Macro>(&s, frame));
        track(frame);
        break;
      case StmtKind::kCallBlock:
        exec_call_block(s, frame);
        break;
      case StmtKind::kFilterBlock: {
        Value v = Value::string(render_into(s.bodies[0], frame));
        std::vector<const Expr*> chain;
        for (const Expr* f = s.filter.get(); f; f = f->kids[0].get()) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it)
          v = apply_filter(*this, (*it)->name, v, eval_args(**it, 1, frame));
        emit(to_str(v));
        break;
      }
      case StmtKind::kWith: {
        auto inner = std::make_shared<Frame>(Frame{{}, frame});
        for (size_t i = 0; i < s.params.size(); ++i)
          inner->vars[s.params[i]] = eval(*s.defaults[i], frame);
        return exec_body(s.bodies[0], inner);
      }
      case StmtKind::kScope:
        return exec_body(s.bodies[0], frame);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
  } catch (TemplateError& e) {
    e.set_line_if_unset(s.line);
    throw;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const FramePtr& frame) {
  std::vector<Value> items = iterate(eval(*s.expr, frame));
  if (s.cond) {
    std::vector<Value> kept;
    for (Value& v : items) {
      step();
      auto f = std::make_shared<Frame>(Frame{{}, frame});
      assign(*s.target, v, f);
      if (truthy(eval(*s.cond, f))) kept.push_back(std::move(v));
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    step();
    auto f = std::make_shared<Frame>(Frame{{}, frame});
    assign(*s.target, items[i], f);
    f->vars["loop"] = make_loop(i, items);
    if (exec_body(s.bodies[0], f) == Flow::kBreak) break;
  }
  if (items.empty() && s.bodies.size() > 1)
    return exec_body(s.bodies[1], std::make_shared<Frame>(Frame{{}, frame}));
  return Flow::kNormal;
}

void Interpreter::exec_call_block(const Stmt& s, const FramePtr& frame) {
  const Expr& call = *s.expr;
  Value fn = eval(*call.kids[0], frame);
  CallArgs args = eval_args(call, 1, frame);
  args.kw.emplace_back("caller", Value::callable(std::make_shared<Macro>(&s, frame)));
  track(frame);
  emit(to_str(this->call(fn, std::move(args))));
}

Value Interpreter::call(const Value& fn, CallArgs args) {
  if (fn.is_undefined()) require_defined(fn);
  if (!fn.is_callable())
    throw TemplateError("TypeError: '" + type_name(fn) + "' object is not callable");
  return fn.fn().call(*this, std::move(args));
}

Value Interpreter::call_macro(const Stmt& def, const FramePtr& closure, CallArgs args) {
  const std::string name = def.name.empty() ? "caller" : def.name;
  if (args.pos.size() > def.params.size())
    throw TemplateError("TypeError: macro '" + name + "' takes not more than " +
                        std::to_string(def.params.size()) + " argument(s)");
  if (call_depth_ >= limits_.max_call_depth)
    throw TemplateError::limit("maximum macro call depth (" +
                               std::to_string(limits_.max_call_depth) + ") exceeded");
  auto f = std::make_shared<Frame>(Frame{{}, closure});
  for (auto& [key, value] : args.kw) {
    const bool known =
        key == "caller" || std::find(def.params.begin(), def.params.end(), key) != def.params.end();
    if (!known)
      throw TemplateError("TypeError: macro '" + name + "' takes no keyword argument '" + key +
                          "'");
  }
  const size_t first_default = def.params.size() - def.defaults.size();
  for (size_t i = 0; i < def.params.size(); ++i) {
    const std::string& p = def.params[i];
    const auto kw =
        std::find_if(args.kw.begin(), args.kw.end(), [&](const auto& kv) { return kv.first == p; });
    if (i < args.pos.size()) {
      if (kw != args.kw.end())
        throw TemplateError("TypeError: macro '" + name + "' got multiple values for argument '" +
                            p + "'");
      f->vars[p] = args.pos[i];
    } else if (kw != args.kw.end()) {
      f->vars[p] = kw->second;
    } else if (i >= first_default) {
      f->vars[p] = eval(*def.defaults[i - first_default], f);
    } else {
      f->vars[p] = Value::undefined("'" + p + "' is undefined");
    }
  }
  for (auto& [key, value] : args.kw)
    if (key == "caller") f->vars["caller"] = value;
  ++call_depth_;
  std::string text;
  try {
    text = render_into(def.bodies[0], f);
  } catch (...) {
    --call_depth_;
    throw;
  }
  --call_depth_;
  return Value::string(std::move(text));
}

void Interpreter::assign(const Expr& target, const Value& v, const FramePtr& frame) {
  if (target.kind == ExprKind::kName) {
    frame->vars[target.name] = v;
  } else if (target.kind == ExprKind::kNsRef) {
    const Value ns = lookup(target.name, frame);
    if (!ns.is_namespace())
      throw TemplateError("cannot assign attribute on non-namespace object", target.line);
    ns.ns().set(target.attr, v);
  } else {
    const std::vector<Value> items = iterate(v);
    const size_t want = target.kids.size();
    if (items.size() > want)
      throw TemplateError(
          "ValueError: too many values to unpack (expected " + std::to_string(want) + ")",
          target.line);
    if (items.size() < want)
      throw TemplateError("ValueError: not enough values to unpack (expected " +
                              std::to_string(want) + ", got " + std::to_string(items.size()) + ")",
                          target.line);
    for (size_t i = 0; i < want; ++i) assign(*target.kids[i], items[i], frame);
  }
}

Value Interpreter::lookup(const std::string& name, const FramePtr& frame) const {
  for (const Frame* f = frame.get(); f; f = f->parent.get()) {
    const auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first_arg, const FramePtr& frame) {
  CallArgs args;
  for (size_t i = first_arg; i < e.kids.size(); ++i) args.pos.push_back(eval(*e.kids[i], frame));
  for (const auto& [key, x] : e.kwargs) args.kw.emplace_back(key, eval(*x, frame));
  return args;
}

Value Interpreter::eval(const Expr& e, const FramePtr& frame) {
  DepthGuard guard(this);
  try {
    return eval_inner(e, frame);
  } catch (TemplateError& err) {
    err.set_line_if_unset(e.line);
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e, const FramePtr& frame) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.value;
    case ExprKind::kName:
      return lookup(e.name, frame);
    case ExprKind::kNsRef:
      return get_attr(lookup(e.name, frame), e.attr);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const auto& k : e.kids) items.push_back(eval(*k, frame));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.kids.size(); i += 2) {
        const Value k = eval(*e.kids[i], frame);
        if (!k.is_string()) throw TemplateError("dict keys other than strings are not supported");
        d.set(k.str(), eval(*e.kids[i + 1], frame));
      }
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetattr:
      return get_attr(eval(*e.kids[0], frame), e.name);
    case ExprKind::kGetitem:
      return get_item(eval(*e.kids[0], frame), eval(*e.kids[1], frame));
    case ExprKind::kSlice:
      return eval_slice(e, frame);
    case ExprKind::kCall: {
      Value fn = eval(*e.kids[0], frame);
      return call(fn, eval_args(e, 1, frame));
    }
    case ExprKind::kFilter:
      return apply_filter(*this, e.name, eval(*e.kids[0], frame), eval_args(e, 1, frame));
    case ExprKind::kTest:
      return Value::boolean(
          apply_test(*this, e.name, eval(*e.kids[0], frame), eval_args(e, 1, frame)));
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = eval(*e.kids[0], frame);
      require_defined(v);
      if (!v.is_number())
        throw TemplateError(std::string("TypeError: bad operand type for unary ") +
                            (e.kind == ExprKind::kNeg ? "-" : "+") + ": '" + type_name(v) + "'");
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value::integer(v.as_int()) : v;
      if (v.is_float()) return Value::number(-v.as_double());
      if (v.as_int() == INT64_MIN) throw TemplateError("integer overflow");
      return Value::integer(-v.as_int());
    }
    case ExprKind::kNot:
      return Value::boolean(!truthy(eval(*e.kids[0], frame)));
    case ExprKind::kAnd: {
      Value a = eval(*e.kids[0], frame);
      return truthy(a) ? eval(*e.kids[1], frame) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.kids[0], frame);
      return truthy(a) ? a : eval(*e.kids[1], frame);
    }
    case ExprKind::kBinary:
      return binary_op(*this, e.name, eval(*e.kids[0], frame), eval(*e.kids[1], frame));
    case ExprKind::kConcat: {
      std::string s;
      for (const auto& k : e.kids) {
        s += to_str(eval(*k, frame));
        check_string(s.size());
      }
      charge(s.size());
      return Value::string(std::move(s));
    }
    case ExprKind::kCompare:
      return eval_compare(e, frame);
    case ExprKind::kCondExpr:
      if (truthy(eval(*e.kids[0], frame))) return eval(*e.kids[1], frame);
      if (e.kids[2]) return eval(*e.kids[2], frame);
      return Value::undefined(
          "the inline if-expression evaluated to false and no else section "
          "was defined");
  }
  return Value();
}

Value Interpreter::eval_compare(const Expr& e, const FramePtr& frame) {
  Value left = eval(*e.kids[0], frame);
  for (size_t i = 0; i < e.ops.size(); ++i) {
    Value right = eval(*e.kids[i + 1], frame);
    const std::string& op = e.ops[i];
    bool r;
    if (op == "==") {
      r = equals(left, right);
    } else if (op == "!=") {
      r = !equals(left, right);
    } else if (op == "in" || op == "notin") {
      r = apply_test(*this, "in", left, CallArgs{{right}, {}});
      if (op == "notin") r = !r;
    } else {
      r = compare(left, right, op);
    }
    if (!r) return Value::boolean(false);
    left = std::move(right);
  }
  return Value::boolean(true);
}

}  // namespace qwen35::tmpl::jinja
