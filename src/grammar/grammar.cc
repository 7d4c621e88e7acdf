#include "grammar/grammar.h"

#include <algorithm>

namespace qwen35::grammar {
namespace {

// Whether the graph of leftmost references has a cycle: a depth-first search with an explicit
// stack (left chains, such as a repeat of something that may be empty, can be long).
bool left_recursive(const std::vector<std::vector<int32_t>>& left) {
  const size_t n = left.size();
  std::vector<uint8_t> mark(n, 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> stack;  // rule, next edge
  for (size_t r0 = 0; r0 < n; ++r0) {
    if (mark[r0]) continue;
    mark[r0] = 1;
    stack.assign(1, {int32_t(r0), 0});
    while (!stack.empty()) {
      auto& [r, e] = stack.back();
      if (e == left[size_t(r)].size()) {
        mark[size_t(r)] = 2;
        stack.pop_back();
        continue;
      }
      const int32_t c = left[size_t(r)][e++];
      if (mark[size_t(c)] == 1) return true;
      if (mark[size_t(c)] == 0) {
        mark[size_t(c)] = 1;
        stack.emplace_back(c, 0);
      }
    }
  }
  return false;
}

}  // namespace

size_t Grammar::bytes() const {
  size_t n = sizeof(Grammar) + elems_.size() * (sizeof(Elem) + sizeof(int64_t)) +
             sets_.size() * sizeof(ByteSet) + min_len_.size() * sizeof(int64_t);
  for (const auto& a : alts_) n += sizeof(a) + a.size() * sizeof(int32_t);
  return n;
}

Sym Builder::bytes(const ByteSet& s) {
  sets_.push_back(s);
  ++size_;
  return Sym{false, int32_t(sets_.size() - 1)};
}

Sym Builder::byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

Sym Builder::range(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(size_t(b));
  return bytes(s);
}

Sym Builder::rule() {
  rules_.emplace_back();
  unit_.push_back(0);
  return Sym{true, int32_t(rules_.size() - 1)};
}

void Builder::unit(Sym r) {
  if (r.rule) unit_[size_t(r.id)] = 1;
}

// Depth-first over the rule references with an explicit stack (a chain of rules, such as a
// long repeat's, may be as deep as the grammar is large). A rule's count is the sum over its
// alternatives of their symbols' counts; a reference to a rule still on the stack (recursion)
// counts 1.
int64_t Builder::states(Sym s) const {
  if (!s.rule) return 1;
  auto add = [](int64_t a, int64_t b) { return std::min(kInf, a + b); };
  constexpr int64_t kUnknown = -1, kOnStack = -2;
  std::vector<int64_t> val(rules_.size(), kUnknown);
  struct Frame {
    int32_t rule;
    size_t alt = 0, sym = 0;
    int64_t acc = 0;
  };
  std::vector<Frame> stack{{s.id}};
  val[size_t(s.id)] = kOnStack;
  while (!stack.empty()) {
    Frame f = stack.back();
    const auto& alts = rules_[size_t(f.rule)];
    bool pushed = false;
    if (unit_[size_t(f.rule)]) f.acc = 1, f.alt = alts.size();
    while (f.alt < alts.size() && !pushed) {
      if (f.sym == alts[f.alt].size()) {
        ++f.alt, f.sym = 0;
        continue;
      }
      const Sym x = alts[f.alt][f.sym];
      const int64_t v = x.rule ? val[size_t(x.id)] : 1;
      if (v == kUnknown) {  // visit it first; this symbol is counted when the frame resumes
        val[size_t(x.id)] = kOnStack;
        pushed = true;
        continue;
      }
      f.acc = add(f.acc, v == kOnStack ? 1 : v);
      ++f.sym;
    }
    if (pushed) {
      stack.back() = f;
      stack.push_back({alts[f.alt][f.sym].id});
      continue;
    }
    val[size_t(f.rule)] = f.acc;
    stack.pop_back();
  }
  return val[size_t(s.id)];
}

std::string Builder::too_many_states(int64_t states) const {
  const std::string n = states >= kInf ? "too many" : "about " + std::to_string(states);
  return n + " states once its repeats and properties are written out (nested repeats "
             "multiply their counts), over this server's bound of " +
         std::to_string(max_states_) + " (--grammar-max-states)";
}

void Builder::add(Sym r, std::vector<Sym> seq) {
  size_ += seq.size() + 1;
  rules_[size_t(r.id)].push_back(std::move(seq));
}

Sym Builder::seq(std::vector<Sym> parts) {
  if (parts.size() == 1) return parts[0];
  Sym r = rule();
  add(r, std::move(parts));
  return r;
}

Sym Builder::alt(std::vector<Sym> options) {
  if (options.size() == 1) return options[0];
  Sym r = rule();
  for (Sym o : options) add(r, {o});
  return r;
}

Sym Builder::literal(std::string_view text) {
  std::vector<Sym> parts;
  for (unsigned char c : text) parts.push_back(byte(c));
  if (parts.empty()) return empty();
  return seq(std::move(parts));
}

Sym Builder::empty() {
  if (empty_.id < 0) {
    empty_ = rule();
    add(empty_, {});
  }
  return empty_;
}

Sym Builder::opt(Sym x) {
  Sym r = rule();
  add(r, {});
  add(r, {x});
  return r;
}

Sym Builder::star(Sym x) {
  // Right recursion: the matcher's tail calls keep the stack flat.
  Sym r = rule();
  add(r, {});
  add(r, {x, r});
  return r;
}

Sym Builder::plus(Sym x) { return seq({x, star(x)}); }

Sym Builder::repeat(Sym x, int64_t min, int64_t max) {
  std::vector<Sym> parts;
  for (int64_t i = 0; i < min && !too_large(); ++i) parts.push_back(x);
  if (max < 0) {
    parts.push_back(star(x));
  } else if (max > min) {
    // T_k = "" | x T_{k-1}: at most max - min more.
    Sym tail = opt(x);
    for (int64_t k = 1; k < max - min && !too_large(); ++k) {
      Sym r = rule();
      add(r, {});
      add(r, {x, tail});
      tail = r;
    }
    parts.push_back(tail);
  }
  if (parts.empty()) return empty();
  return seq(std::move(parts));
}

Sym Builder::list(Sym x, Sym sep, int64_t min, int64_t max) {
  const Sym more = seq({sep, x});
  if (max == 0) return empty();
  const Sym nonempty =
      seq({x, repeat(more, std::max<int64_t>(min, 1) - 1, max < 0 ? -1 : max - 1)});
  return min > 0 ? nonempty : opt(nonempty);
}

core::Result<Grammar> Builder::finish(Sym root) {
  if (too_large())
    return core::error("the grammar is too large (over " + std::to_string(kMaxSymbols) +
                       " symbols)");
  Grammar g;
  if (!root.rule) {
    Sym r = rule();
    add(r, {root});
    root = r;
  }
  g.states_ = states(root);
  if (g.states_ > max_states_)
    return core::error("the format is too large: " + too_many_states(g.states_));
  const size_t n = rules_.size();
  // Minimal lengths by fixpoint (recursive rules start infinite).
  std::vector<int64_t> len(n, kInf);
  auto sym_len = [&](Sym s) { return s.rule ? len[size_t(s.id)] : int64_t(1); };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n; ++r)
      for (const auto& a : rules_[r]) {
        int64_t l = 0;
        for (Sym s : a) l = std::min(kInf, l + sym_len(s));
        if (l < len[r]) len[r] = l, changed = true;
      }
  }
  if (len[size_t(root.id)] >= kInf) return core::error("the schema admits no value");
  // Left recursion: rule r reaches itself through symbols at the left of an alternative
  // (a symbol is at the left when everything before it can be empty).
  std::vector<std::vector<int32_t>> left(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : rules_[r])
      for (Sym s : a) {
        if (!s.rule) break;
        left[r].push_back(s.id);
        if (len[size_t(s.id)] != 0) break;
      }
  if (left_recursive(left)) return core::error("the grammar is left-recursive");
  // Flat table.
  g.alts_.resize(n);
  for (size_t r = 0; r < n; ++r)
    for (const auto& a : rules_[r]) {
      g.alts_[r].push_back(int32_t(g.elems_.size()));
      for (Sym s : a) g.elems_.push_back({s.rule ? Grammar::kRule : Grammar::kBytes, s.id});
      g.elems_.push_back({Grammar::kEnd, -1});
    }
  g.rest_.assign(g.elems_.size(), 0);
  for (size_t i = g.elems_.size(); i-- > 0;) {
    const auto& e = g.elems_[i];
    if (e.kind == Grammar::kEnd) continue;
    const int64_t l = e.kind == Grammar::kBytes ? 1 : len[size_t(e.id)];
    g.rest_[i] = std::min(kInf, l + g.rest_[i + 1]);
  }
  g.sets_ = std::move(sets_);
  g.min_len_ = std::move(len);
  g.root_ = root.id;
  return g;
}

}  // namespace qwen35::grammar
