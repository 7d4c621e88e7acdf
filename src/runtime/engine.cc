#include "runtime/engine.h"

#include <algorithm>

#include "core/check.h"
#include "runtime/sequence.h"

namespace qwen35::runtime {

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
  if (opts_.cache_bytes > 0)
    cache_ = std::make_unique<PrefixCache>(pool_.get(), size_t(opts_.cache_bytes));
  if (cache_ && !opts_.cache_dir.empty()) {
    const int64_t n = cache_->load(opts_.cache_dir, opts_.cache_fingerprint,
                                   int64_t(states_[0]->recurrent_bytes() / 4), &cache_log_);
    cache_log_.push_back("loaded " + std::to_string(n) + " prefix-cache snapshots from " +
                         opts_.cache_dir);
  }
  const int64_t block = kernels::kKvBlock;
  opts_.cache_interval = std::max<int64_t>(block, opts_.cache_interval / block * block);
  slots_.resize(size_t(opts_.parallel));
  stats_.slots = opts_.parallel;
  stats_.kv_blocks_total = pool_->n_blocks();
  stats_.kv_tokens_total = pool_->n_blocks() * block;
  stats_.state_bytes = int64_t(pool_->block_bytes()) * pool_->n_blocks();
  for (const auto& st : states_) stats_.state_bytes += int64_t(st->recurrent_bytes());
  if (opts_.spec.method != SpecMethod::kOff)  // each slot's verification records
    stats_.state_bytes +=
        int64_t(model::SequenceState::verify_bytes(model_.config(), pool_->mtp())) * opts_.parallel;
  publish();
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

int64_t Engine::context() const {
  return std::min(opts_.ctx, pool_->n_blocks() * kernels::kKvBlock);
}

int64_t Engine::blocks_for(const GenerationRequest& r) const {
  const int64_t n = int64_t(r.prompt.size());
  const int64_t worst = std::min(context(), r.max_tokens < 0 ? opts_.ctx : n + r.max_tokens);
  return (worst + kernels::kKvBlock - 1) / kernels::kKvBlock;
}

bool Engine::promisable(const GenerationRequest& r) const {
  int64_t promised = blocks_for(r);
  for (const auto& s : slots_)
    if (s) promised += blocks_for(s->request());
  return promised <= pool_->n_blocks();
}

// The free blocks must cover what every running request may still take, plus r's worst case.
int64_t Engine::kv_deficit(const GenerationRequest& r) const {
  int64_t future = blocks_for(r);
  for (const auto& s : slots_)
    if (s) future += std::max<int64_t>(0, blocks_for(s->request()) - s->state()->blocks_held());
  return future - pool_->free_blocks();
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
  // Sequences (and their streams) are made here, on the submitting thread, not under the lock.
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (auto& r : reqs) {
    streams.push_back(std::make_shared<RequestStream>(int64_t(r.prompt.size())));
    seqs.push_back(std::make_unique<Sequence>(std::move(r), streams.back(), opts_.spec));
  }
  {
    std::lock_guard lk(mu_);
    if (!accepting_) {
      *err = SubmitError::kShuttingDown;
      *message = "the server is shutting down";
      return {};
    }
    if (held_.load() + k > capacity()) {
      *err = SubmitError::kQueueFull;
      *message = "the request queue is full (" + std::to_string(opts_.max_queue) +
                 " waiting); retry later";
      return {};
    }
    held_ += k;
    queued_ += k;
    for (auto& s : seqs) queue_.push_back(std::move(s));
  }
  cv_.notify_one();
  return streams;
}

EngineStats Engine::stats() const {
  EngineStats s;
  {
    std::lock_guard lk(pub_mu_);
    s = published_;
  }
  s.queued = queued_.load();
  return s;
}

std::vector<std::string> Engine::cache_log() const {
  std::lock_guard lk(pub_mu_);
  return cache_log_;
}

void Engine::shutdown(bool drain) {
  {
    std::lock_guard lk(mu_);
    accepting_ = false;
    drain_ = drain;
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (cache_ && !opts_.cache_dir.empty() && !saved_) {
    saved_ = true;
    const auto st = cache_->save(opts_.cache_dir, opts_.cache_fingerprint);
    std::lock_guard lk(pub_mu_);
    cache_log_.push_back(st.ok() ? "saved " + std::to_string(cache_->stats().snapshots) +
                                       " prefix-cache snapshots to " + opts_.cache_dir
                                 : st.message());
  }
}

// Each pass: take what was submitted, close what was cancelled, admit, run a step, publish;
// then the kDone events of the pass, so that a client that has its answer sees the slot free.
void Engine::loop() {
  StepOutput out;
  while (take_queue()) {
    drop_cancelled(&out);
    admit();
    publish();
    step(&out);
    publish();
    for (auto& [stream, ev] : out.finished) stream->push(std::move(ev));
    out = StepOutput{};
  }
}

// The only place the engine thread takes mu_: it waits until there is work (or a stop), and
// moves what was submitted into waiting_. Returns false when the thread is to end.
bool Engine::take_queue() {
  const auto running = [&] {
    return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return bool(s); });
  };
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return stop_ || !queue_.empty() || !waiting_.empty() || running(); });
  for (auto& s : queue_) waiting_.push_back(std::move(s));
  queue_.clear();
  if (stop_ && !drain_) {
    for (auto& s : waiting_) s->stream()->cancel();
    for (auto& s : slots_)
      if (s) s->stream()->cancel();
  }
  return !(stop_ && waiting_.empty() && !running());
}

void Engine::drop_cancelled(StepOutput* out) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if (!(*it)->cancelled()) {
      ++it;
      continue;
    }
    ++stats_.cancelled;
    --queued_;
    --held_;
    (*it)->finish("cancelled", out);
    it = waiting_.erase(it);
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i] || !slots_[i]->cancelled()) continue;
    ++stats_.cancelled;
    slots_[i]->finish("cancelled", out);
    release(i);
  }
}

// First come, first served: a request whose KV cannot be promised now waits, and so do those
// behind it. Making room is explicit: prefix-cache entries are evicted only when the request
// at the head could be promised its worst case once they are gone.
void Engine::admit() {
  for (size_t i = 0; i < slots_.size() && !waiting_.empty(); ++i) {
    if (slots_[i]) continue;
    const GenerationRequest& r = waiting_.front()->request();
    if (!promisable(r)) break;
    if (const int64_t d = kv_deficit(r); d > 0 && cache_)
      cache_->free_blocks(pool_->free_blocks() + d);
    if (kv_deficit(r) > 0) break;
    std::unique_ptr<Sequence> s = std::move(waiting_.front());
    waiting_.pop_front();
    --queued_;
    states_[i]->reset();
    const SequenceLimits lim{context(), model_.config().vocab,
                             cache_ ? opts_.cache_interval : 0};
    s->start(states_[i].get(), cache_.get(), lim, next_order_++, opts_.before_resume);
    slots_[i] = std::move(s);
  }
}

void Engine::release(size_t i) {
  slots_[i]->state()->reset();  // its KV blocks go back to the pool
  slots_[i].reset();
  --held_;
}

// The gauges from the current slots, published with the counters; called after every change
// so that they fall back to idle when the last request ends.
void Engine::publish() {
  int64_t busy = 0, used = 0;
  for (const auto& s : slots_) {
    if (!s) continue;
    ++busy;
    used += s->state()->pos();
  }
  stats_.slots_busy = busy;
  stats_.running = busy;
  stats_.kv_tokens_used = used;
  stats_.kv_blocks_used = pool_->used_blocks();
  if (cache_) stats_.cache = cache_->stats();
  std::lock_guard lk(pub_mu_);
  published_ = stats_;
}

}  // namespace qwen35::runtime
