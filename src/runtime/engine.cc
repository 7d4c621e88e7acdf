#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "runtime/engine_active.h"

namespace qwen35::runtime {

bool RequestStream::next(StreamEvent* ev, std::chrono::milliseconds timeout) {
  std::unique_lock lk(mu_);
  if (!cv_.wait_for(lk, timeout, [&] { return !events_.empty(); })) return false;
  *ev = std::move(events_.front());
  events_.pop_front();
  return true;
}

void RequestStream::push(StreamEvent ev) {
  std::function<void()> wake;
  {
    std::lock_guard lk(mu_);
    events_.push_back(std::move(ev));
    wake = waker_;
  }
  cv_.notify_one();
  if (wake) wake();
}

void RequestStream::set_waker(std::function<void()> waker) {
  std::lock_guard lk(mu_);
  waker_ = std::move(waker);
}

RequestTiming RequestStream::timing() const {
  std::lock_guard lk(mu_);
  return timing_;
}

void RequestStream::set_admitted(RequestTiming::Clock::time_point t, int64_t reused) {
  std::lock_guard lk(mu_);
  timing_.admitted = t;
  timing_.prompt_reused = reused;
}

void RequestStream::set_prompt_read(RequestTiming::Clock::time_point t) {
  std::lock_guard lk(mu_);
  timing_.prompt_read = t;
  timing_.prompt_done = true;
}

namespace {

// The log-softmax of `logits` at `token`, and the `top` most likely tokens (ties: lower id).
SampleResult score(const float* logits, int64_t vocab, int32_t token, int32_t top,
                   std::vector<int32_t>* order) {
  float mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - double(mx));
  const double lse = double(mx) + std::log(sum);
  SampleResult r;
  r.token = token;
  r.logprob = float(double(logits[token]) - lse);
  if (top > 0) {
    order->resize(size_t(vocab));
    std::iota(order->begin(), order->end(), 0);
    const auto k = std::min<int64_t>(top, vocab);
    std::partial_sort(order->begin(), order->begin() + k, order->end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i)
      r.top.push_back({(*order)[size_t(i)], float(double(logits[(*order)[size_t(i)]]) - lse)});
  }
  return r;
}

}  // namespace

Engine::Engine(model::Model& model, const EngineOptions& opts) : model_(model), opts_(opts) {
  opts_.parallel = std::max(1, opts_.parallel);
  opts_.step_tokens = std::max<int64_t>(opts_.step_tokens, model::kDeltaChunk);
  const int64_t per_slot = (opts_.ctx + kernels::kKvBlock - 1) / kernels::kKvBlock;
  if (opts_.kv_blocks <= 0) opts_.kv_blocks = per_slot * opts_.parallel;
  // MTP drafting needs the head's cache in every state, and so in the pool.
  if (opts_.spec.method == SpecMethod::kMtp && !model_.mtp_enabled()) {
    const core::Status st = model_.enable_mtp();
    QWEN35_CHECK_MSG(st.ok(), st.message().c_str());
  }
  pool_ = model_.new_pool(opts_.kv_blocks, opts_.spec.method == SpecMethod::kMtp);
  for (int i = 0; i < opts_.parallel; ++i)
    states_.push_back(model_.new_state(opts_.ctx, pool_.get()));
  if (opts_.cache_bytes > 0) cache_ = std::make_unique<PrefixCache>(pool_.get(), size_t(opts_.cache_bytes));
  if (cache_ && !opts_.cache_dir.empty()) {
    const int64_t n = cache_->load(opts_.cache_dir, opts_.cache_fingerprint,
                                   int64_t(states_[0]->recurrent_bytes() / 4), &cache_log_);
    cache_log_.push_back("loaded " + std::to_string(n) + " prefix-cache snapshots from " +
                         opts_.cache_dir);
    stats_.kv_blocks_used = pool_->used_blocks();
    stats_.cache = cache_->stats();
  }
  opts_.cache_interval = std::max<int64_t>(kernels::kKvBlock, opts_.cache_interval / kernels::kKvBlock * kernels::kKvBlock);
  slots_.resize(size_t(opts_.parallel));
  kept_.resize(size_t(opts_.parallel));
  stats_.slots = opts_.parallel;
  stats_.kv_blocks_total = pool_->n_blocks();
  stats_.kv_tokens_total = pool_->n_blocks() * kernels::kKvBlock;
  stats_.state_bytes = int64_t(pool_->block_bytes()) * pool_->n_blocks();
  for (const auto& st : states_) stats_.state_bytes += int64_t(st->recurrent_bytes());
  if (opts_.spec.method != SpecMethod::kOff)  // each slot's verification records
    stats_.state_bytes +=
        int64_t(model::SequenceState::verify_bytes(model_.config(), pool_->mtp())) * opts_.parallel;
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(false); }

bool Engine::validate(const GenerationRequest& req, std::string* message) const {
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
    if (sp.draft_tokens < 1 || sp.draft_tokens >= model::kMaxVerifyRows) {
      *message = "draft_tokens must be in [1, " + std::to_string(model::kMaxVerifyRows - 1) +
                 "], got " + std::to_string(sp.draft_tokens);
      return false;
    }
    if (sp.method == SpecMethod::kMtp && !pool_->mtp()) {
      *message = model_.weights().mtp
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

// The first position after `from` (default: what a has computed) where the prefix cache takes
// a snapshot of a's prompt: each multiple of cache_interval, and the prompt's last grid boundary
// (the longest prefix a request for the same prompt can resume from). -1: none, or no cache.
int64_t Engine::snapshot_after(const Active& a, int64_t from) const {
  if (!cache_) return -1;
  if (from < 0) from = a.prefilled;
  const int64_t n = int64_t(a.req.prompt.size());
  const int64_t last = (n - 1) / kernels::kKvBlock * kernels::kKvBlock;
  int64_t best = (from / opts_.cache_interval + 1) * opts_.cache_interval;
  if (best >= last) best = last > from ? last : -1;
  for (int64_t h : a.req.snapshot_hints) {
    const int64_t p = std::min(h, last) / kernels::kKvBlock * kernels::kKvBlock;
    if (p > from && (best < 0 || p < best)) best = p;
  }
  return best;
}

int64_t Engine::context() const {
  return std::min(opts_.ctx, pool_->n_blocks() * kernels::kKvBlock);
}

int64_t Engine::blocks_for(const GenerationRequest& r) const {
  const int64_t n = int64_t(r.prompt.size());
  const int64_t worst = std::min(context(), r.max_tokens < 0 ? opts_.ctx : n + r.max_tokens);
  return (worst + kernels::kKvBlock - 1) / kernels::kKvBlock;
}

// Whether the pool can promise `r`, admitted into free slot i, its worst case now: the free
// blocks must cover what every running request may still take, plus r's worst case. Slot i's
// kept state is resumed (its blocks count for r) or dropped; other idle slots' kept states
// (keep_state) and then prefix-cache entries are dropped when they stand in the way.
bool Engine::fits_locked(const GenerationRequest& r, size_t i) {
  std::vector<int32_t>& kept = kept_[i];
  const auto& prompt = r.prompt;
  const bool resume = r.keep_state && !kept.empty() && kept.size() < prompt.size() &&
                      std::equal(kept.begin(), kept.end(), prompt.begin());
  if (!kept.empty() && !resume) {
    kept.clear();
    states_[i]->reset();
  }
  int64_t promised = blocks_for(r);
  for (const auto& s : slots_)
    if (s) promised += blocks_for(s->req);
  if (promised > pool_->n_blocks()) return false;  // even an empty pool could not promise it
  auto deficit = [&] {
    int64_t future = blocks_for(r) - (resume ? states_[i]->blocks_held() : 0);
    for (const auto& s : slots_)
      if (s) future += std::max<int64_t>(0, blocks_for(s->req) - s->state->blocks_held());
    return future - pool_->free_blocks();
  };
  if (deficit() > 0) {
    for (size_t j = 0; j < slots_.size(); ++j) {
      if (slots_[j] || j == i || kept_[j].empty()) continue;
      kept_[j].clear();
      states_[j]->reset();
    }
  }
  if (deficit() > 0 && cache_) cache_->free_blocks(pool_->free_blocks() + deficit());
  return deficit() <= 0;
}

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest req, SubmitError* err,
                                              std::string* message) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(req));
  auto streams = submit_group(std::move(one), err, message);
  return streams.empty() ? nullptr : std::move(streams[0]);
}

std::vector<std::shared_ptr<RequestStream>> Engine::submit_group(
    std::vector<GenerationRequest> reqs, SubmitError* err, std::string* message) {
  *err = SubmitError::kNone;
  const int64_t k = int64_t(reqs.size());
  if (k > capacity()) {  // even an idle engine refuses it: retrying cannot help
    *err = SubmitError::kInvalid;
    *message = "the request needs " + std::to_string(k) + " sequences at once, more than the " +
               std::to_string(capacity()) + " this server can hold (" +
               std::to_string(opts_.parallel) + " running + " + std::to_string(opts_.max_queue) +
               " waiting)";
    return {};
  }
  for (const auto& r : reqs) {
    if (!validate(r, message)) {
      *err = SubmitError::kInvalid;
      return {};
    }
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) streams.push_back(std::make_shared<RequestStream>(r.prompt.size()));
  {
    std::lock_guard lk(mu_);
    if (!accepting_) {
      *err = SubmitError::kShuttingDown;
      *message = "the server is shutting down";
      return {};
    }
    // Free slots count as queue places: the engine thread admits from the queue into them.
    const int64_t free_slots = stats_.slots - stats_.slots_busy;
    if (int64_t(queue_.size()) + k > opts_.max_queue + free_slots) {
      *err = SubmitError::kQueueFull;
      *message = "the request queue is full (" + std::to_string(opts_.max_queue) +
                 " waiting); retry later";
      return {};
    }
    for (size_t i = 0; i < reqs.size(); ++i)
      queue_.push_back(Pending{std::move(reqs[i]), streams[i]});
    stats_.queued = int64_t(queue_.size());
  }
  cv_.notify_one();
  return streams;
}

EngineStats Engine::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void Engine::shutdown(bool drain) {
  {
    std::lock_guard lk(mu_);
    accepting_ = false;
    drain_ = drain;
    stop_ = true;
    if (!drain)
      for (auto& p : queue_) p.stream->cancel();
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (cache_ && !opts_.cache_dir.empty() && !saved_) {
    saved_ = true;
    const auto st = cache_->save(opts_.cache_dir, opts_.cache_fingerprint);
    std::lock_guard lk(mu_);
    cache_log_.push_back(st.ok() ? "saved " + std::to_string(cache_->stats().snapshots) +
                                       " prefix-cache snapshots to " + opts_.cache_dir
                                 : st.message());
  }
}

std::vector<std::string> Engine::cache_log() const {
  std::lock_guard lk(mu_);
  return cache_log_;
}

void Engine::finish(Active& a, const std::string& reason, const std::string& error) {
  StreamEvent ev;
  ev.kind = StreamEvent::kDone;
  ev.finish_reason = reason;
  ev.error = error;
  a.stream->push(std::move(ev));
}

// finish() for the requests a step ends: the event waits in done_ until the step has updated
// the gauges.
void Engine::finish_after_step(Active& a, const std::string& reason, const std::string& error) {
  StreamEvent ev;
  ev.kind = StreamEvent::kDone;
  ev.finish_reason = reason;
  ev.error = error;
  done_.emplace_back(a.stream, std::move(ev));
}

// Moves queued requests into free slots, drops cancelled ones. Returns whether any work is left.
bool Engine::admit_locked() {
  if (stop_ && !drain_) {
    for (auto& p : queue_) p.stream->cancel();
    for (auto& s : slots_)
      if (s) s->stream->cancel();
  }
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->stream->cancelled()) {
      Active tmp;
      tmp.stream = it->stream;
      finish(tmp, "cancelled");
      ++stats_.cancelled;
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto& s = slots_[i];
    if (s && s->stream->cancelled()) {
      finish(*s, "cancelled");
      ++stats_.cancelled;
      release(i, true);
    }
    // First come, first served: a request whose KV does not fit now waits, and so do those
    // behind it.
    if (!s && !queue_.empty() && fits_locked(queue_.front().req, i)) {
      auto a = std::make_unique<Active>();
      a->req = std::move(queue_.front().req);
      a->stream = std::move(queue_.front().stream);
      queue_.pop_front();
      a->order = next_order_++;
      start(i, std::move(a));
    }
  }
  refresh_gauges_locked();
  return stats_.running > 0 || !queue_.empty();
}

// The gauges (slots, KV positions, queue) from the current slots; called after every change so
// that they fall back to idle when the last request ends (issue 14).
void Engine::refresh_gauges_locked() {
  int64_t busy = 0, used = 0;
  for (auto& s : slots_) {
    if (!s) continue;
    ++busy;
    used += s->state->pos();
  }
  stats_.slots_busy = busy;
  stats_.running = busy;
  stats_.kv_tokens_used = used;
  stats_.kv_blocks_used = pool_->used_blocks();
  if (cache_) stats_.cache = cache_->stats();
  stats_.queued = int64_t(queue_.size());
}

// Puts request `a` into free slot i: resumes from the slot's kept state when the request asks
// for it and its prompt strictly extends that state's tokens, else starts from a reset state.
void Engine::start(size_t i, std::unique_ptr<Active> a) {
  a->state = states_[i].get();
  std::vector<int32_t>& kept = kept_[i];
  const auto& prompt = a->req.prompt;
  const bool resume = a->req.keep_state && !kept.empty() && kept.size() < prompt.size() &&
                      std::equal(kept.begin(), kept.end(), prompt.begin());
  if (resume) {
    QWEN35_CHECK(a->state->pos() == int64_t(kept.size()));
    a->prefilled = int64_t(kept.size());
    a->fed = std::move(kept);
  } else {
    a->state->reset();
    if (cache_) {
      a->prefilled = cache_->resume(prompt, a->state);
      if (a->req.keep_state) a->fed.assign(prompt.begin(), prompt.begin() + a->prefilled);
    }
  }
  a->resumed = a->prefilled;
  kept.clear();
  a->spec = a->req.spec.value_or(opts_.spec);
  if (a->spec.method == SpecMethod::kLookup) {
    // The prediction first: a match in the prompt or the output, later in the context, wins.
    const auto& pred = a->req.prediction;
    a->context.reserve(pred.size() + size_t(context()));  // decode appends without allocating
    a->context.assign(pred.begin(), pred.end());
    a->context.insert(a->context.end(), prompt.begin(), prompt.end());
  }
  if (a->spec.method != SpecMethod::kOff) {
    a->verify.reserve(size_t(model::kMaxVerifyRows));
    a->drafts.reserve(size_t(model::kMaxVerifyRows));
  }
  // A grammar finishes its value within what the request may still generate.
  if (a->req.sampling.grammar) {
    int64_t room = context() - int64_t(prompt.size());
    if (a->req.max_tokens >= 0) room = std::min(room, a->req.max_tokens);
    a->req.sampling.max_output = room;
  }
  a->sampler = std::make_unique<Sampler>(a->req.sampling, model_.config().vocab);
  a->sampler->add_prompt(prompt);
  a->stream->set_admitted(RequestTiming::Clock::now(), a->prefilled);
  slots_[i] = std::move(a);
}

// Frees slot i after its request finished. With `keep` (no error) a keep_state request leaves
// its state and token list behind for the next flagged request.
void Engine::release(size_t i, bool keep) {
  Active& a = *slots_[i];
  if (keep && a.req.keep_state) {
    QWEN35_CHECK(a.state->pos() == int64_t(a.fed.size()));
    kept_[i] = std::move(a.fed);
  } else {
    a.state->reset();  // its KV blocks go back to the pool
  }
  slots_[i].reset();
}

void Engine::loop() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty() || stats_.running > 0; });
      const bool work = admit_locked();
      if (!work) {
        if (stop_) return;
        continue;
      }
    }
    step();
  }
}

// Fills rows_: one decode row per generating sequence, then prefill chunks, oldest request
// first, on the absolute grid, under the remaining budget. The first prefilling request always
// gets one chunk so prompts progress however many sequences decode.
void Engine::schedule() {
  constexpr int64_t kGrid = model::kDeltaChunk;
  rows_.clear();
  row_slot_.clear();
  row_logits_.clear();
  std::vector<int> prefilling;
  int64_t decode_rows = 0;
  draft();
  for (size_t i = 0; i < slots_.size(); ++i) {
    Active* a = slots_[i].get();
    if (!a) continue;
    if (a->prefilled < int64_t(a->req.prompt.size())) {
      prefilling.push_back(int(i));
      continue;
    }
    row_slot_.push_back(int(i));
    if (a->spec.method == SpecMethod::kOff) {
      rows_.push_back({a->state, std::span<const int32_t>(&a->next_token, 1), false});
      ++decode_rows;
      continue;
    }
    a->drafts.resize(a->sampler->allowed_prefix(a->drafts));  // the grammar's mask checks drafts
    a->verify.insert(a->verify.end(), a->drafts.begin(), a->drafts.end());
    rows_.push_back({a->state, a->verify, false, true});
    decode_rows += int64_t(a->verify.size());
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [&](int x, int y) { return slots_[size_t(x)]->order < slots_[size_t(y)]->order; });
  int64_t budget = opts_.step_tokens - decode_rows;
  bool first = true;
  for (int i : prefilling) {
    Active& a = *slots_[size_t(i)];
    const int64_t n = int64_t(a.req.prompt.size()), start = a.prefilled;
    const int64_t snap = snapshot_after(a);
    int64_t end = start;
    while (end < n && !(end > start && end == snap)) {  // a row ends where a snapshot is due
      const int64_t next = std::min(n, (end / kGrid + 1) * kGrid);
      if (next - start > budget && !(first && end == start)) break;
      end = next;
    }
    if (end == start) break;  // no budget left: later prompts wait (first come, first served)
    budget -= end - start;
    first = false;
    rows_.push_back({a.state, std::span<const int32_t>(a.req.prompt).subspan(start, end - start),
                     a.req.prompt_logprobs >= 0});
    row_slot_.push_back(i);
  }
  size_t off = 0;
  for (const auto& row : rows_) {
    row_logits_.push_back(off);
    off += row.all_logits || row.verify ? row.tokens.size() : 1;
  }
}

// After the forward call: advances row r's request, samples when its prompt is read. Returns
// true when the request is finished (its stream is closed).
bool Engine::advance(size_t r, const core::Status& st, StepCounts* c) {
  Active& a = *slots_[size_t(row_slot_[r])];
  if (!st.ok()) {
    finish_after_step(a, "error", st.message());
    return true;
  }
  if (rows_[r].verify) return advance_verified(r, c);
  const int64_t n = int64_t(a.req.prompt.size());
  const int64_t vocab = model_.config().vocab;
  const int64_t n_rows = int64_t(rows_[r].tokens.size());
  const float* last = logits_.data() + row_logits_[r] * size_t(vocab);
  if (a.req.keep_state) {  // what this row fed: a prompt chunk or the last sampled token
    const auto& t = rows_[r].tokens;
    a.fed.insert(a.fed.end(), t.begin(), t.end());
  }
  if (a.prefilled < n) {
    if (rows_[r].all_logits) {  // prompt logprobs: row j predicts prompt token start + j + 1
      StreamEvent ev;
      ev.kind = StreamEvent::kPrompt;
      for (int64_t j = 0; j < n_rows && a.prefilled + j + 1 < n; ++j)
        ev.prompt.push_back(score(logits_.data() + (row_logits_[r] + size_t(j)) * size_t(vocab),
                                  vocab, a.req.prompt[size_t(a.prefilled + j + 1)],
                                  a.req.prompt_logprobs, &order_));
      a.stream->push(std::move(ev));
      last += size_t(n_rows - 1) * size_t(vocab);
    }
    a.prefilled += n_rows;
    c->prompt += n_rows;
    if (cache_ && a.prefilled == snapshot_after(a, a.prefilled - 1))
      cache_->insert(std::span<const int32_t>(a.req.prompt).first(size_t(a.prefilled)), *a.state);
    if (a.prefilled < n) return false;
    a.stream->set_prompt_read(RequestTiming::Clock::now());
    if (a.req.max_tokens == 0) {
      finish_after_step(a, "length");
      return true;
    }
  }
  return emit(a, a.sampler->sample(last), a.state->pos(), c);
}

// Sends token s, sampled after the state had consumed `fed` tokens; true when it ends the
// request (an end-of-sequence id, max_tokens, or a full context).
bool Engine::emit(Active& a, SampleResult s, int64_t fed, StepCounts* c) {
  const auto& eos = a.req.eos_ids;
  if (std::find(eos.begin(), eos.end(), s.token) != eos.end()) {
    finish_after_step(a, "stop");
    return true;
  }
  a.next_token = s.token;
  ++a.generated;
  ++c->generated;
  if (a.spec.method == SpecMethod::kLookup) a.context.push_back(s.token);
  StreamEvent ev;
  ev.sample = std::move(s);
  a.stream->push(std::move(ev));
  if ((a.req.max_tokens >= 0 && a.generated >= a.req.max_tokens) || fed + 1 > context()) {
    finish_after_step(a, "length");
    return true;
  }
  return false;
}

void Engine::step() {
  schedule();
  if (rows_.empty()) return;
  const core::Status st = model_.forward(rows_, &logits_);
  StepCounts c;
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (advance(r, st, &c)) {
      release(size_t(row_slot_[r]), st.ok());  // the slot is free for the next step's admission
      ++c.done;
    }
  }
  {
    std::lock_guard lk(mu_);
    ++stats_.steps;
    stats_.prompt_tokens += c.prompt;
    stats_.generated_tokens += c.generated;
    stats_.finished += c.done;
    stats_.drafted_tokens += c.drafted;
    stats_.accepted_tokens += c.accepted;
    for (size_t i = 0; i < c.drafted_at.size(); ++i) {
      stats_.drafted_at[i] += c.drafted_at[i];
      stats_.accepted_at[i] += c.accepted_at[i];
    }
    refresh_gauges_locked();
  }
  for (auto& [stream, ev] : done_) stream->push(std::move(ev));
  done_.clear();
}

}  // namespace qwen35::runtime
