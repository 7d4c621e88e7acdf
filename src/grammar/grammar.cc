#include "grammar/grammar.h"

#include <algorithm>
#include <functional>

namespace qwen35::grammar {

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
  return Sym{true, int32_t(rules_.size() - 1)};
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
  std::vector<uint8_t> mark(n, 0);  // 0 new, 1 on the path, 2 done
  std::function<bool(int32_t)> cyclic = [&](int32_t r) {
    mark[size_t(r)] = 1;
    for (int32_t c : left[size_t(r)]) {
      if (mark[size_t(c)] == 1) return true;
      if (mark[size_t(c)] == 0 && cyclic(c)) return true;
    }
    mark[size_t(r)] = 2;
    return false;
  };
  for (size_t r = 0; r < n; ++r)
    if (mark[r] == 0 && cyclic(int32_t(r))) return core::error("the grammar is left-recursive");
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
