#include "grammar/matcher.h"

#include <algorithm>
#include <numeric>

namespace qwen35::grammar {
namespace {

// The mask cache holds at most this many configurations' masks (a mask is vocab/8 bytes: 31 KB
// at Qwen3.5's vocabulary); past it the cache starts over.
constexpr size_t kMaxMasks = 2048;

}  // namespace

Vocab::Vocab(std::vector<std::string> bytes, const std::vector<bool>& usable)
    : bytes_(std::move(bytes)), usable_(bytes_.size(), false) {
  for (size_t i = 0; i < bytes_.size(); ++i)
    usable_[i] = i < usable.size() && usable[i] && !bytes_[i].empty();
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (usable_[i]) sorted_.push_back(int32_t(i));
  std::sort(sorted_.begin(), sorted_.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] < bytes_[size_t(b)] || (bytes_[size_t(a)] == bytes_[size_t(b)] && a < b);
  });
  lcp_.assign(sorted_.size(), 0);
  for (size_t i = 1; i < sorted_.size(); ++i) {
    const std::string& p = bytes_[size_t(sorted_[i - 1])];
    const std::string& q = bytes_[size_t(sorted_[i])];
    uint32_t l = 0;
    while (l < p.size() && l < q.size() && p[l] == q[l]) ++l;
    lcp_[i] = l;
  }
  for (int32_t id : sorted_) {
    ids_.emplace(bytes_[size_t(id)], id);
    max_len_ = std::max(max_len_, bytes_[size_t(id)].size());
  }
}

int32_t Vocab::longest_prefix(std::string_view s) const {
  for (size_t k = std::min(s.size(), max_len_); k > 0; --k)
    if (auto it = ids_.find(s.substr(0, k)); it != ids_.end()) return it->second;
  return -1;
}

Automaton::Automaton(Grammar g, std::shared_ptr<const Vocab> vocab, std::vector<int32_t> end_ids)
    : g_(std::move(g)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)) {
  std::vector<int32_t> stacks;
  bool complete = false;
  for (int32_t a : g_.alts(g_.root())) expand(node(a, -1), &stacks, &complete);
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  initial_ = intern(std::move(stacks), complete);
}

int32_t Automaton::node(int32_t pos, int32_t next) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(next + 1);
  auto [it, fresh] = node_ids_.try_emplace(key, int32_t(nodes_.size()));
  if (fresh) {
    nodes_.push_back({pos, next});
    node_dist_.push_back(std::min(kInf, g_.rest(pos) + (next < 0 ? 0 : node_dist_[size_t(next)])));
    seen_.push_back(0);
  }
  return it->second;
}

// Adds to *out the stacks that node n resolves to (tops that are byte sets), and sets *complete
// when it can end the whole grammar. Rule references are pushed, ends popped; a reference that
// is the last symbol of its alternative returns straight to its caller's continuation (tail
// call), so right recursion does not deepen the stack.
void Automaton::expand(int32_t n, std::vector<int32_t>* out, bool* complete) {
  if (++stamp_ == 0) {
    std::fill(seen_.begin(), seen_.end(), 0);
    stamp_ = 1;
  }
  work_.clear();
  work_.push_back(n);
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    if (seen_[size_t(id)] == stamp_) continue;
    seen_[size_t(id)] = stamp_;
    const Node nd = nodes_[size_t(id)];
    const Grammar::Elem& e = g_.at(nd.pos);
    if (e.kind == Grammar::kBytes) {
      out->push_back(id);
    } else if (e.kind == Grammar::kEnd) {
      if (nd.next < 0) *complete = true;
      else work_.push_back(nd.next);
    } else {
      const int32_t ret = g_.at(nd.pos + 1).kind == Grammar::kEnd ? nd.next : node(nd.pos + 1, nd.next);
      for (int32_t a : g_.alts(e.id)) work_.push_back(node(a, ret));
    }
  }
}

int32_t Automaton::intern(std::vector<int32_t> stacks, bool complete) {
  if (stacks.empty() && !complete) return kDead;
  std::string key(reinterpret_cast<const char*>(stacks.data()), stacks.size() * sizeof(int32_t));
  key.push_back(complete ? 1 : 0);
  auto [it, fresh] = config_ids_.try_emplace(std::move(key), int32_t(configs_.size()));
  if (fresh) {
    Config c;
    c.complete = complete;
    c.distance = complete ? 0 : kInf;
    for (int32_t s : stacks) c.distance = std::min(c.distance, node_dist_[size_t(s)]);
    c.stacks = std::move(stacks);
    configs_.push_back(std::move(c));
    trans_.resize(configs_.size() * 256, -2);
    finish_.push_back(complete ? 0 : -1);
  }
  return it->second;
}

int32_t Automaton::byte_step(int32_t c, uint8_t b) {
  int32_t& t = trans_[size_t(c) * 256 + b];
  if (t != -2) return t;
  out_.clear();
  bool complete = false;
  // configs_ may grow (and move) inside the loop: index it afresh each time.
  for (size_t i = 0; i < configs_[size_t(c)].stacks.size(); ++i) {
    const Node nd = nodes_[size_t(configs_[size_t(c)].stacks[i])];
    if (!g_.set(g_.at(nd.pos).id).test(b)) continue;
    expand(node(nd.pos + 1, nd.next), &out_, &complete);
  }
  std::sort(out_.begin(), out_.end());
  out_.erase(std::unique(out_.begin(), out_.end()), out_.end());
  const int32_t r = intern(out_, complete);
  trans_[size_t(c) * 256 + b] = r;  // trans_ may have been reallocated: not through `t`
  return r;
}

int32_t Automaton::token_step(int32_t c, int32_t token) {
  for (unsigned char b : vocab_->bytes(token)) {
    c = byte_step(c, b);
    if (c == kDead) return kDead;
  }
  return c;
}

bool Automaton::is_end(int32_t token) const {
  return std::find(end_ids_.begin(), end_ids_.end(), token) != end_ids_.end();
}

int32_t Automaton::initial() { return initial_; }

const std::string& Automaton::shortest(int32_t r) {
  if (shortest_done_.empty()) {
    shortest_.resize(g_.rules());
    shortest_done_.assign(g_.rules(), 0);
  }
  if (shortest_done_[size_t(r)]) return shortest_[size_t(r)];
  // The alternative of least length; its rule references are strictly shorter (no left
  // recursion, and a shortest alternative cannot hold its own rule), so this ends.
  int32_t best = -1;
  for (int32_t a : g_.alts(r))
    if (best < 0 || g_.rest(a) < g_.rest(best)) best = a;
  std::string out;
  for (int32_t p = best; g_.at(p).kind != Grammar::kEnd; ++p) {
    const Grammar::Elem& e = g_.at(p);
    if (e.kind == Grammar::kBytes) {
      const ByteSet& set = g_.set(e.id);
      size_t b = 0;
      while (b < 256 && !set.test(b)) ++b;
      out.push_back(char(b));
    } else {
      out += shortest(e.id);
    }
  }
  shortest_[size_t(r)] = std::move(out);
  shortest_done_[size_t(r)] = 1;
  return shortest_[size_t(r)];
}

// Walks the greedy path (the longest token that starts a shortest completion, again and again)
// until a configuration whose count is known, then counts back along it.
int64_t Automaton::tokens_locked(int32_t c) {
  if (c == kDead) return kInf;
  std::vector<int32_t> path;
  while (finish_[size_t(c)] < 0) {
    path.push_back(c);
    const Config& cf = configs_[size_t(c)];
    int32_t top = cf.stacks[0];
    for (int32_t s : cf.stacks)
      if (node_dist_[size_t(s)] < node_dist_[size_t(top)]) top = s;
    std::string text;
    for (int32_t n = top; n >= 0 && text.size() < vocab_->max_len_ + 1; n = nodes_[size_t(n)].next)
      for (int32_t p = nodes_[size_t(n)].pos; g_.at(p).kind != Grammar::kEnd; ++p) {
        const Grammar::Elem& e = g_.at(p);
        if (e.kind == Grammar::kRule) {
          text += shortest(e.id);
          continue;
        }
        size_t b = 0;
        while (b < 256 && !g_.set(e.id).test(b)) ++b;
        text.push_back(char(b));
      }
    const int32_t t = vocab_->longest_prefix(text);
    const int32_t next = t < 0 ? kDead : token_step(c, t);
    if (next == kDead) {
      for (int32_t q : path) finish_[size_t(q)] = kInf;
      return kInf;
    }
    c = next;
  }
  int64_t n = finish_[size_t(c)];
  for (size_t i = path.size(); i-- > 0;) finish_[size_t(path[i])] = n = std::min(kInf, n + 1);
  return finish_[size_t(path.empty() ? c : path[0])];
}

int64_t Automaton::finish_tokens(int32_t c) {
  std::lock_guard<std::mutex> lock(mu_);
  return tokens_locked(c);
}

int32_t Automaton::step(int32_t c, int32_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c == kDead) return kDead;
  if (is_end(token)) return configs_[size_t(c)].complete ? c : kDead;
  if (token < 0 || token >= vocab_->size() || !vocab_->usable(token)) return kDead;
  return token_step(c, token);
}

bool Automaton::has_mask(int32_t c) {
  std::lock_guard<std::mutex> lock(mu_);
  return masks_.count(c) != 0;
}

bool Automaton::allows(int32_t c, int32_t token, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c == kDead) return false;
  if (is_end(token)) return configs_[size_t(c)].complete;
  if (token < 0 || token >= vocab_->size() || !vocab_->usable(token)) return false;
  const int32_t n = token_step(c, token);
  if (n == kDead) return false;
  // finish_tokens never exceeds the distance in bytes: the cheap bound first.
  return limit >= configs_[size_t(n)].distance || tokens_locked(n) <= limit;
}

bool Automaton::complete(int32_t c) {
  std::lock_guard<std::mutex> lock(mu_);
  return c != kDead && configs_[size_t(c)].complete;
}

int64_t Automaton::distance(int32_t c) {
  std::lock_guard<std::mutex> lock(mu_);
  return c == kDead ? kInf : configs_[size_t(c)].distance;
}

// One pass over the usable tokens in byte order. walk_[d] is the configuration after the first
// d bytes of the current token; `alive` bytes of it are known to lead somewhere. A token that
// shares more than `alive` bytes with the previous one runs into the same dead byte.
void Automaton::compute_mask(int32_t c, int64_t limit, Mask* m) {
  const Vocab& v = *vocab_;
  m->words.assign(size_t((v.size() + 63) / 64), 0);
  m->max_bytes = 0;
  walk_.assign(1, c);
  size_t alive = 0;
  for (size_t i = 0; i < v.sorted_.size(); ++i) {
    const size_t l = v.lcp_[i];
    if (l > alive) continue;
    const int32_t t = v.sorted_[i];
    const std::string& bytes = v.bytes_[size_t(t)];
    walk_.resize(l + 1);
    size_t d = l;
    for (; d < bytes.size(); ++d) {
      const int32_t nx = byte_step(walk_[d], uint8_t(bytes[d]));
      if (nx == kDead) break;
      walk_.push_back(nx);
    }
    alive = d;
    if (d < bytes.size()) continue;
    if (limit < kInf && tokens_locked(walk_[d]) > limit) continue;
    m->max_bytes = std::max(m->max_bytes, configs_[size_t(walk_[d])].distance);
    m->words[size_t(t) / 64] |= uint64_t(1) << (t % 64);
  }
  if (configs_[size_t(c)].complete)
    for (int32_t e : end_ids_)
      if (e >= 0 && e < v.size()) m->words[size_t(e) / 64] |= uint64_t(1) << (e % 64);
}

void Automaton::mask(int32_t c, int64_t limit, std::vector<uint64_t>* words) {
  std::lock_guard<std::mutex> lock(mu_);
  if (c == kDead) {
    words->assign(size_t((vocab_->size() + 63) / 64), 0);
    return;
  }
  auto it = masks_.find(c);
  if (it == masks_.end()) {
    if (masks_.size() >= kMaxMasks) masks_.clear();
    Mask m;
    compute_mask(c, kInf, &m);
    it = masks_.emplace(c, std::move(m)).first;
  }
  Mask& cached = it->second;
  // finish_tokens never exceeds the distance in bytes: the cheap bound first.
  if (limit >= cached.max_bytes) {
    *words = cached.words;
    return;
  }
  if (cached.max_tokens < 0) {
    cached.max_tokens = 0;
    for (size_t w = 0; w < cached.words.size(); ++w)
      for (uint64_t bits = cached.words[w]; bits; bits &= bits - 1) {
        const int32_t t = int32_t(w * 64 + size_t(__builtin_ctzll(bits)));
        if (is_end(t)) continue;
        cached.max_tokens = std::max(cached.max_tokens, tokens_locked(token_step(c, t)));
      }
  }
  if (limit >= cached.max_tokens) {
    *words = cached.words;
    return;
  }
  // Near the end of the budget: only tokens that leave a short enough way to finish.
  Mask m;
  compute_mask(c, limit, &m);
  *words = std::move(m.words);
}

}  // namespace qwen35::grammar
