#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "runtime/sampler_stages.h"

namespace qwen35::runtime {

core::Status SamplingParams::validate() const {
  auto bad = [](const std::string& what) { return core::error("[sampling] " + what); };
  if (!(temperature >= 0) || !std::isfinite(temperature)) return bad("temperature must be >= 0, got " + std::to_string(temperature));
  if (top_k < -1) return bad("top_k must be -1, 0 (off) or positive, got " + std::to_string(top_k));
  if (!(top_p > 0 && top_p <= 1)) return bad("top_p must be in (0, 1], got " + std::to_string(top_p));
  if (!(min_p >= 0 && min_p <= 1)) return bad("min_p must be in [0, 1], got " + std::to_string(min_p));
  if (!(presence_penalty >= -2 && presence_penalty <= 2)) return bad("presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  if (!(frequency_penalty >= -2 && frequency_penalty <= 2)) return bad("frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty)) return bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  if (logprobs > 20) return bad("logprobs must be at most 20, got " + std::to_string(logprobs));
  if (reasoning_budget < -1) return bad("the reasoning budget must be >= 0 (or -1: none), got " + std::to_string(reasoning_budget));
  if (reasoning_budget >= 0 && think_end < 0) return bad("a reasoning budget needs the model's end-of-thinking token");
  if (grammar && reasoning_open && think_end < 0)
    return bad("a grammar after an open thinking block needs the model's end-of-thinking token");
  if (grammar && think_may_open && (think_start < 0 || think_end < 0))
    return bad("a thinking block the model may open needs the model's thinking tokens");
  return core::Status();
}

SamplingParams sampling_defaults(const formats::GenerationConfig& g) {
  SamplingParams p;
  if (g.temperature) p.temperature = float(*g.temperature);
  if (g.top_k) p.top_k = int32_t(*g.top_k);
  if (g.top_p) p.top_p = float(*g.top_p);
  if (g.min_p) p.min_p = float(*g.min_p);
  if (g.repetition_penalty) p.repetition_penalty = float(*g.repetition_penalty);
  if (g.presence_penalty) p.presence_penalty = float(*g.presence_penalty);
  if (g.do_sample && !*g.do_sample) p.temperature = 0;
  return p;
}

Sampler::Sampler(const SamplingParams& params, int64_t vocab)
    : p_(params),
      vocab_(vocab),
      key_(p_.seed ? *p_.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}()),
      in_think_(p_.reasoning_open),
      gstate_(p_.grammar ? p_.grammar->initial() : -1),
      // The server works the count out before it submits the request: no lock taken here.
      grammar_need_(!p_.grammar                          ? 0
                    : p_.grammar->initial_finish() >= 0 ? p_.grammar->initial_finish()
                                                        : p_.grammar->finish_tokens(gstate_)),
      seen_(size_t(vocab), 0),
      work_(size_t(vocab)),
      order_(size_t(vocab)) {
}

void Sampler::add_prompt(std::span<const int32_t> tokens) {
  for (int32_t t : tokens)
    if (t >= 0 && t < vocab_) seen_[size_t(t)] = 1;
}

SampleResult Sampler::sample(const float* logits) {
  grammar::Unavailable::Why why;
  if (auto r = try_sample(logits, grammar::Access::kBuild, &why)) return std::move(*r);
  // Only an exhausted automaton gets here: the output ends, as when the grammar allows nothing.
  const int32_t end = p_.grammar->end_ids().empty() ? 0 : p_.grammar->end_ids()[0];
  record(end, false, gstate_);
  if (p_.logprobs < 0) return SampleResult{end, 0.0f, {}};
  return token_logprobs(logits, vocab_, end, p_.logprobs, &order_);
}

std::optional<SampleResult> Sampler::try_sample(const float* logits, grammar::Access access,
                                                grammar::Unavailable::Why* why) {
  bool masked = p_.grammar && !in_think_;  // the grammar constrains this token
  int32_t chosen = -1, next = gstate_;
  try {
    std::optional<Session> g;
    if (masked) g.emplace(*p_.grammar, access);
    // A forced end makes the other stages moot: it is chosen whatever they would allow.
    chosen = forced_end();
    if (chosen < 0) chosen = pick(logits, g ? &*g : nullptr);
    if (chosen < 0) {
      // The grammar allows nothing: only a vocabulary without some single-byte token can get
      // here. The output ends (with the end token when the request has one).
      chosen = p_.grammar->end_ids().empty() ? 0 : p_.grammar->end_ids()[0];
    }
    // The model opening its thinking block is no grammar token: the grammar waits it out.
    const bool opens = masked && chosen == p_.think_start && may_open_think();
    if (masked && !opens && !p_.grammar->is_end(chosen)) next = g->step(gstate_, chosen);
    if (opens) masked = false;
  } catch (const grammar::Unavailable& u) {
    *why = u.why();
    return std::nullopt;
  }
  record(chosen, masked, next);
  if (p_.logprobs < 0) return SampleResult{chosen, 0.0f, {}};
  return token_logprobs(logits, vocab_, chosen, p_.logprobs, &order_);
}

int64_t Sampler::tokens_left() const {
  return p_.max_output < 0 ? grammar::Automaton::kInf : p_.max_output - int64_t(drawn_);
}

// The value is finished within what is left, this token and the end token aside.
int64_t Sampler::limit_at(int64_t drawn) const {
  if (p_.max_output < 0) return grammar::Automaton::kInf;
  return p_.max_output - drawn - 2;
}

// Only as the first token, and only when what is left holds <think>, </think>, the shortest
// value and the end token.
bool Sampler::may_open_think() const {
  return p_.think_may_open && drawn_ == 0 && !in_think_ && p_.think_start >= 0 &&
         p_.think_end >= 0 && tokens_left() >= grammar_need_ + 4;
}

int64_t Sampler::candidates_wanted() const {
  if (p_.temperature == 0.0f) return 1;
  return p_.top_k > 0 ? std::min<int64_t>(p_.top_k, vocab_) : 0;
}

// Reasoning budget: inside a thinking block, think_end once reasoning_budget tokens were sampled
// there, or under a grammar once what is left just covers </think>, the shortest value and the
// end token. The forced token still takes its position's draw (unused), so the draws after it
// are those of the same positions in a run without the cut.
int32_t Sampler::forced_end() const {
  if (!in_think_ || p_.think_end < 0) return -1;
  const bool spent = p_.reasoning_budget >= 0 && think_tokens_ >= p_.reasoning_budget;
  const bool late = p_.grammar && tokens_left() <= grammar_need_ + 2;
  return spent || late ? p_.think_end : -1;
}

int32_t Sampler::pick(const float* logits, Session* g) {
  std::span<float> w(work_);
  std::copy(logits, logits + vocab_, w.begin());
  sampling::repetition_penalty(w, seen_, p_.repetition_penalty);
  sampling::frequency_presence_penalty(w, output_counts_, p_.frequency_penalty,
                                       p_.presence_penalty);
  const int64_t found = constrain(w, g);
  return p_.temperature == 0.0f ? greedy(found) : draw(found);
}

// Grammar mask. Inside a thinking block only the grammar's end tokens are refused (the answer
// must come); outside it, every token after which the value cannot be finished in what is left
// (this token and the end token aside). Greedy and top-k draw from the best few allowed tokens
// only: where the mask is not cached yet (computing it is a pass over the vocabulary), they are
// looked for among the best tokens first. Returns n > 0 when order_[0, n) already holds the
// candidates, best first; 0 when the refused tokens' logits were set to -inf instead.
int64_t Sampler::constrain(std::span<float> w, Session* g) {
  if (!p_.grammar) return 0;
  if (in_think_) {
    for (int32_t e : p_.grammar->end_ids())
      if (e >= 0 && e < vocab_) w[size_t(e)] = -INFINITY;
    return 0;
  }
  const int64_t limit = limit_at(int64_t(drawn_));
  const bool open = may_open_think();
  const int64_t want = candidates_wanted();
  if (want > 0 && !open && !g->has_mask(gstate_, limit)) {
    const int64_t found = sampling::best_allowed(*g, gstate_, limit, w, want, order_);
    if (found > 0) return found;
  }
  const float think = open ? w[size_t(p_.think_start)] : 0.0f;
  sampling::mask_refused(*g, gstate_, limit, w, &mask_);
  if (open) w[size_t(p_.think_start)] = think;
  return 0;
}

int32_t Sampler::greedy(int64_t found) const {
  if (found > 0) return order_[0];
  const int32_t t = sampling::argmax(work_);
  return p_.grammar && work_[size_t(t)] == -INFINITY ? -1 : t;
}

int32_t Sampler::draw(int64_t found) {
  const float* w = work_.data();
  int64_t n = found;
  if (n == 0)
    n = sampling::top_k(w, order_, sampling::gather(work_, p_.grammar != nullptr, order_),
                        p_.top_k);
  if (n == 0) return -1;
  sampling::softmax(w, std::span<const int32_t>(order_).first(size_t(n)), p_.temperature, &probs_);
  n = sampling::top_p(probs_, p_.top_p);
  n = sampling::min_p(std::span<const double>(probs_).first(size_t(n)), p_.min_p);
  const double u = core::Xoshiro256(key_ ^ core::splitmix64_of(drawn_)).uniform();
  return order_[size_t(sampling::draw(std::span<const double>(probs_).first(size_t(n)), u))];
}

void Sampler::record(int32_t token, bool masked, int32_t next) {
  if (masked && !p_.grammar->is_end(token)) gstate_ = next;
  output_counts_[token]++;
  seen_[size_t(token)] = 1;
  ++drawn_;
  if (in_think_) {
    if (token == p_.think_end)
      in_think_ = false;
    else
      ++think_tokens_;
  } else if (token == p_.think_start && p_.think_start >= 0 && !masked) {
    // (Under a grammar the output is the value now: a <think> inside it is text.)
    in_think_ = true;
    think_tokens_ = 0;
  }
}

}  // namespace qwen35::runtime

namespace qwen35::runtime {

size_t Sampler::allowed_prefix(std::span<const int32_t> draft, grammar::Access access) const {
  if (!p_.grammar) return draft.size();
  grammar::Automaton& a = *p_.grammar;
  std::optional<Session> g;  // opened at the first token the grammar decides
  bool think = in_think_;
  int32_t st = gstate_;
  size_t k = 0;
  try {
    for (; k < draft.size(); ++k) {
      const int32_t t = draft[k];
      if (think) {
        if (a.is_end(t)) break;
        if (t == p_.think_end) think = false;
        continue;
      }
      if (k == 0 && t == p_.think_start && may_open_think()) {
        think = true;
        continue;
      }
      if (!g) g.emplace(a, access);
      if (a.is_end(t)) {
        if (g->complete(st)) ++k;
        break;
      }
      st = g->step(st, t);
      if (st == grammar::Automaton::kDead) break;
    }
  } catch (const grammar::Unavailable&) {
    // The draft ends where the automaton cannot answer now.
  }
  return k;
}

std::vector<std::pair<int32_t, int64_t>> Sampler::masks_ahead(
    std::span<const int32_t> drafts) const {
  std::vector<std::pair<int32_t, int64_t>> out;
  if (!p_.grammar || candidates_wanted() > 0) return out;
  grammar::Automaton& a = *p_.grammar;
  Session g(a, grammar::Access::kBounded);
  if (!g.locked()) return out;
  bool think = in_think_;
  int32_t st = gstate_;
  int64_t drawn = int64_t(drawn_);
  try {
    for (size_t k = 0;; ++k, ++drawn) {
      if (!think) out.emplace_back(st, limit_at(drawn));
      if (k == drafts.size()) break;
      const int32_t t = drafts[k];
      if (think) {
        if (t == p_.think_end) think = false;
        continue;
      }
      if (k == 0 && t == p_.think_start && may_open_think()) {
        think = true;
        continue;
      }
      if (a.is_end(t)) break;
      st = g.step(st, t);
      if (st == grammar::Automaton::kDead) break;
    }
  } catch (const grammar::Unavailable&) {
    // As far as it is built.
  }
  return out;
}

bool Sampler::grammar_complete() const {
  return !p_.grammar || (!in_think_ && p_.grammar->complete(gstate_));
}

}  // namespace qwen35::runtime
