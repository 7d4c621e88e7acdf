// Token sampling with the semantics users know from vLLM: penalties, temperature, top-k, top-p,
// min-p, seeded randomness, and log-probabilities for callers.
//
// A chain of small stages (runtime/sampler_stages.h): repetition penalty (prompt + output
// tokens), frequency/presence penalties (output tokens) -> grammar mask -> reasoning budget ->
// top-k -> temperature -> top-p -> min-p -> draw. temperature == 0 is greedy (ties to the lower
// id). Log-probabilities are those of the model's raw distribution (log_softmax of the logits
// before any penalty or truncation, runtime/logprobs.h), as vLLM reports by default.
//
// Determinism: the random draw for a request's p-th sampled token depends only on (seed, p): the
// same seed and the same logits give the same tokens, and speculative decoding, which samples
// the same positions in the same order whatever was drafted, draws what plain decoding draws.
// Not thread-safe; one per sequence.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/random.h"
#include "core/result.h"
#include "formats/hf_config.h"
#include "grammar/matcher.h"
#include "runtime/logprobs.h"

namespace qwen35::runtime {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  int32_t top_k = 0;                // 0 or -1: off
  float top_p = 1.0f;               // (0, 1]
  float min_p = 0.0f;               // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  std::optional<uint64_t> seed;     // unset: seeded from the system
  int32_t logprobs = -1;            // -1: none; N >= 0: the chosen token's + N top alternatives
  // Reasoning budget: at most reasoning_budget tokens are sampled inside a thinking block; the
  // next one is think_end, chosen whatever the logits say, and the answer follows. -1: no cap.
  // The block is open from the start when reasoning_open (the prompt opened it), and a sampled
  // think_start opens one. Forced or not, the p-th token uses the p-th random draw.
  int64_t reasoning_budget = -1;
  int32_t think_start = -1, think_end = -1;
  bool reasoning_open = false;
  // The prompt leaves <think> to the model (Qwen3's template does): under a grammar the first
  // token may also be think_start, which opens a thinking block the grammar waits out, when
  // what is left covers it, its end and the shortest value.
  bool think_may_open = false;
  // Constrained decoding (null: none): outside a thinking block only tokens the grammar allows
  // are sampled, its end tokens only once the value is complete; inside one the end tokens are
  // masked (the answer must come). The thinking block is tracked with think_start/think_end as
  // for the budget. The output finishes within max_output tokens: the thinking block is closed
  // when what is left just covers the shortest answer, and near the end the mask keeps only
  // tokens after which the value can still be finished in time.
  std::shared_ptr<grammar::Automaton> grammar;
  int64_t max_output = -1;  // tokens the request may generate (-1: unbounded); set by the engine

  // Checks ranges; the message names the parameter ("temperature must be >= 0, got -1").
  core::Status validate() const;
};

// The model's own defaults (generation_config.json); do_sample false means greedy.
SamplingParams sampling_defaults(const formats::GenerationConfig& g);

class Sampler {
 public:
  Sampler(const SamplingParams& params, int64_t vocab);

  // Records prompt tokens (for the repetition penalty).
  void add_prompt(std::span<const int32_t> tokens);
  // Picks the next token from logits [vocab] and records it as output.
  SampleResult sample(const float* logits);
  // sample() with the grammar's automaton opened under `access` (grammar/matcher.h): nullopt,
  // with nothing recorded and *why set, when the automaton cannot answer that way (busy, more
  // work than kBounded allows, or exhausted). The same logits then give the same token later:
  // a sample is a function of the logits and of what this sampler recorded, never of when or
  // on which thread it runs.
  std::optional<SampleResult> try_sample(const float* logits, grammar::Access access,
                                         grammar::Unavailable::Why* why);
  // How many of `draft` (tokens proposed to follow what was sampled so far) the grammar allows
  // in order: a speculative draft is cut at the first token the mask would never pick, and
  // (drafts only change the speed) where the automaton cannot answer under `access`.
  size_t allowed_prefix(std::span<const int32_t> draft,
                        grammar::Access access = grammar::Access::kBuild) const;
  // The grammar's value is complete (always true without a grammar).
  bool grammar_complete() const;
  // The masks (configuration, limit) that the next samples will read whole, for a worker to
  // compute ahead (runtime/sample_workers.h): the next sample's, then one per token of `drafts`
  // (the tokens a verification feeds after it), as far as the automaton has them built. Empty
  // for samplers that look for their few candidates token by token (greedy, top-k).
  std::vector<std::pair<int32_t, int64_t>> masks_ahead(std::span<const int32_t> drafts) const;

  const SamplingParams& params() const { return p_; }

 private:
  // sample() composes these: forced_end, else pick (penalties, constrain, then greedy or draw);
  // a token of -1 means none settled yet. record keeps what the next token's stages read.
  // The automaton's calls go through `g`, open while the grammar constrains the token (else
  // null); they may throw grammar::Unavailable before anything is recorded.
  using Session = grammar::Automaton::Session;
  int32_t forced_end() const;                       // reasoning budget (inside a thinking block)
  int32_t pick(const float* logits, Session* g);    // penalties, grammar mask, truncation, draw
  int64_t constrain(std::span<float> w, Session* g);  // grammar mask
  int32_t greedy(int64_t found) const;              // temperature 0
  int32_t draw(int64_t found);                      // top-k, softmax, top-p, min-p, the draw
  // What the next token's stages depend on; `next`: the grammar configuration after `token`.
  void record(int32_t token, bool masked, int32_t next);
  int64_t tokens_left() const;              // of max_output (Automaton::kInf: unbounded)
  int64_t limit_at(int64_t drawn) const;    // the grammar's limit after `drawn` samples
  int64_t candidates_wanted() const;        // of the fast path (0: the whole mask)
  bool may_open_think() const;              // think_start is allowed besides the grammar now

  SamplingParams p_;
  int64_t vocab_;
  uint64_t key_;                // the seed (drawn from the system when the request has none)
  uint64_t drawn_ = 0;          // tokens sampled so far: the position of the next draw
  bool in_think_;               // inside a thinking block
  int64_t think_tokens_ = 0;    // tokens sampled inside it
  int32_t gstate_ = -1;         // grammar configuration (outside thinking)
  int64_t grammar_need_ = 0;    // tokens that surely give a whole value from the start
  std::vector<uint64_t> mask_;  // scratch: the allowed tokens
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<uint8_t> seen_;   // prompt or output token (repetition penalty)
  std::vector<float> work_;     // [vocab] adjusted logits
  std::vector<int32_t> order_;  // candidate ids, best first
  std::vector<double> probs_;   // candidate probabilities
};

}  // namespace qwen35::runtime
