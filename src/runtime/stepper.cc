#include "runtime/stepper.h"

#include <algorithm>

#include "core/check.h"

namespace qwen35::runtime {

Stepper::Stepper(model::Model& model, const EngineOptions& opts) : model_(model), opts_(opts) {
  opts_.parallel = std::max(1, opts_.parallel);
  opts_.step_tokens = std::max<int64_t>(opts_.step_tokens, model::kDeltaChunk);
  cost_ = model_.row_cost();
  budget_ = double(opts_.step_tokens) * (cost_.token + cost_.key * double(opts_.step_tokens));
  const int64_t block = kernels::kKvBlock;
  const int64_t per_slot = (opts_.ctx + block - 1) / block;
  if (opts_.kv_blocks <= 0) opts_.kv_blocks = per_slot * opts_.parallel;
  opts_.cache_interval = std::max<int64_t>(block, opts_.cache_interval / block * block);
  if (opts_.forward && !opts_.draft && opts_.spec.method == SpecMethod::kMtp)  // split: no drafts
    opts_.spec = SpecOptions{};
  mtp_ = opts_.spec.method == SpecMethod::kMtp;
  // MTP drafting needs the head's cache in every state, and so in the pool: in this process's,
  // or under a split in the last rank's (the kPool op below says so), which drafts.
  if (mtp_ && !opts_.forward && !model_.mtp_enabled()) {
    const core::Status st = model_.enable_mtp();
    QWEN35_CHECK_MSG(st.ok(), st.message().c_str());
  }
  pool_ = model_.new_pool(opts_.kv_blocks, mtp_ && !opts_.forward);
  for (int i = 0; i < opts_.parallel; ++i)
    states_.push_back(model_.new_state(opts_.ctx, pool_.get()));
  if (opts_.cache_bytes > 0)
    cache_ = std::make_unique<PrefixCache>(pool_.get(), size_t(opts_.cache_bytes),
                                           opts_.forward ? nullptr : model_.snapshot_store(),
                                           size_t(std::max<int64_t>(opts_.cache_device_bytes, 0)));
  if (opts_.forward) {
    // The other ranks' states share a pool as these do. It has a block per slot more: a rank
    // gives back a verification's rejected blocks at the sequence's next step, not at once.
    record({model::StateOp::kPool, mtp_ ? 1 : -1, uint64_t(opts_.kv_blocks + opts_.parallel),
            uint64_t(opts_.parallel), opts_.ctx});
    if (cache_)
      cache_->set_observer([this](const model::StateOp& op, const model::SequenceState* st) { record(op, st); });
  }
  slots_.resize(size_t(opts_.parallel));
  preempted_.reserve(size_t(opts_.parallel));
  leader_.assign(size_t(opts_.parallel), -1);
  // A sequence has at most a sample and a prefetch in flight: no job waits for a thread.
  workers_ = std::make_unique<SampleWorkers>(2 * opts_.parallel, std::function<void()>{});
}

Stepper::~Stepper() = default;

bool Stepper::validate(const GenerationRequest& req, std::string* message) const {
  const int64_t n = int64_t(req.prompt.size());
  if (n == 0) {
    *message = "the prompt is empty";
    return false;
  }
  if (n >= opts_.ctx) {
    *message = "the prompt has " + std::to_string(n) + " tokens, more than the context of " +
               std::to_string(opts_.ctx) + " tokens allows (at most " +
               std::to_string(opts_.ctx - 1) + ")";
    return false;
  }
  if (const SpecOptions sp = req.spec.value_or(opts_.spec); sp.method != SpecMethod::kOff) {
    if (opts_.forward && !opts_.draft && sp.method == SpecMethod::kMtp) {
      *message = "speculative method \"mtp\" does not run on a model split over MPI ranks yet (its head "
                 "is on the last rank); use \"lookup\"";
      return false;
    }
    if (sp.draft_tokens < 1 || sp.draft_tokens >= model::kMaxVerifyRows) {
      *message = "draft_tokens must be in [1, " + std::to_string(model::kMaxVerifyRows - 1) +
                 "], got " + std::to_string(sp.draft_tokens);
      return false;
    }
    if (sp.method == SpecMethod::kMtp && !mtp_) {
      *message = model_.weights().mtp || (opts_.forward && model_.weights().has_mtp)
                     ? "speculative method \"mtp\" needs a server started with --spec mtp (its "
                       "sequences keep the MTP head's cache); use \"lookup\""
                     : "this checkpoint has no usable MTP head; use \"lookup\"";
      return false;
    }
  }
  const int64_t vocab = model_.config().vocab;
  // Drafted tokens are fed to the model too: a prediction's ids are checked as a prompt's.
  for (const auto* ids : {&req.prompt, &req.prediction}) {
    for (int32_t t : *ids) {
      if (t < 0 || t >= vocab) {
        *message = "token id " + std::to_string(t) + " is out of range [0, " +
                   std::to_string(vocab) + ")";
        return false;
      }
    }
  }
  for (int32_t t : {req.sampling.think_start, req.sampling.think_end}) {
    if (t >= vocab) {
      *message = "thinking token id " + std::to_string(t) + " is out of range [0, " + std::to_string(vocab) + ")";
      return false;
    }
  }
  if (!req.images.empty()) {
    if (auto l = layout_prompt(req, model_.config().hidden, vocab); !l.ok()) {
      *message = l.message();
      return false;
    }
    if (!pending_images_fit(req, message)) return false;
  }
  if (auto s = req.sampling.validate(); !s.ok()) {
    *message = s.message();
    return false;
  }
  if (const int64_t held = pool_->n_blocks() * kernels::kKvBlock; n >= held) {
    *message = "the prompt has " + std::to_string(n) + " tokens, more than the KV pool of " +
               std::to_string(held) + " positions allows (--mem-budget-mb)";
    return false;
  }
  return true;
}

// Images the tower is still to run: the model has a tower that takes their grids and patch rows.
bool Stepper::pending_images_fit(const GenerationRequest& req, std::string* message) const {
  for (size_t i = 0; i < req.images.size(); ++i) {
    const PromptImage& im = req.images[i];
    if (im.rows) continue;
    const model::ModelWeights& w = model_.weights();
    if (!w.vision) {
      *message = "image " + std::to_string(i) + ": " + (w.vision_problem.empty() ? "no vision tower" : w.vision_problem);
      return false;
    }
    const model::VisionTower tower(*w.vision, model_.ops());
    if (core::Status st = tower.check_grid(im.grid[0], im.grid[1], im.grid[2]); !st.ok()) {
      *message = "image " + std::to_string(i) + ": " + st.message();
      return false;
    }
    const int64_t want = model::VisionTower::rows(im.grid[0], im.grid[1], im.grid[2]) * w.vision->config.patch_dim();
    if (im.pending->patch_values() != want) {
      *message = "image " + std::to_string(i) + " has " + std::to_string(im.pending->patch_values()) +
                 " patch values for a grid of " + std::to_string(want);
      return false;
    }
  }
  return true;
}

int64_t Stepper::context() const {
  return std::min(opts_.ctx, pool_->n_blocks() * kernels::kKvBlock);
}

// What a sequence needs now: its prompt, the tokens it replays and one row more (the context
// at most), less the blocks it holds. For a running sequence at least the block its next step
// may open; a fork waiting for its leader's prompt needs only its partial block.
int64_t Stepper::kv_deficit(const Sequence& s) const {
  constexpr int64_t kBlock = kernels::kKvBlock;
  const auto near = [&](const Sequence& q) {
    return (std::min(context(), q.kv_need()) + kBlock - 1) / kBlock;
  };
  int64_t need = 1;
  if (!(cache_ && s.fork_key() && !s.started() && leader_for(s.fork_key()) >= 0)) {
    need = near(s);
    // The blocks below its resume point are the cache's already (a preempted request for
    // prompt logprobs computes its prompt without the cache; an image's tokens are keyed by
    // the image only once the sequence has started).
    if (cache_ && (s.started() ? s.request().prompt_logprobs < 0 : s.request().images.empty()))
      need -= cache_->resumable(s.prompt_key(), states_[0]->recurrent_bytes()) / kBlock;
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Sequence* q = slots_[i].get();
    if (!q) continue;
    need += leader_[i] >= 0 ? 1 : std::max<int64_t>(1, near(*q) - q->state()->blocks_held());
  }
  return need - pool_->free_blocks();
}

Sequence* Stepper::next_to_admit(const std::deque<std::unique_ptr<Sequence>>& waiting,
                                 ptrdiff_t* at) const {
  if (!preempted_.empty()) {
    size_t best = 0;
    for (size_t k = 1; k < preempted_.size(); ++k)
      if (preempted_[k]->order() < preempted_[best]->order()) best = k;
    *at = ptrdiff_t(best);
    return preempted_[best].get();
  }
  if (waiting.empty()) return nullptr;
  // Round-robin by group: the first sequence of a later group than the last one admitted, else
  // the first one (groups are numbered in submission order, and the queue keeps that order).
  size_t pick = 0;
  for (size_t k = 0; k < waiting.size(); ++k)
    if (waiting[k]->group() > last_group_) {
      pick = k;
      break;
    }
  *at = -ptrdiff_t(pick) - 1;
  return waiting[pick].get();
}

// A sequence is admitted when the free blocks cover its next step beside the running ones'.
// Making room is explicit: prefix-cache entries are evicted only for what the sequence at the
// head lacks now; when even that leaves it short, it waits, and so do those behind it.
void Stepper::admit(std::deque<std::unique_ptr<Sequence>>* waiting, StepOutput* out) {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i]) continue;
    ptrdiff_t at = 0;
    Sequence* next = next_to_admit(*waiting, &at);
    if (!next) break;
    if (const int64_t d = kv_deficit(*next); d > 0 && cache_)
      cache_->free_blocks(pool_->free_blocks() + d);
    if (kv_deficit(*next) > 0) break;
    std::unique_ptr<Sequence> s;
    if (at >= 0) {
      s = std::move(preempted_[size_t(at)]);
      preempted_.erase(preempted_.begin() + at);
    } else {
      s = std::move((*waiting)[size_t(-at - 1)]);
      waiting->erase(waiting->begin() + (-at - 1));
      last_group_ = s->group();
    }
    reset_state(i);
    const SequenceLimits lim{context(), model_.config().vocab, model_.config().hidden,
                             cache_ ? opts_.cache_interval : 0, workers_.get()};
    // A fork of a prompt being computed waits for it and takes no cache entry of its own.
    // Without the prefix cache every sequence computes its whole prompt (the reference mode).
    // A preempted sequence forks from nobody: its first sample is taken already.
    const int leader = cache_ && s->fork_key() && !s->started() ? leader_for(s->fork_key()) : -1;
    const bool again = s->started();
    const std::string oom = out_of_memory([&] {
      s->start(states_[i].get(), leader < 0 ? cache_.get() : nullptr, lim, next_order_,
               opts_.before_resume);
    });
    if (!again) ++next_order_;
    if (!oom.empty()) {
      reset_state(i);
      s->finish("error", out, oom + " while starting the request");
      continue;
    }
    if (!again) prompt_received_ += s->prompt_size();
    slots_[i] = std::move(s);
    leader_[i] = leader;
  }
}

int Stepper::leader_for(uint64_t key) const {
  for (size_t j = 0; j < slots_.size(); ++j) {
    const Sequence* s = slots_[j].get();
    if (s && s->fork_key() == key && s->phase() == Phase::kPrefill && leader_[j] < 0)
      return int(j);
  }
  return -1;
}

void Stepper::fork_followers(size_t leader, const float* logits, StepOutput* out) {
  for (size_t k = 0; k < slots_.size(); ++k) {
    if (leader_[k] != int(leader)) continue;
    leader_[k] = -1;  // forked, or (no block for the copy) computing the prompt itself
    bool done = false;
    if (std::string oom = out_of_memory([&] {
          const bool forked = slots_[k]->fork_from(*slots_[leader], logits, out, &done);
          if (forked) record({model::StateOp::kFork, int64_t(k), uint64_t(0), uint64_t(leader), 0});
        });
        !oom.empty()) {
      slots_[k]->finish("error", out, oom + " while sampling");
      done = true;
    }
    if (done) {
      release(k);
      ++out->done;
    }
  }
}

void Stepper::drop_cancelled(std::deque<std::unique_ptr<Sequence>>* waiting, StepOutput* out) {
  for (auto it = waiting->begin(); it != waiting->end();) {
    if (!(*it)->cancelled()) {
      ++it;
      continue;
    }
    ++out->cancelled;
    (*it)->finish("cancelled", out);
    it = waiting->erase(it);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i] || !slots_[i]->cancelled()) continue;
    ++out->cancelled;
    slots_[i]->finish("cancelled", out);
    release(i);
  }
  for (auto it = preempted_.begin(); it != preempted_.end();) {
    if (!(*it)->cancelled()) {
      ++it;
      continue;
    }
    ++out->cancelled;
    (*it)->finish("cancelled", out);
    it = preempted_.erase(it);
  }
}

void Stepper::fail_running(StepOutput* out, std::string_view why) noexcept {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i]) continue;
    slots_[i]->finish("error", out, why);
    release(i);
    ++out->done;
  }
}

void Stepper::release(size_t i) {
  for (int& l : leader_)  // its forks, if its prompt was not read, compute it themselves
    if (l == int(i)) l = -1;
  leader_[i] = -1;
  reset_state(i);  // its KV blocks go back to the pool
  slots_[i].reset();
}

void Stepper::reset_state(size_t i) {
  states_[i]->reset();
  record({model::StateOp::kReset, int64_t(i)});
}

void Stepper::record(model::StateOp op, const model::SequenceState* state) {
  if (!opts_.forward) return;
  if (state)
    for (size_t i = 0; i < states_.size(); ++i)
      if (states_[i].get() == state) op.seq = int64_t(i);
  state_ops_.push_back(op);
}

bool Stepper::running() const {
  return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return bool(s); });
}

void Stepper::wait_for_sample() {
  const int64_t seen = workers_->samples_done();  // before the checks: no finish is missed
  for (const auto& s : slots_)
    if (s && (!s->waiting() || s->sample_ready())) return;
  if (running()) workers_->wait_for_sample(seen);
}

void Stepper::cancel_running() {
  for (auto& s : slots_)
    if (s) s->stream()->cancel();
  for (auto& s : preempted_) s->stream()->cancel();
}

void Stepper::gauges(EngineStats* s) const {
  s->slots = opts_.parallel;
  s->kv_blocks_total = pool_->n_blocks();
  s->kv_tokens_total = pool_->n_blocks() * kernels::kKvBlock;
  s->kv_block_bytes = int64_t(pool_->block_bytes());
  s->kv_types = pool_->types();
  s->state_bytes = int64_t(pool_->block_bytes()) * pool_->n_blocks();
  for (const auto& st : states_) s->state_bytes += int64_t(st->recurrent_bytes());
  if (opts_.spec.method != SpecMethod::kOff)  // each slot's verification records
    s->state_bytes +=
        int64_t(model::SequenceState::verify_bytes(model_.config(), pool_->mtp())) * opts_.parallel;
  int64_t busy = 0, used = 0;
  for (const auto& q : slots_) {
    if (!q) continue;
    ++busy;
    used += q->state()->pos();
  }
  s->slots_busy = busy;
  s->prompt_received = prompt_received_;
  s->running = busy;
  s->kv_tokens_used = used;
  s->kv_blocks_used = pool_->used_blocks();
  s->preemptions = preemptions_;
  s->preempted = int64_t(preempted_.size());
  if (cache_) s->cache = cache_->stats();
}

}  // namespace qwen35::runtime
