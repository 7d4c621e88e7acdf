// Tree-walking interpreter of a parsed template. One Interpreter renders once; it is not
// thread-safe, but the syntax tree it walks is shared read-only between renders.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "template/jinja_ast.h"

namespace qwen35::tmpl::jinja {

// Work bounds: a template that loops or recurses without end, or builds huge strings, fails with
// a TemplateError instead of hanging or exhausting memory.
struct Limits {
  size_t max_output_bytes = size_t{64} << 20;  // also bounds every string value
  // Statements executed + loop iterations. A render of ChatTemplate may take max_steps plus
  // steps_per_input_value for each JSON value of its input (messages, tools, kwargs): the real
  // Qwen templates take ~3 steps per value (~25 per message), so a conversation of any size
  // renders, while a template that loops on a small input stops after ~0.2 s, not seconds.
  uint64_t max_steps = 200'000;
  uint64_t steps_per_input_value = 16;
  int max_call_depth = 64;                     // nested macro calls
  size_t max_list_items = 1'000'000;
  size_t max_total_bytes = size_t{1} << 30;  // all strings and lists built during one render
  int max_eval_depth = 500;                  // nested statements + expressions being evaluated
};

struct Frame {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Frame> parent;
};
using FramePtr = std::shared_ptr<Frame>;

class Interpreter {
 public:
  explicit Interpreter(const Limits& limits) : limits_(limits) {}
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` with `root` as the outermost scope (its parent chain holds the globals).
  std::string render(const Body& body, const FramePtr& root);

  Value call(const Value& fn, CallArgs args);
  Value call_macro(const Stmt& def, const FramePtr& closure, CallArgs args);

  // Fails when a string of `bytes` bytes / a list of `items` items would exceed the limits.
  void check_string(size_t bytes) const;
  void check_list(size_t items) const;
  // Counts `bytes` against max_total_bytes: bounds the memory and time a render can spend
  // building values.
  void charge(size_t bytes);
  // Macros capture their defining frame and may be stored in it, and a namespace may hold
  // itself: these reference cycles are broken when the render ends.
  void track(const FramePtr& frame) { tracked_frames_.push_back(frame); }
  void track(const Value& ns) { tracked_namespaces_.push_back(ns); }
  const Limits& limits() const { return limits_; }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const FramePtr& frame);
  Flow exec(const Stmt& s, const FramePtr& frame);
  Flow exec_for(const Stmt& s, const FramePtr& frame);
  void exec_call_block(const Stmt& s, const FramePtr& frame);
  std::string render_into(const Body& body, const FramePtr& frame);
  void assign(const Expr& target, const Value& v, const FramePtr& frame);

  Value eval(const Expr& e, const FramePtr& frame);
  Value eval_inner(const Expr& e, const FramePtr& frame);
  Value eval_slice(const Expr& e, const FramePtr& frame);
  Value eval_compare(const Expr& e, const FramePtr& frame);
  CallArgs eval_args(const Expr& e, size_t first_arg, const FramePtr& frame);
  Value lookup(const std::string& name, const FramePtr& frame) const;

  void step();
  void emit(std::string_view s);

  Limits limits_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  size_t charged_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
  std::vector<FramePtr> tracked_frames_;
  std::vector<Value> tracked_namespaces_;
  friend class DepthGuard;
};

// Python binary operators: + - * / // % ** on Values.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);

}  // namespace qwen35::tmpl::jinja
