// One engine step (runtime/stepper.h): the plan of the step's rows, the forward call, and each
// sequence advanced by its rows' logits. Speculative decoding (docs/design.md "Speculative
// decoding"): what each verifying sequence drafts before the forward call, and how its verified
// rows are sampled and committed after it.
#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/check.h"
#include "runtime/stepper.h"

namespace qwen35::runtime {

void Stepper::step(StepOutput* out) {
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  resume_samples(out);
  if (std::string oom = out_of_memory([&] { plan(); }); !oom.empty()) {
    rows_.clear();
    fail_running(out, oom + " while planning a step");
    return;
  }
  for (const auto& r : rows_) out->work_flops += cost_.rows(r.state->pos(), int64_t(r.tokens.size()));
  const auto t_tower = Clock::now();
  const bool tower = tower_plan_.has_value();
  if (tower) out->work_flops += tower_plan_->flops;
  if (tower) run_tower(out);
  out->tower_s += std::chrono::duration<double>(Clock::now() - t_tower).count();
  if (rows_.empty()) {
    if (tower) ++out->steps;
    return;
  }
  const auto t1 = Clock::now();
  core::Status st;
  if (std::string oom = out_of_memory([&] {
        if (!opts_.forward) {
          st = model_.forward(rows_, &logits_);
          return;
        }
        st = opts_.forward(state_ops_, rows_, row_slot_, &logits_);
      });
      !oom.empty())
    st = core::error(oom + " in the forward call");
  state_ops_.clear();  // sent with the step (under a split), whatever became of it
  const auto t2 = Clock::now();
  for (size_t r = 0; r < rows_.size(); ++r) {
    bool done = false;
    if (std::string oom = out_of_memory([&] { done = advance(r, st, out); }); !oom.empty()) {
      slots_[size_t(row_slot_[r])]->finish("error", out, oom + " while sampling");
      done = true;
    }
    if (done) {
      release(size_t(row_slot_[r]));  // the slot is free for the next admission
      ++out->done;
    }
  }
  ++out->steps;
  out->plan_s += std::chrono::duration<double>(t1 - t0).count();
  out->forward_s += std::chrono::duration<double>(t2 - t1).count();
  out->advance_s += std::chrono::duration<double>(Clock::now() - t2).count();
}

// The step's rows must find their KV blocks in the forward call: what they lack is made free
// by evicting prefix-cache entries, then by preempting the youngest running sequence and
// planning again without it (its blocks go back; it is queued again). A preempted sequence
// resumes later with the same bits, so this changes when tokens come, never which.
void Stepper::plan() {
  for (;;) {
    schedule();
    int64_t short_by = rows_short();
    if (short_by <= 0) return;
    if (cache_ && cache_->free_blocks(pool_->free_blocks() + short_by)) return;
    const int v = victim();
    if (v < 0) {
      shed_rows();
      return;
    }
    preempt(size_t(v));
  }
}

int64_t Stepper::rows_short() const {
  constexpr int64_t kBlock = kernels::kKvBlock;
  int64_t need = 0;
  for (const auto& r : rows_) {
    const int64_t end = std::min(r.state->capacity(), r.state->pos() + int64_t(r.tokens.size()));
    need += std::max<int64_t>(0, (end + kBlock - 1) / kBlock - r.state->blocks_held());
  }
  return need - pool_->free_blocks();
}

int Stepper::victim() const {
  int best = -1, candidates = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Sequence* s = slots_[i].get();
    if (!s || s->waiting() || leader_[i] >= 0) continue;
    ++candidates;
    if (best < 0 || s->order() > slots_[size_t(best)]->order()) best = int(i);
  }
  return candidates >= 2 ? best : -1;
}

// Allocates nothing: preempted_ has room for every slot's sequence.
void Stepper::preempt(size_t i) {
  slots_[i]->preempt(cache_.get());
  for (int& l : leader_)  // its forks, if its prompt was not read, compute it themselves
    if (l == int(i)) l = -1;
  leader_[i] = -1;
  reset_state(i);  // its KV blocks go back to the pool (those the cache holds stay there)
  preempted_.push_back(std::move(slots_[i]));
  ++preemptions_;
}

void Stepper::shed_rows() {
  while (!rows_.empty() && rows_short() > 0) {
    rows_.pop_back();
    row_slot_.pop_back();
    row_logits_.pop_back();
  }
}

// The samples the workers finished, emitted in slot order (each sequence's own tokens do not
// depend on the order; the events of different requests go to different streams).
void Stepper::resume_samples(StepOutput* out) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Sequence* s = slots_[i].get();
    if (!s || !s->sample_ready()) continue;
    ++out->resumed;
    bool done = false;
    if (std::string oom = out_of_memory([&] { done = s->resume(out); }); !oom.empty()) {
      s->finish("error", out, oom + " while sampling");
      done = true;
    }
    if (done) {
      release(i);
      ++out->done;
    }
  }
}

// Each verifying sequence's rows: the sampled token and what its drafter proposes. A step with
// no draft goes the same way, as one verified row. The MTP head drafts for all its sequences in
// one call; drafts only change the speed, so a failed drafting pass verifies no draft.
void Stepper::draft() {
  if (!out_of_memory([&] { propose_drafts(); }).empty())
    for (auto& s : slots_)
      if (s) s->drafts().clear();
  for (auto& s : slots_) {
    if (!s || s->phase() != Phase::kVerify || s->waiting()) continue;
    if (!out_of_memory([&] { s->set_verify_rows(s->drafts()); }).empty())
      s->set_verify_rows({});  // the sampled token alone: its room was reserved at the start
  }
}

void Stepper::propose_drafts() {
  draft_reqs_.clear();
  draft_slots_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Sequence* s = slots_[i].get();
    if (!s || s->phase() != Phase::kVerify || s->waiting()) continue;
    s->drafts().clear();
    const int64_t k = s->draft_budget();
    if (k <= 0) continue;
    if (s->spec().method == SpecMethod::kLookup) {
      lookup_draft(s->lookup_context(), k, &s->drafts());
    } else {
      draft_reqs_.push_back({s->state(), *s->next_token(), k, &s->drafts()});
      draft_slots_.push_back(int(i));
    }
  }
  if (draft_reqs_.empty()) return;
  core::Status st;
  if (opts_.draft) {  // under a split: the last rank drafts, after the state changes so far
    st = opts_.draft(state_ops_, draft_reqs_, draft_slots_);
    state_ops_.clear();  // sent with the drafts, whatever became of them
  } else {
    st = model_.draft(draft_reqs_);
  }
  if (!st.ok())
    for (auto& r : draft_reqs_) r.out->clear();
}

// Fills rows_: one decode row (or the verification rows) per generating sequence, then prefill
// chunks (or the due image's tower pieces), oldest request first, on the absolute grid, under
// what the decode rows leave of the step's rows (step_tokens) and of its budget of work
// (budget_, in multiply-adds × 2: every row's matmuls and its attention over the positions
// before it, model::RowCost; the tower's pieces count only there). The first prefilling
// sequence always gets one chunk so prompts progress however many sequences decode.
void Stepper::schedule() {
  rows_.clear();
  row_slot_.clear();
  row_logits_.clear();
  std::vector<int> prefilling;
  int64_t decode_rows = 0;  // the decode, verification and replay rows, and their work
  double decode_work = 0;
  draft();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Sequence* s = slots_[i].get();
    if (!s || s->waiting() || leader_[i] >= 0) continue;  // no row until its sample (fork) comes
    if (s->phase() == Phase::kPrefill) {
      prefilling.push_back(int(i));
      continue;
    }
    if (s->phase() == Phase::kReplay) {  // tokens it fed before a preemption: no sampling
      row_slot_.push_back(int(i));
      rows_.push_back({s->state(), s->replay_rows(), false, true});
      rows_.back().logits_top_k = 1;
      decode_rows += int64_t(s->replay_rows().size());
      decode_work += cost_.rows(s->state()->pos(), int64_t(s->replay_rows().size()));
      continue;
    }
    s->prefetch_masks();  // computed on the workers while the forward call runs
    row_slot_.push_back(int(i));
    if (s->phase() == Phase::kDecode) {
      rows_.push_back({s->state(), std::span<const int32_t>(s->next_token(), 1), false});
    } else {
      rows_.push_back({s->state(), s->verify_rows(), false, true});
    }
    decode_rows += int64_t(rows_.back().tokens.size());
    decode_work += cost_.rows(s->state()->pos(), int64_t(rows_.back().tokens.size()));
    rows_.back().logits_top_k = s->logits_top_k();
  }
  std::sort(prefilling.begin(), prefilling.end(), [&](int x, int y) {
    return slots_[size_t(x)]->order() < slots_[size_t(y)]->order();
  });
  int64_t rows_left = opts_.step_tokens - decode_rows;
  double budget = budget_ - decode_work;
  bool first = true;
  tower_plan_.reset();
  if (tower_ && !tower_wanted()) drop_tower();  // its requests ended: the run goes
  // An image part-way through the tower finishes before another starts (its work is kept), when
  // a sequence of this step's can take it on.
  bool keep_run = false;
  if (tower_ && tower_->run.at != model::VisionCursor{})
    for (int i : prefilling) {
      const PromptImage* im = slots_[size_t(i)]->image_due();
      keep_run = keep_run || (im && im->pending == tower_->image);
    }
  for (int i : prefilling) {
    Sequence& s = *slots_[size_t(i)];
    if (const PromptImage* im = s.image_due()) {
      if (tower_plan_) continue;  // one image in the tower a step
      if (keep_run && im->pending != tower_->image) continue;
      if (!plan_tower(*im, &budget, first)) break;
      first = false;
      continue;
    }
    const std::span<const int32_t> chunk = s.next_chunk(rows_left, budget, cost_, first);
    if (chunk.empty()) break;  // no budget left: later prompts wait (first come, first served)
    rows_left -= int64_t(chunk.size());
    budget -= cost_.rows(s.prefilled(), int64_t(chunk.size()));
    first = false;
    if (s.prefilled() + int64_t(chunk.size()) == s.prompt_size()) s.prefetch_masks();
    rows_.push_back({s.state(), chunk, s.request().prompt_logprobs >= 0});
    // Its forks sample from its last row with samplers of their own: whole rows for them.
    const bool forks = std::find(leader_.begin(), leader_.end(), i) != leader_.end();
    rows_.back().logits_top_k = forks ? 0 : s.logits_top_k();
    s.chunk_inputs(&rows_.back());
    s.chunk_captures(&rows_.back(), cache_.get());
    row_slot_.push_back(i);
  }
  size_t off = 0;
  for (const auto& row : rows_) {
    row_logits_.push_back(off);
    off += row.all_logits || row.verify ? row.tokens.size() : 1;
  }
}

bool Stepper::plan_tower(const PromptImage& im, double* budget, bool first) {
  if (!tower_ || tower_->image != im.pending) {
    // Stepper::validate checked the grid, the patch rows and the tower.
    auto work = std::make_unique<TowerWork>();
    work->image = im.pending;
    const int64_t merge = model_.weights().vision->config.merge;
    const int64_t tokens = im.grid[0] * (im.grid[1] / merge) * (im.grid[2] / merge);
    work->out = std::make_shared<std::vector<float>>(size_t(tokens * model_.config().hidden));
    const core::Status st = model_.begin_image(im.pending->patches().data(), im.grid[0], im.grid[1], im.grid[2],
                                               work->out->data(), &work->run);
    QWEN35_CHECK_MSG(st.ok(), st.message().c_str());
    drop_tower();
    tower_ = std::move(work);
  }
  // The pieces the budget pays for; it keeps what they leave for the prompts behind.
  const model::VisionPlan plan = model_.plan_image(tower_->run, *budget, first);
  if (plan.empty(tower_->run)) return false;
  *budget -= plan.flops;
  tower_plan_ = plan;
  return true;
}

void Stepper::run_tower(StepOutput* out) {
  std::string failed;
  const std::string oom = out_of_memory([&] {
    out->tower_stages += tower_plan_->stages;
    out->tower_flops += tower_plan_->flops;
    const core::Result<bool> done = model_.advance_image(&tower_->run, tower_plan_->end);
    if (!done.ok()) failed = done.message();
    if (!done.ok() || !*done) return;
    tower_->image->set_rows(std::move(tower_->out));
    tower_.reset();
    ++out->images;
  });
  if (!oom.empty()) failed = oom + " in the vision tower";
  if (!failed.empty()) fail_tower(out, failed);
}

void Stepper::fail_tower(StepOutput* out, const std::string& why) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    Sequence* s = slots_[i].get();
    if (!s || s->phase() != Phase::kPrefill) continue;
    const PromptImage* im = s->image_due();
    if (!im || im->pending != tower_->image) continue;
    s->finish("error", out, why);
    release(i);
    ++out->done;
  }
  drop_tower();
}

void Stepper::drop_tower() {
  if (tower_) model_.end_image(&tower_->run);
  tower_.reset();
}

bool Stepper::tower_wanted() {
  for (auto& s : slots_) {
    if (!s || s->phase() != Phase::kPrefill) continue;
    const PromptImage* im = s->image_due();
    if (im && im->pending == tower_->image) return true;
  }
  return false;
}

// After the forward call: advances row r's sequence by its logits. Returns true when the
// sequence finished (its kDone event is in *out). A verification keeps the rows up to the last
// one sampled, so the state holds what plain decoding fed (docs/design.md §6, drafted == plain).
bool Stepper::advance(size_t r, const core::Status& st, StepOutput* out) {
  Sequence& s = *slots_[size_t(row_slot_[r])];
  if (!st.ok()) {
    s.finish("error", out, st.message());
    return true;
  }
  const float* logits = logits_.data() + row_logits_[r] * size_t(model_.config().vocab);
  switch (s.phase()) {
    case Phase::kPrefill: {
      const bool done = s.after_chunk(int64_t(rows_[r].tokens.size()), logits,
                                      rows_[r].all_logits, cache_.get(), out);
      const int64_t n = int64_t(rows_[r].tokens.size()), vocab = model_.config().vocab;
      if (s.prefilled() == s.prompt_size())  // its forks sample from its last row
        fork_followers(size_t(row_slot_[r]),
                       logits + (rows_[r].all_logits ? size_t((n - 1) * vocab) : 0), out);
      return done;
    }
    case Phase::kReplay:
      model_.commit(s.state(), int64_t(rows_[r].tokens.size()));
      s.after_replay(int64_t(rows_[r].tokens.size()));
      return false;
    case Phase::kDecode:
      return s.after_decode(logits, out);
    case Phase::kVerify: {
      bool done = false;
      const int64_t kept = s.after_verify(logits, out, &done);
      model_.commit(s.state(), kept);
      return done;
    }
    default:
      return false;
  }
}

}  // namespace qwen35::runtime
