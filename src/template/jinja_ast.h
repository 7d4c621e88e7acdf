// Syntax tree of a parsed template. Nodes are plain structs owned by unique_ptr; the tree is
// immutable after parsing and shared by every render of a ChatTemplate.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace qwen35::tmpl::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,     // value
  kName,      // name
  kNsRef,     // name.attr as an assignment target: name, attr
  kList,      // kids
  kTuple,     // kids
  kDict,      // kids: key, value, key, value...
  kGetattr,   // kids[0].name
  kGetitem,   // kids[0][kids[1]]
  kSlice,     // kids[0][kids[1]:kids[2]:kids[3]], null for absent parts
  kCall,      // kids[0](kids[1..], kwargs)
  kFilter,    // kids[0]|name(kids[1..], kwargs); kids[0] null in filter blocks
  kTest,      // kids[0] is name(kids[1..], kwargs)
  kNeg,       // -kids[0]
  kPos,       // +kids[0]
  kNot,       // not kids[0]
  kAnd,       // kids[0] and kids[1]
  kOr,        // kids[0] or kids[1]
  kBinary,    // kids[0] <name> kids[1]: + - * / // % **
  kConcat,    // kids joined with ~
  kCompare,   // kids[0] ops[0] kids[1] ops[1] kids[2]... (==, !=, <, <=, >, >=, in, notin)
  kCondExpr,  // kids[1] if kids[0] else kids[2] (kids[2] null: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;  // height of this subtree; the parser bounds it
  Value value;
  std::string name;
  std::string attr;
  std::vector<ExprPtr> kids;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
};

enum class StmtKind {
  kData,         // text
  kPrint,        // expr
  kIf,           // conds[i] -> bodies[i]; bodies.size() == conds.size() + 1 with an else
  kFor,          // target in expr [if cond] : bodies[0], else bodies[1]
  kSet,          // target = expr
  kSetBlock,     // target = bodies[0] rendered, through filter (may be null)
  kMacro,        // name(params = defaults) : bodies[0]
  kCallBlock,    // call expr with caller(params) = bodies[0]
  kFilterBlock,  // filter applied to bodies[0]
  kWith,         // params = defaults (assignments) : bodies[0]
  kScope,        // bodies[0] (generation blocks)
  kBreak,
  kContinue,
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  std::string name;
  ExprPtr target;
  ExprPtr expr;
  ExprPtr cond;
  ExprPtr filter;
  std::vector<ExprPtr> conds;
  std::vector<Body> bodies;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // kMacro/kCallBlock: for the last defaults.size() params
};

}  // namespace qwen35::tmpl::jinja
