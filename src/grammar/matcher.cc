#include "grammar/matcher.h"

#include <algorithm>
#include <numeric>

namespace qwen35::grammar {
namespace {

// The mask cache holds at most this many configurations' masks (a mask is vocab/8 bytes: 31 KB
// at Qwen3.5's vocabulary), and no more than the automaton's bound leaves; past either it
// starts over.
constexpr size_t kMaxMasks = 2048;

// Estimated bytes of each growing piece: its own fields, and the hash-table entry that interns
// it (a node, a configuration's key) or holds it (a mask).
constexpr size_t kEntryBytes = 48;
constexpr size_t kNodeBytes = 8 + 8 + 4 + kEntryBytes;         // node, distance, seen, id
constexpr size_t kConfigBytes = 48 + 8 + 32 + kEntryBytes;     // Config, finish, key string
constexpr size_t kMaskBytes = 64 + kEntryBytes;

}  // namespace

const char* Unavailable::what() const noexcept {
  switch (why_) {
    case kBusy: return "the grammar's automaton is in use by another thread";
    case kNotBuilt: return "the grammar's automaton needs more work than this call may do";
    case kExhausted: return "the grammar's automaton has reached its memory bound";
  }
  return "the grammar's automaton cannot answer";
}

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

Automaton::Automaton(Grammar g, std::shared_ptr<const Vocab> vocab, std::vector<int32_t> end_ids,
                     AutomatonLimits limits)
    : g_(std::move(g)), vocab_(std::move(vocab)), end_ids_(std::move(end_ids)), limits_(limits) {
  shortest_.resize(g_.rules());
  shortest_done_.assign(g_.rules(), 0);
  grown(sizeof(Automaton) + g_.bytes() + g_.rules() * (sizeof(std::string) + 1));
  std::vector<int32_t> stacks;
  bool complete = false;
  for (int32_t a : g_.alts(g_.root())) expand(node(a, -1), &stacks, &complete);
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  initial_ = intern(std::move(stacks), complete);
}

void Automaton::grown(size_t bytes) {
  structure_ += bytes;
  if (structure_ > limits_.max_bytes) exhausted_.store(true, std::memory_order_relaxed);
  bytes_.store(structure_ + mask_bytes_, std::memory_order_relaxed);
}

void Automaton::masks_grown(int64_t bytes) {
  mask_bytes_ = size_t(int64_t(mask_bytes_) + bytes);
  bytes_.store(structure_ + mask_bytes_, std::memory_order_relaxed);
}

void Automaton::room() {
  if (exhausted()) throw Unavailable(Unavailable::kExhausted);
}

void Automaton::spend(int64_t work) {
  if (access_ != Access::kBounded) return;
  work_left_ -= work;
  if (work_left_ < 0) throw Unavailable(Unavailable::kNotBuilt);
}

// node() and intern() add an entry in steps that each change nothing when they throw (an
// allocation that fails), and publish its id last: a failure leaves at worst an unused slot,
// and the automaton stays whole for the requests that share it.
int32_t Automaton::node(int32_t pos, int32_t next) {
  const uint64_t key = (uint64_t(uint32_t(pos)) << 32) | uint32_t(next + 1);
  if (auto it = node_ids_.find(key); it != node_ids_.end()) return it->second;
  const int32_t id = int32_t(nodes_.size());
  nodes_.resize(size_t(id) + 1);
  node_dist_.resize(size_t(id) + 1);
  seen_.resize(size_t(id) + 1);
  nodes_[size_t(id)] = {pos, next};
  node_dist_[size_t(id)] =
      std::min(kInf, g_.rest(pos) + (next < 0 ? 0 : node_dist_[size_t(next)]));
  seen_[size_t(id)] = 0;
  node_ids_.emplace(key, id);
  grown(kNodeBytes);
  return id;
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
    spend(1);
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
  if (auto it = config_ids_.find(key); it != config_ids_.end()) return it->second;
  Config c;
  c.complete = complete;
  c.distance = complete ? 0 : kInf;
  for (int32_t s : stacks) c.distance = std::min(c.distance, node_dist_[size_t(s)]);
  c.stacks = std::move(stacks);
  const size_t held = c.stacks.capacity() * 2 * sizeof(int32_t);  // the stacks and the key
  const int32_t id = int32_t(configs_.size());
  const size_t before = trans_.capacity();
  trans_.resize(size_t(id + 1) * 256, -2);
  finish_.resize(size_t(id) + 1);
  configs_.push_back(std::move(c));
  finish_[size_t(id)] = complete ? 0 : -1;
  config_ids_.emplace(std::move(key), id);
  grown(kConfigBytes + held + (trans_.capacity() - before) * sizeof(int32_t));
  return id;
}

int32_t Automaton::byte_step(int32_t c, uint8_t b) {
  if (const int32_t t = trans_[size_t(c) * 256 + b]; t != -2) return t;
  room();
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
  trans_[size_t(c) * 256 + b] = r;  // set last: an Unavailable above leaves it unknown
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

// Only the first max_len + 1 bytes of a completion are read (the longest token that starts it),
// so each rule keeps only as much of its shortest string: memory linear in the rules, where
// whole strings would be quadratic in a long sequence of rules. Iterative: the rules of
// shortest alternatives form an acyclic graph (a reference as long as its rule sits at the left
// of the alternative, and left recursion is refused; any other is strictly shorter), but it may
// be deep.
const std::string& Automaton::shortest(int32_t r) {
  if (shortest_done_[size_t(r)]) return shortest_[size_t(r)];
  room();
  const size_t cap = vocab_->max_len_ + 1;
  std::vector<int32_t> stack{r};
  while (!stack.empty()) {
    const int32_t x = stack.back();
    if (shortest_done_[size_t(x)]) {
      stack.pop_back();
      continue;
    }
    int32_t best = -1;
    for (int32_t a : g_.alts(x))
      if (best < 0 || g_.rest(a) < g_.rest(best)) best = a;
    // The rules whose strings reach into the first `cap` bytes (their lengths are rest()'s).
    bool ready = true;
    int64_t at = 0;
    for (int32_t p = best; g_.at(p).kind != Grammar::kEnd && at < int64_t(cap); ++p) {
      spend(1);
      const Grammar::Elem& e = g_.at(p);
      if (e.kind == Grammar::kRule && !shortest_done_[size_t(e.id)]) {
        stack.push_back(e.id);
        ready = false;
      }
      at += g_.rest(p) - g_.rest(p + 1);
    }
    if (!ready) continue;
    std::string out;
    for (int32_t p = best; g_.at(p).kind != Grammar::kEnd && out.size() < cap; ++p) {
      const Grammar::Elem& e = g_.at(p);
      if (e.kind == Grammar::kRule) {
        out += shortest_[size_t(e.id)];
        continue;
      }
      size_t b = 0;
      while (b < 256 && !g_.set(e.id).test(b)) ++b;
      out.push_back(char(b));
    }
    if (out.size() > cap) out.resize(cap);
    out.shrink_to_fit();
    grown(out.capacity());
    shortest_[size_t(x)] = std::move(out);
    shortest_done_[size_t(x)] = 1;
    stack.pop_back();
  }
  return shortest_[size_t(r)];
}

// The start of a shortest completion: from the stack nearest to the end, its alternative's
// remaining symbols, then its continuations'.
std::string Automaton::completion(int32_t c) {
  const Config& cf = configs_[size_t(c)];
  int32_t top = cf.stacks[0];
  for (int32_t s : cf.stacks)
    if (node_dist_[size_t(s)] < node_dist_[size_t(top)]) top = s;
  const size_t cap = vocab_->max_len_ + 1;
  std::string text;
  for (int32_t n = top; n >= 0 && text.size() < cap; n = nodes_[size_t(n)].next)
    for (int32_t p = nodes_[size_t(n)].pos; g_.at(p).kind != Grammar::kEnd && text.size() < cap;
         ++p) {
      const Grammar::Elem& e = g_.at(p);
      if (e.kind == Grammar::kRule) {
        text += shortest(e.id);
        continue;
      }
      size_t b = 0;
      while (b < 256 && !g_.set(e.id).test(b)) ++b;
      text.push_back(char(b));
    }
  return text;
}

// Walks the greedy path (the longest token that starts a shortest completion, again and again)
// until a configuration whose count is known, then counts back along it. Each token takes at
// least one byte off the distance, so the walk ends. Counts are written only at the end: an
// Unavailable on the way leaves none half-made.
int64_t Automaton::tokens_locked(int32_t c) {
  if (c == kDead) return kInf;
  std::vector<int32_t> path;
  while (finish_[size_t(c)] < 0) {
    spend(kPathWork);
    path.push_back(c);
    const int32_t t = vocab_->longest_prefix(completion(c));
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

int32_t Automaton::step_locked(int32_t c, int32_t token) {
  if (c == kDead) return kDead;
  if (is_end(token)) return configs_[size_t(c)].complete ? c : kDead;
  if (token < 0 || token >= vocab_->size() || !vocab_->usable(token)) return kDead;
  return token_step(c, token);
}

bool Automaton::allows_locked(int32_t c, int32_t token, int64_t limit) {
  if (c == kDead) return false;
  if (is_end(token)) return configs_[size_t(c)].complete;
  if (token < 0 || token >= vocab_->size() || !vocab_->usable(token)) return false;
  const int32_t n = token_step(c, token);
  if (n == kDead) return false;
  // finish_tokens never exceeds the distance in bytes: the cheap bound first.
  return limit >= configs_[size_t(n)].distance || tokens_locked(n) <= limit;
}

// One pass over the usable tokens in byte order. walk_[d] is the configuration after the first
// d bytes of the current token; `alive` bytes of it are known to lead somewhere. A token that
// shares more than `alive` bytes with the previous one runs into the same dead byte.
void Automaton::compute_mask(int32_t c, int64_t limit, Mask* m) {
  if (access_ == Access::kBounded) throw Unavailable(Unavailable::kNotBuilt);
  room();
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

// The unlimited mask of c, computed on a miss. A new mask that would take the automaton past
// its bound (or the cache past kMaxMasks) empties the cache first.
Automaton::Mask& Automaton::cached_mask(int32_t c) {
  if (auto it = masks_.find(c); it != masks_.end()) return it->second;
  Mask m;
  compute_mask(c, kInf, &m);
  const size_t add = m.words.size() * sizeof(uint64_t) + kMaskBytes;
  if (masks_.size() >= kMaxMasks || structure_ + mask_bytes_ + add > limits_.max_bytes) {
    masks_.clear();
    limited_.clear();
    masks_grown(-int64_t(mask_bytes_));
  }
  Mask& kept = masks_.emplace(c, std::move(m)).first->second;
  masks_grown(int64_t(add));
  return kept;
}

bool Automaton::has_mask_locked(int32_t c, int64_t limit) {
  if (c == kDead) return true;
  auto it = masks_.find(c);
  if (it == masks_.end()) return false;
  const Mask& m = it->second;
  if (limit >= m.max_bytes || (m.max_tokens >= 0 && limit >= m.max_tokens)) return true;
  return std::any_of(limited_.begin(), limited_.end(),
                     [&](const Limited& l) { return l.config == c && l.limit == limit; });
}

void Automaton::mask_locked(int32_t c, int64_t limit, std::vector<uint64_t>* words) {
  if (c == kDead) {
    words->assign(size_t((vocab_->size() + 63) / 64), 0);
    return;
  }
  Mask& cached = cached_mask(c);
  // finish_tokens never exceeds the distance in bytes: the cheap bound first.
  if (limit >= cached.max_bytes) {
    *words = cached.words;
    return;
  }
  if (cached.max_tokens < 0) {
    if (access_ == Access::kBounded) throw Unavailable(Unavailable::kNotBuilt);
    int64_t most = 0;  // set once whole: an Unavailable on the way leaves it unknown
    for (size_t w = 0; w < cached.words.size(); ++w)
      for (uint64_t bits = cached.words[w]; bits; bits &= bits - 1) {
        const int32_t t = int32_t(w * 64 + size_t(__builtin_ctzll(bits)));
        if (is_end(t)) continue;
        most = std::max(most, tokens_locked(token_step(c, t)));
      }
    cached.max_tokens = most;
  }
  if (limit >= cached.max_tokens) {
    *words = cached.words;
    return;
  }
  // Near the end of the budget: only tokens that leave a short enough way to finish. The last
  // few such masks are kept, so that one computed ahead (a worker's) serves the sample.
  for (const Limited& l : limited_)
    if (l.config == c && l.limit == limit) {
      *words = l.words;
      return;
    }
  Mask m;
  compute_mask(c, limit, &m);
  *words = m.words;
  if (limited_.size() >= kMaxLimited) {
    masks_grown(-int64_t(limited_.front().words.size() * sizeof(uint64_t) + kMaskBytes));
    limited_.erase(limited_.begin());
  }
  limited_.push_back({c, limit, std::move(m.words)});
  masks_grown(int64_t(limited_.back().words.size() * sizeof(uint64_t) + kMaskBytes));
}

Automaton::Session::Session(Automaton& a, Access access) : a_(a), lock_(a.mu_, std::defer_lock) {
  if (access == Access::kBuild)
    lock_.lock();
  else if (!lock_.try_lock())
    return;
  a_.access_ = access;
  a_.work_left_ = kBoundedWork;
}

Automaton::Session::~Session() {
  if (locked()) a_.access_ = Access::kBuild;
}

namespace {
void need(const std::unique_lock<std::mutex>& lock) {
  if (!lock.owns_lock()) throw Unavailable(Unavailable::kBusy);
}
}  // namespace

int32_t Automaton::Session::step(int32_t c, int32_t token) {
  need(lock_);
  return a_.step_locked(c, token);
}

bool Automaton::Session::complete(int32_t c) {
  need(lock_);
  return c != kDead && a_.configs_[size_t(c)].complete;
}

int64_t Automaton::Session::distance(int32_t c) {
  need(lock_);
  return c == kDead ? kInf : a_.configs_[size_t(c)].distance;
}

int64_t Automaton::Session::finish_tokens(int32_t c) {
  need(lock_);
  const int64_t n = a_.tokens_locked(c);
  if (c == a_.initial_) a_.initial_finish_.store(n, std::memory_order_relaxed);
  return n;
}

bool Automaton::Session::has_mask(int32_t c, int64_t limit) {
  need(lock_);
  return a_.has_mask_locked(c, limit);
}

bool Automaton::Session::allows(int32_t c, int32_t token, int64_t limit) {
  need(lock_);
  return a_.allows_locked(c, token, limit);
}

void Automaton::Session::mask(int32_t c, int64_t limit, std::vector<uint64_t>* words) {
  need(lock_);
  a_.mask_locked(c, limit, words);
}

// The plain calls: a kBuild session each. Only an exhausted automaton throws in them.
int32_t Automaton::step(int32_t c, int32_t token) {
  try {
    return Session(*this, Access::kBuild).step(c, token);
  } catch (const Unavailable&) {
    return kDead;
  }
}

bool Automaton::complete(int32_t c) { return Session(*this, Access::kBuild).complete(c); }

int64_t Automaton::distance(int32_t c) { return Session(*this, Access::kBuild).distance(c); }

int64_t Automaton::finish_tokens(int32_t c) {
  try {
    return Session(*this, Access::kBuild).finish_tokens(c);
  } catch (const Unavailable&) {
    return kInf;
  }
}

bool Automaton::has_mask(int32_t c, int64_t limit) {
  return Session(*this, Access::kBuild).has_mask(c, limit);
}

bool Automaton::allows(int32_t c, int32_t token, int64_t limit) {
  try {
    return Session(*this, Access::kBuild).allows(c, token, limit);
  } catch (const Unavailable&) {
    return false;
  }
}

void Automaton::mask(int32_t c, int64_t limit, std::vector<uint64_t>* words) {
  try {
    Session(*this, Access::kBuild).mask(c, limit, words);
  } catch (const Unavailable&) {
    words->assign(size_t((vocab_->size() + 63) / 64), 0);
  }
}

}  // namespace qwen35::grammar
