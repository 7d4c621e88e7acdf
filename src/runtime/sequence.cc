#include "runtime/sequence.h"

#include <algorithm>

#include "core/check.h"
#include "model/model.h"
#include "runtime/logprobs.h"

namespace qwen35::runtime {
namespace {

std::string grammar_error(grammar::Unavailable::Why why) {
  return std::string("structured output: ") + grammar::Unavailable(why).what() +
         " (the format needs a larger automaton than this server allows: serve "
         "--grammar-max-mb)";
}

}  // namespace

const char* phase_name(Phase p) {
  switch (p) {
    case Phase::kQueued: return "queued";
    case Phase::kPrefill: return "prefill";
    case Phase::kReplay: return "replay";
    case Phase::kDecode: return "decode";
    case Phase::kVerify: return "verify";
    case Phase::kFinished: return "finished";
  }
  return "?";
}

Sequence::Sequence(GenerationRequest req, std::shared_ptr<RequestStream> stream,
                   const SpecOptions& spec)
    : req_(std::move(req)), stream_(std::move(stream)), spec_(req_.spec.value_or(spec)) {}

void Sequence::start(model::SequenceState* state, PrefixCache* cache, const SequenceLimits& lim,
                     uint64_t order, const std::function<void()>& before_resume) {
  QWEN35_CHECK(phase_ == Phase::kQueued && state->pos() == 0);
  state_ = state;
  lim_ = lim;
  phase_ = Phase::kPrefill;
  prefilled_ = 0;
  branch_ = 0;
  if (started_) {  // preempted: only the state is new; the prompt's logits sample nothing
    if (cache && req_.prompt_logprobs < 0) {
      if (before_resume) before_resume();
      prefilled_ = cache->resume(cache_key(), state_);
      if (const int64_t m = cache->matched(cache_key()); m > prefilled_) branch_ = m;
    }
    if (layout_) state_->set_rope_delta(layout_->rope_delta);
    return;
  }
  started_ = true;
  order_ = order;
  const auto& prompt = req_.prompt;
  if (!req_.images.empty()) {
    auto layout = layout_prompt(req_, lim_.hidden, lim_.vocab);
    QWEN35_CHECK_MSG(layout.ok(), layout.message().c_str());  // Stepper::validate checked it
    layout_ = std::make_unique<PromptLayout>(std::move(*layout));
  }
  if (cache) {
    if (before_resume) before_resume();
    prefilled_ = cache->resume(cache_key(), state_);
    // The prompt follows a cached path past its resume point by KV blocks alone: it parts
    // from that path between snapshots, and its prefill snapshots the branch point.
    if (const int64_t m = cache->matched(cache_key()); m > prefilled_) branch_ = m;
  }
  if (layout_) state_->set_rope_delta(layout_->rope_delta);
  if (spec_.method == SpecMethod::kLookup) {
    // The prediction first: a match in the prompt or the output, later in the context, wins.
    context_.reserve(req_.prediction.size() + size_t(lim_.context));  // decode appends in place
    context_.assign(req_.prediction.begin(), req_.prediction.end());
    context_.insert(context_.end(), prompt.begin(), prompt.end());
  }
  if (spec_.method != SpecMethod::kOff) {
    verify_.reserve(size_t(model::kMaxVerifyRows));
    drafts_.reserve(size_t(model::kMaxVerifyRows));
  }
  // A grammar finishes its value within what the request may still generate.
  if (req_.sampling.grammar) {
    int64_t room = lim_.context - prompt_size();
    if (req_.max_tokens >= 0) room = std::min(room, req_.max_tokens);
    req_.sampling.max_output = room;
  }
  sampler_ = std::make_shared<Sampler>(req_.sampling, lim_.vocab);
  sampler_->add_prompt(prompt);
  stream_->set_admitted(RequestTiming::Clock::now(), prefilled_, order + 1);
}

int64_t Sequence::snapshot_after(int64_t from) const {
  if (lim_.cache_interval <= 0) return -1;
  const int64_t block = kernels::kKvBlock, interval = lim_.cache_interval;
  const int64_t last = (prompt_size() - 1) / block * block;
  int64_t best = (from / interval + 1) * interval;
  if (best >= last) best = last > from ? last : -1;
  for (int64_t h : req_.snapshot_hints) {
    const int64_t p = std::min(h, last) / block * block;
    if (p > from && (best < 0 || p < best)) best = p;
  }
  if (branch_ > from && (best < 0 || branch_ < best)) best = branch_;  // on the grid, <= last
  return best;
}

const PromptImage* Sequence::image_due() {
  if (!layout_) return nullptr;
  const std::vector<ImageSpan>& spans = layout_->images;
  for (; next_image_ < spans.size(); ++next_image_) {
    const ImageSpan& sp = spans[next_image_];
    if (sp.end() <= prefilled_) continue;  // read already (resumed from the prefix cache)
    auto rows = req_.images[sp.image].merged();
    if (!rows) break;
    bound_.push_back(rows);
    bind_image(layout_.get(), sp, rows->data(), lim_.hidden);
  }
  if (next_image_ == spans.size()) return nullptr;
  // Chunks end on the grid, so the chunk that holds the image's first token starts at or before
  // the grid line below it.
  const int64_t line = spans[next_image_].first / model::kDeltaChunk * model::kDeltaChunk;
  return line <= prefilled_ ? &req_.images[spans[next_image_].image] : nullptr;
}

int64_t Sequence::bound_end() const {
  if (!layout_ || next_image_ == layout_->images.size()) return prompt_size();
  return layout_->images[next_image_].first;
}

std::span<const int32_t> Sequence::next_chunk(int64_t rows, double budget, const model::RowCost& cost,
                                              bool first) const {
  constexpr int64_t kGrid = model::kDeltaChunk;
  const int64_t n = prompt_size(), start = prefilled_, limit = bound_end();
  const int64_t snap = snapshot_after(start);
  int64_t end = start;
  while (end < n && !(end > start && end == snap)) {  // a chunk ends where a snapshot is due
    const int64_t next = std::min(n, (end / kGrid + 1) * kGrid);
    if (next > limit) break;  // the rows of an image there are not known yet
    if ((next - start > rows || cost.rows(start, next - start) > budget) && !(first && end == start)) break;
    end = next;
  }
  return std::span<const int32_t>(req_.prompt).subspan(size_t(start), size_t(end - start));
}

void Sequence::chunk_inputs(model::SequenceRows* rows) const {
  if (!layout_) return;
  const size_t at = size_t(prefilled_), n = rows->tokens.size();
  QWEN35_CHECK(int64_t(at + n) <= bound_end());  // every image token of the chunk has its row
  rows->positions = std::span<const int64_t>(layout_->positions).subspan(3 * at, 3 * n);
  rows->embeddings = std::span<const float* const>(layout_->inputs).subspan(at, n);
}

void Sequence::chunk_captures(model::SequenceRows* rows, PrefixCache* cache) {
  captures_.clear();
  capture_bufs_.clear();
  capture_dev_.clear();
  if (!cache || state_->recurrent_bytes() == 0) return;  // nothing to copy: keep_captures
  const int64_t end = prefilled_ + int64_t(rows->tokens.size());
  const size_t bytes = state_->recurrent_bytes(), floats = bytes / 4;
  const std::vector<int64_t> lines = cache->missing(cache_key(), prefilled_, end - 1, bytes);
  // The last ones into device memory while its budget has room (none on the CPU); of the
  // others only the last ones the bound can hold: the oldest provisional snapshot is the first
  // to go.
  capture_dev_ = cache->device_buffers(lines.size(), bytes);
  const size_t on_host = lines.size() - capture_dev_.size(), room = cache->max_bytes() / bytes;
  for (size_t i = on_host > room ? on_host - room : 0; i < lines.size(); ++i) {
    if (i >= on_host) {
      captures_.push_back({lines[i], nullptr, capture_dev_[i - on_host].get()});
      continue;
    }
    capture_bufs_.emplace_back(floats);
    captures_.push_back({lines[i], capture_bufs_.back().data()});
  }
  rows->captures = captures_;
}

void Sequence::keep_copies(PrefixCache* cache) {
  const auto key = cache_key();
  size_t host = 0, device = 0;
  for (const model::StateCapture& c : captures_) {
    if (c.device)
      cache->insert_provisional_on_device(key.first(size_t(c.pos)), *state_,
                                          std::move(capture_dev_[device++]));
    else
      cache->insert_provisional(key.first(size_t(c.pos)), *state_, std::move(capture_bufs_[host++]));
  }
  captures_.clear();
  capture_bufs_.clear();
  capture_dev_.clear();
}

void Sequence::keep_captures(PrefixCache* cache, int64_t start) {
  const auto key = cache_key();
  const size_t bytes = state_->recurrent_bytes();
  if (bytes == 0) {  // a pure-attention model: a snapshot is its blocks alone, nothing to copy
    for (int64_t line : cache->missing(key, start, prefilled_, 0))
      cache->insert_provisional(key.first(size_t(line)), *state_, {});
    return;
  }
  keep_copies(cache);
  const int64_t line = prefilled_ / kernels::kKvBlock * kernels::kKvBlock;
  if (line == prefilled_ && !cache->missing(key, line - 1, line, bytes).empty()) {
    if (auto d = cache->device_copy(*state_)) {  // a copy on the device where there is room
      cache->insert_provisional_on_device(key.first(size_t(line)), *state_, std::move(d));
      return;
    }
    std::vector<float> snap(bytes / 4);
    state_->save_recurrent(snap.data());
    cache->insert_provisional(key.first(size_t(line)), *state_, std::move(snap));
  }
}

std::span<const int32_t> Sequence::cache_key() const {
  return layout_ ? std::span<const int32_t>(layout_->cache_key) : std::span<const int32_t>(req_.prompt);
}

bool Sequence::after_chunk(int64_t rows, const float* logits, bool all, PrefixCache* cache,
                           StepOutput* out) {
  const int64_t n = prompt_size(), vocab = lim_.vocab;
  const float* last = logits;
  if (all) {  // prompt logprobs: row j predicts prompt token prefilled + j + 1
    // Rows computed again after a preemption were sent already.
    if (prefilled_ + rows > lp_sent_) {
      StreamEvent ev;
      ev.kind = StreamEvent::kPrompt;
      std::vector<int32_t> order;
      for (int64_t j = std::max<int64_t>(0, lp_sent_ - prefilled_); j < rows && prefilled_ + j + 1 < n; ++j)
        ev.prompt.push_back(token_logprobs(logits + size_t(j * vocab), vocab,
                                           req_.prompt[size_t(prefilled_ + j + 1)],
                                           req_.prompt_logprobs, &order));
      stream_->push(std::move(ev));
      lp_sent_ = prefilled_ + rows;
    }
    last += size_t((rows - 1) * vocab);
  }
  const int64_t start = prefilled_;
  prefilled_ += rows;
  out->prompt += rows;
  // Copies in device memory go into the tree first: they hold device room, which an ordinary
  // snapshot's insert may take from them (none on the CPU, whose order is this one's too).
  if (cache && !capture_dev_.empty()) keep_copies(cache);
  if (cache && prefilled_ == snapshot_after(prefilled_ - 1))
    cache->insert(cache_key().first(size_t(prefilled_)), *state_);
  if (cache) keep_captures(cache, start);
  if (prefilled_ < n) return false;
  if (prompt_done_) {
    prompt_again();
    return false;
  }
  return prompt_read(last, out);
}

void Sequence::prompt_again() {
  replayed_ = 0;
  if (replay_end_ > 0)
    phase_ = Phase::kReplay;
  else
    phase_ = spec_.method == SpecMethod::kOff ? Phase::kDecode : Phase::kVerify;
}

std::span<const int32_t> Sequence::replay_rows() const {
  const int64_t n = std::min<int64_t>(model::kMaxVerifyRows, replay_end_ - replayed_);
  return std::span<const int32_t>(out_).subspan(size_t(replayed_), size_t(n));
}

void Sequence::after_replay(int64_t rows) {
  QWEN35_CHECK(phase_ == Phase::kReplay && replayed_ + rows <= replay_end_);
  replayed_ += rows;
  if (replayed_ < replay_end_) return;
  replay_end_ = replayed_ = 0;
  phase_ = spec_.method == SpecMethod::kOff ? Phase::kDecode : Phase::kVerify;
}

void Sequence::preempt(PrefixCache* cache) noexcept {
  QWEN35_CHECK(!waiting() && state_ && phase_ != Phase::kQueued && phase_ != Phase::kFinished);
  if (phase_ == Phase::kDecode || phase_ == Phase::kVerify) {
    // Every token emitted but the last one is in the state; the last is its next row.
    replay_end_ = state_->pos() - prompt_size();
    QWEN35_CHECK(replay_end_ + 1 == int64_t(out_.size()));
  }
  // A prompt part computed on the grid: a snapshot, so that it resumes there (the cache's
  // bound and eviction decide whether it stays). A copy of the state; skipped when memory is
  // short, since it only saves time.
  if (cache && phase_ == Phase::kPrefill && prefilled_ > 0 && prefilled_ % kernels::kKvBlock == 0 &&
      state_->pos() == prefilled_) {
    try {
      cache->insert(cache_key().first(size_t(prefilled_)), *state_);
    } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    }
  }
  phase_ = Phase::kQueued;
  state_ = nullptr;
  prefilled_ = 0;
  replayed_ = 0;
  captures_.clear();
  capture_bufs_.clear();
  capture_dev_.clear();
  verify_.clear();
  drafts_.clear();
  stream_->add_preemption();
}

bool Sequence::fork_from(const Sequence& leader, const float* logits, StepOutput* out,
                         bool* done) {
  QWEN35_CHECK(phase_ == Phase::kPrefill && prefilled_ == 0 && leader.req_.prompt == req_.prompt &&
               leader.prefilled_ == leader.prompt_size());
  *done = false;
  if (!state_->fork_from(*leader.state_)) return false;
  prefilled_ = prompt_size();
  stream_->set_reused(prefilled_);  // nothing of the prompt was computed for this sequence
  *done = prompt_read(logits, out);
  return true;
}

bool Sequence::prompt_read(const float* last, StepOutput* out) {
  prompt_done_ = true;
  stream_->set_prompt_read(RequestTiming::Clock::now());
  if (req_.max_tokens == 0) {
    finish("length", out);
    return true;
  }
  phase_ = spec_.method == SpecMethod::kOff ? Phase::kDecode : Phase::kVerify;
  return sample(last, state_->pos(), out);
}

int32_t Sequence::logits_top_k() const {
  if (!sampler_ || req_.prompt_logprobs >= 0) return 0;
  const SamplingParams& p = sampler_->params();
  if (p.logprobs >= 0 || p.grammar || p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f ||
      p.presence_penalty != 0.0f)
    return 0;
  // Greedy is the first of the ranking; top-k keeps k candidates for the softmax, top-p, min-p
  // and the draw. A k that is not far below the vocabulary saves nothing (and k >= vocab would
  // let the -inf rows into the candidates).
  const int32_t k = p.temperature == 0.0f ? 1 : p.top_k;
  return k > 0 && int64_t(k) < lim_.vocab / 4 ? k : 0;
}

bool Sequence::after_decode(const float* logits, StepOutput* out) {
  return sample(logits, state_->pos(), out);
}

bool Sequence::sample(const float* logits, int64_t fed, StepOutput* out) {
  grammar::Unavailable::Why why = grammar::Unavailable::kExhausted;
  const auto access = lim_.workers ? grammar::Access::kBounded : grammar::Access::kBuild;
  auto s = sampler_->try_sample(logits, access, &why);
  if (s) return emit(std::move(*s), fed, out);
  if (why == grammar::Unavailable::kExhausted) {
    finish("error", out, grammar_error(why));
    return true;
  }
  // More than the engine thread does, or the automaton busy on a worker: a worker samples this
  // row, and the same token comes out (the sample is a function of the row and the sampler).
  auto d = std::make_shared<DeferredSample>();
  d->sampler = sampler_;
  d->logits.assign(logits, logits + lim_.vocab);
  d->fed = fed;
  deferred_ = d;
  lim_.workers->sample(std::move(d));
  return false;
}

bool Sequence::resume(StepOutput* out) {
  QWEN35_CHECK(sample_ready());
  const std::shared_ptr<DeferredSample> d = std::move(deferred_);
  deferred_.reset();
  if (!d->result) {
    finish("error", out,
           d->out_of_memory ? "the server ran out of memory while sampling" : grammar_error(d->why));
    return true;
  }
  return emit(std::move(*d->result), d->fed, out);
}

void Sequence::prefetch_masks() {
  if (!lim_.workers || !req_.sampling.grammar || waiting()) return;
  std::span<const int32_t> drafts;
  if (phase_ == Phase::kVerify && !verify_.empty())
    drafts = std::span<const int32_t>(verify_).subspan(1);
  lim_.workers->prefetch(req_.sampling.grammar, sampler_->masks_ahead(drafts), prefetching_);
}

bool Sequence::emit(SampleResult s, int64_t fed, StepOutput* out) {
  const auto& eos = req_.eos_ids;
  if (std::find(eos.begin(), eos.end(), s.token) != eos.end()) {
    finish("stop", out);
    return true;
  }
  out_.push_back(s.token);  // first: when it fails, nothing was sent
  next_token_ = s.token;
  ++generated_;
  ++out->generated;
  if (spec_.method == SpecMethod::kLookup) context_.push_back(s.token);
  StreamEvent ev;
  ev.sample = std::move(s);
  stream_->push(std::move(ev));
  if ((req_.max_tokens >= 0 && generated_ >= req_.max_tokens) || fed + 1 > lim_.context) {
    finish("length", out);
    return true;
  }
  return false;
}

int64_t Sequence::draft_budget() {
  int64_t k = spec_.draft_tokens;
  if (req_.max_tokens >= 0) k = std::min(k, req_.max_tokens - generated_ - 1);
  k = std::min(k, lim_.context - state_->pos() - 1);
  return draft_length_.next(k);
}

void Sequence::set_verify_rows(std::span<const int32_t> drafts) {
  verify_.assign(1, next_token_);
  // The grammar's mask checks drafts, from what the automaton has built on the engine thread.
  const size_t ok = sampler_->allowed_prefix(
      drafts, lim_.workers ? grammar::Access::kBounded : grammar::Access::kBuild);
  verify_.insert(verify_.end(), drafts.begin(), drafts.begin() + ptrdiff_t(ok));
}

int64_t Sequence::after_verify(const float* logits, StepOutput* out, bool* done) {
  const int64_t n = int64_t(verify_.size()), pos0 = state_->pos() - n;
  int64_t kept = 0;
  *done = false;
  while (kept < n && !*done) {
    const float* lg = logits + size_t(kept * lim_.vocab);
    ++kept;
    *done = sample(lg, pos0 + kept, out);
    if (waiting()) break;  // that row's sample went to a worker: the rows after it are dropped
    if (kept < n && next_token_ != verify_[size_t(kept)]) break;  // the draft there is rejected
  }
  out->drafted += n - 1;
  out->accepted += kept - 1;
  draft_length_.update(n - 1, kept - 1);
  for (int64_t i = 0; i + 1 < n; ++i) ++out->drafted_at[size_t(i)];
  for (int64_t i = 0; i + 1 < kept; ++i) ++out->accepted_at[size_t(i)];
  return kept;
}

void Sequence::finish(const char* reason, StepOutput* out, std::string_view error) noexcept {
  phase_ = Phase::kFinished;
  try {
    StreamEvent ev;
    ev.kind = StreamEvent::kDone;
    ev.finish_reason = reason;
    ev.error = error;
    if (out) out->finished.emplace_back(stream_, std::move(ev));
    else stream_->push(std::move(ev));
  } catch (const std::exception&) {  // std::bad_alloc, std::length_error
    stream_->close(reason, error.empty() ? nullptr : "the server ran out of memory");
    if (out) ++out->closed;
  }
}

}  // namespace qwen35::runtime
