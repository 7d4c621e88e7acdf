// Token masks from a byte grammar, for constrained decoding.
//
// A matcher configuration is the set of parse stacks the output so far leaves open (a
// persistent stack per alternative still alive, so ambiguous grammars are fine), interned to an
// id; transitions between configurations on a byte are memoized, so the automaton is a lazily
// built DFA over the grammar's pushdown configurations. The mask of a configuration (which
// tokens keep the output a valid prefix) is computed once, by walking the vocabulary in sorted
// byte order (tokens sharing a prefix share its transitions; a dead prefix skips every token
// under it), and cached.
//
// Finishing within a budget: every configuration knows the fewest bytes that complete the value
// (its distance), and a number of tokens that surely do (finish_tokens): the shortest completion
// cut into tokens greedily, longest token first, each cut counted from the configuration it
// reaches, so that the next configuration on that path needs exactly one token less. With
// `limit`, a mask keeps only tokens after which finish_tokens is at most limit; a request that
// keeps limit = tokens left - 2 can always finish (the end token included) before it runs out.
//
// Bounds: an Automaton grows as it is used (configurations, transitions, masks), up to
// AutomatonLimits::max_bytes of estimated memory. Cached masks are dropped first (they are
// recomputed when needed); once the rest alone passes the bound the automaton is exhausted:
// what is built stays valid and answers as before, and every call that would build more throws
// Unavailable (kExhausted), so that the request using it ends with an error instead of the
// process growing without end. bytes() is readable without the lock (the server's cache sums
// it).
//
// Thread-safety: an Automaton may be shared by the sequences of several requests (its caches
// change nothing a caller sees). Calls go through a Session, which holds the automaton's lock;
// the plain methods open one each. A Session of Access::kBounded does not wait for the lock and
// gives up (Unavailable, kNotBuilt) rather than do more than a little work, so that the engine
// thread never waits for another thread's mask pass nor makes one itself. A Vocab is immutable.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace qwen35::grammar {

// The tokens a grammar may produce, with their bytes: one per tokenizer, built once.
class Vocab {
 public:
  // bytes[i]: the raw bytes of token i; usable[i] false for tokens the grammar never produces
  // (special tokens, empty tokens).
  Vocab(std::vector<std::string> bytes, const std::vector<bool>& usable);
  int64_t size() const { return int64_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  bool usable(int32_t id) const { return usable_[size_t(id)]; }
  // The usable token of the longest prefix of s (-1: none).
  int32_t longest_prefix(std::string_view s) const;

 private:
  friend class Automaton;
  std::vector<std::string> bytes_;
  std::vector<bool> usable_;
  std::unordered_map<std::string_view, int32_t> ids_;  // usable tokens by their bytes
  size_t max_len_ = 0;
  std::vector<int32_t> sorted_;  // usable ids in byte order
  std::vector<uint32_t> lcp_;    // common prefix with the previous id in sorted_
};

struct AutomatonLimits {
  size_t max_bytes = SIZE_MAX;  // estimated memory of one automaton (see above)
};

// How a Session may answer.
enum class Access {
  kBuild,    // waits for the lock and builds whatever a call needs
  kBounded,  // tries the lock only; builds at most kBoundedWork steps and never a mask pass
};

// Why a Session's call could not answer.
class Unavailable : public std::exception {
 public:
  enum Why {
    kBusy,       // a kBounded session: the lock is held elsewhere
    kNotBuilt,   // a kBounded session: the answer needs more work than it may do
    kExhausted,  // the automaton has reached AutomatonLimits::max_bytes
  };
  explicit Unavailable(Why why) : why_(why) {}
  Why why() const { return why_; }
  const char* what() const noexcept override;

 private:
  Why why_;
};

class Automaton {
 public:
  static constexpr int64_t kInf = Builder::kInf;
  static constexpr int32_t kDead = -1;
  // What a kBounded session may do: node visits of the parse-stack expansion, a configuration
  // walked on the way to a finish count weighing kPathWork.
  static constexpr int64_t kBoundedWork = 1 << 14;
  static constexpr int64_t kPathWork = 64;

  // end_ids: the tokens that end the output (end of turn); allowed once the grammar is complete.
  Automaton(Grammar g, std::shared_ptr<const Vocab> vocab, std::vector<int32_t> end_ids,
            AutomatonLimits limits = {});

  class Session;

  int32_t initial() const { return initial_; }
  int64_t min_length() const { return g_.min_length(); }
  bool is_end(int32_t token) const;
  const std::vector<int32_t>& end_ids() const { return end_ids_; }
  const Vocab& vocab() const { return *vocab_; }
  // Estimated bytes held (grammar tables, configurations, transitions, cached masks).
  size_t bytes() const { return bytes_.load(std::memory_order_relaxed); }
  bool exhausted() const { return exhausted_.load(std::memory_order_relaxed); }
  const AutomatonLimits& limits() const { return limits_; }
  // finish_tokens(initial()) once some call has computed it, else -1 (no lock taken).
  int64_t initial_finish() const { return initial_finish_.load(std::memory_order_relaxed); }

  // Each of these opens a kBuild session. On an exhausted automaton, a call that needs more
  // gives the answer that refuses everything (kDead, false, an empty mask, kInf).
  int32_t step(int32_t config, int32_t token);
  bool complete(int32_t config);
  int64_t distance(int32_t config);
  int64_t finish_tokens(int32_t config);
  bool has_mask(int32_t config, int64_t limit = kInf);
  bool allows(int32_t config, int32_t token, int64_t limit);
  void mask(int32_t config, int64_t limit, std::vector<uint64_t>* words);

 private:
  struct Node {
    int32_t pos, next;  // match from pos; at the end of its alternative go on with `next`
  };
  struct Config {
    std::vector<int32_t> stacks;  // sorted node ids whose top is a byte set
    bool complete = false;
    int64_t distance = kInf;
  };
  struct Mask {
    std::vector<uint64_t> words;
    int64_t max_bytes = 0;    // largest distance after an allowed token
    int64_t max_tokens = -1;  // largest finish_tokens after one (-1: not computed yet)
  };
  struct Limited {  // a mask under a limit that the cached mask does not meet
    int32_t config;
    int64_t limit;
    std::vector<uint64_t> words;
  };
  static constexpr size_t kMaxLimited = 8;

  // The Session's calls, under mu_. Everything below may throw Unavailable; an Unavailable (or
  // a failed allocation) leaves every memo consistent, with at most fewer entries.
  int32_t step_locked(int32_t config, int32_t token);
  bool allows_locked(int32_t config, int32_t token, int64_t limit);
  bool has_mask_locked(int32_t config, int64_t limit);
  void mask_locked(int32_t config, int64_t limit, std::vector<uint64_t>* words);
  int64_t tokens_locked(int32_t config);

  int32_t node(int32_t pos, int32_t next);
  void expand(int32_t n, std::vector<int32_t>* out, bool* complete);
  int32_t intern(std::vector<int32_t> stacks, bool complete);
  int32_t byte_step(int32_t config, uint8_t b);
  int32_t token_step(int32_t config, int32_t token);
  void compute_mask(int32_t config, int64_t limit, Mask* m);
  Mask& cached_mask(int32_t config);
  // The first bytes (as many as the longest token, plus one) of a shortest string of a rule.
  const std::string& shortest(int32_t rule);
  std::string completion(int32_t config);  // the start of a shortest completion of config
  // Bookkeeping of growth: spend() charges a kBounded session's work (kNotBuilt past it);
  // room() throws kExhausted once the automaton may not grow; grown() and masks_grown() count
  // new bytes (grown() marks the automaton exhausted past the bound).
  void spend(int64_t work);
  void room();
  void grown(size_t bytes);
  void masks_grown(int64_t bytes);

  std::mutex mu_;
  Access access_ = Access::kBuild;  // of the session holding mu_
  int64_t work_left_ = 0;           // of a kBounded session
  Grammar g_;
  std::shared_ptr<const Vocab> vocab_;
  std::vector<int32_t> end_ids_;
  AutomatonLimits limits_;
  size_t structure_ = 0;   // bytes of all but the masks
  size_t mask_bytes_ = 0;  // bytes of masks_ and limited_
  std::atomic<size_t> bytes_{0};
  std::atomic<bool> exhausted_{false};
  std::atomic<int64_t> initial_finish_{-1};
  std::vector<Node> nodes_;
  std::vector<int64_t> node_dist_;
  std::unordered_map<uint64_t, int32_t> node_ids_;
  std::vector<Config> configs_;
  std::unordered_map<std::string, int32_t> config_ids_;  // key: the stacks' bytes + complete
  std::vector<int32_t> trans_;                           // [config * 256 + byte]; -2 unknown
  std::unordered_map<int32_t, Mask> masks_;
  std::vector<Limited> limited_;  // the last few, oldest first
  std::vector<int64_t> finish_;  // per config: finish_tokens (-1: unknown)
  std::vector<std::string> shortest_;
  std::vector<uint8_t> shortest_done_;
  int32_t initial_ = -1;
  // Scratch of expand() and the mask walk.
  std::vector<uint32_t> seen_;
  uint32_t stamp_ = 0;
  std::vector<int32_t> work_, out_;
  std::vector<int32_t> walk_;
};

// The automaton's lock, held for a few calls (one sampled token). Not thread-safe itself.
class Automaton::Session {
 public:
  // kBuild waits for the lock; kBounded only tries it: locked() tells whether it got it.
  Session(Automaton& a, Access access);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  bool locked() const { return lock_.owns_lock(); }
  Automaton& automaton() const { return a_; }

  // These need locked(); each may throw Unavailable (see the class comment).
  // The configuration after a token (kDead when the grammar rejects it). An end id leaves a
  // complete configuration unchanged and kills an incomplete one.
  int32_t step(int32_t config, int32_t token);
  bool complete(int32_t config);
  int64_t distance(int32_t config);  // fewest bytes to a complete value
  // Tokens that surely complete the value from config (kInf when the vocabulary cannot spell
  // its shortest completion); the end token not counted.
  int64_t finish_tokens(int32_t config);
  // Whether mask(config, limit) is cached (a copy, not a pass over the vocabulary).
  bool has_mask(int32_t config, int64_t limit);
  // Whether `token` is in mask(config, limit), without computing the mask.
  bool allows(int32_t config, int32_t token, int64_t limit);
  // Writes the allowed tokens as bits (word w bit b: token 64w + b) into *words.
  void mask(int32_t config, int64_t limit, std::vector<uint64_t>* words);

 private:
  Automaton& a_;
  std::unique_lock<std::mutex> lock_;
};

}  // namespace qwen35::grammar
