// Speculative decoding in the engine (runtime/engine.h, docs/design.md "Speculative
// decoding"): what each speculative request drafts before a step's forward call, and how its
// verified rows are sampled and committed after it.
#include <algorithm>

#include "runtime/engine.h"
#include "runtime/engine_active.h"

namespace qwen35::runtime {

// Each generating speculative request's verification rows: the sampled token and what its
// drafter proposes, no more than plain decoding could still emit (max_tokens, the context) and
// than its acceptance so far pays for (DraftLength). A step with no draft goes the same way, as
// one verified row. The MTP head drafts for all its requests in one call.
void Engine::draft() {
  draft_reqs_.clear();
  for (auto& s : slots_) {
    Active* a = s.get();
    if (!a || a->prefilled < int64_t(a->req.prompt.size()) || a->spec.method == SpecMethod::kOff)
      continue;
    int64_t k = a->spec.draft_tokens;
    if (a->req.max_tokens >= 0) k = std::min(k, a->req.max_tokens - a->generated - 1);
    k = std::min(k, context() - a->state->pos() - 1);
    a->verify.assign(1, a->next_token);
    a->drafts.clear();
    k = a->draft_length.next(k);
    if (k <= 0) continue;
    if (a->spec.method == SpecMethod::kLookup) {
      lookup_draft(a->context, k, &draft_);
      draft_.resize(a->sampler->allowed_prefix(draft_));  // the grammar's mask checks drafts
      a->verify.insert(a->verify.end(), draft_.begin(), draft_.end());
    } else {
      draft_reqs_.push_back({a->state, a->next_token, k, &a->drafts});
    }
  }
  // Drafts only change the speed: a failed drafting pass verifies no draft.
  if (!draft_reqs_.empty() && !model_.draft(draft_reqs_).ok())
    for (auto& r : draft_reqs_) r.out->clear();
}

// A verification's rows: samples row j as plain decoding samples its position, and goes on to
// row j+1 while the token drafted there is the one sampled. The state keeps the rows up to the
// last one sampled, so it holds what plain decoding fed (docs/design.md §6, drafted == plain).
bool Engine::advance_verified(size_t r, StepCounts* c) {
  Active& a = *slots_[size_t(row_slot_[r])];
  const std::span<const int32_t> t = rows_[r].tokens;
  const int64_t n = int64_t(t.size()), pos0 = a.state->pos() - n;
  const size_t vocab = size_t(model_.config().vocab);
  int64_t kept = 0;
  bool done = false;
  while (kept < n && !done) {
    const float* lg = logits_.data() + (row_logits_[r] + size_t(kept)) * vocab;
    ++kept;
    done = emit(a, a.sampler->sample(lg), pos0 + kept, c);
    if (kept < n && a.next_token != t[size_t(kept)]) break;  // the draft there is rejected
  }
  c->drafted += n - 1;
  c->accepted += kept - 1;
  a.draft_length.update(n - 1, kept - 1);
  for (int64_t i = 0; i + 1 < n; ++i) ++c->drafted_at[size_t(i)];
  for (int64_t i = 0; i + 1 < kept; ++i) ++c->accepted_at[size_t(i)];
  if (a.req.keep_state) a.fed.insert(a.fed.end(), t.begin(), t.begin() + kept);
  model_.commit(a.state, kept);
  return done;
}

}  // namespace qwen35::runtime
