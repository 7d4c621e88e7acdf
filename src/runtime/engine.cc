#include "runtime/engine.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"

namespace qwen35::runtime {

Engine::Engine(model::Model& model, const EngineOptions& opts)
    : stepper_(model, opts), opts_(stepper_.options()) {
  if (PrefixCache* cache = stepper_.cache(); cache && !opts_.cache_dir.empty()) {
    const int64_t n = stepper_.load_cache(&cache_log_);
    cache_log_.push_back("loaded " + std::to_string(n) + " prefix-cache snapshots from " +
                         opts_.cache_dir);
  }
  stepper_.set_wake([this] {
    {
      std::lock_guard lk(mu_);
      wake_ = true;
    }
    cv_.notify_one();
  });
  publish();
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(false); }

std::shared_ptr<RequestStream> Engine::submit(GenerationRequest req, SubmitError* err,
                                              std::string* message) {
  std::vector<GenerationRequest> one;
  one.push_back(std::move(req));
  auto streams = submit_group(std::move(one), err, message);
  return streams.empty() ? nullptr : std::move(streams[0]);
}

namespace {

bool same_prompt(const GenerationRequest& a, const GenerationRequest& b) {
  if (a.prompt != b.prompt || a.image_token != b.image_token || a.images.size() != b.images.size())
    return false;
  for (size_t i = 0; i < a.images.size(); ++i)
    if (a.images[i].hash != b.images[i].hash || a.images[i].grid != b.images[i].grid) return false;
  return true;
}

// The fork keys of a group (Sequence::fork_key): requests with the same prompt (images
// included) share one, so the engine computes that prompt once. Requests that ask for prompt
// logprobs compute their own (the logprobs come from their prefill). 0: no other request reads
// the same prompt.
std::vector<uint64_t> fork_keys(const std::vector<GenerationRequest>& reqs) {
  static std::atomic<uint64_t> next{1};
  std::vector<uint64_t> keys(reqs.size(), 0);
  for (size_t j = 0; j < reqs.size(); ++j) {
    if (reqs[j].prompt_logprobs >= 0 || keys[j] != 0) continue;
    for (size_t k = j + 1; k < reqs.size(); ++k) {
      if (keys[k] != 0 || reqs[k].prompt_logprobs >= 0 || !same_prompt(reqs[j], reqs[k])) continue;
      if (keys[j] == 0) keys[j] = next.fetch_add(1);
      keys[k] = keys[j];
    }
  }
  return keys;
}

}  // namespace

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
    if (!stepper_.validate(r, message)) {
      *err = SubmitError::kInvalid;
      return {};
    }
  }
  // Sequences (and their streams) are made here, on the submitting thread, not under the lock.
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::unique_ptr<Sequence>> seqs;
  const std::vector<uint64_t> keys = fork_keys(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    streams.push_back(std::make_shared<RequestStream>(int64_t(reqs[i].prompt.size())));
    seqs.push_back(std::make_unique<Sequence>(std::move(reqs[i]), streams.back(), opts_.spec));
    seqs.back()->set_fork_key(keys[i]);
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
    // One group per call: admission takes turns between requests, not between choices.
    ++next_group_;
    for (auto& s : seqs) {
      s->set_group(next_group_);
      queue_.push_back(std::move(s));
    }
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
  s.queued = queued_.load() + s.preempted;
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
  stepper_.stop_workers();  // their wake refers to mu_ and cv_
  PrefixCache* cache = stepper_.cache();
  if (cache && !opts_.cache_dir.empty() && !saved_) {
    saved_ = true;
    const auto saved = stepper_.save_cache();
    std::lock_guard lk(pub_mu_);
    cache_log_.push_back(saved.ok() ? "saved " + std::to_string(*saved) + " prefix-cache snapshots to " + opts_.cache_dir
                                    : saved.message());
  }
}

// Each pass: take what was submitted, close what was cancelled, admit, run a step, publish;
// then the kDone events of the pass, so that a client that has its answer sees the slot free.
// Memory that runs out where the stepper has no narrower guard ends the running requests with
// an error, never the engine thread; ending a request allocates nothing on this thread
// (RequestStream).
void Engine::loop() {
  bool idle = false;
  while (take_queue(idle)) {
    StepOutput out;
    const size_t before = waiting_.size();
    const std::string oom = out_of_memory([&] {
      stepper_.drop_cancelled(&waiting_, &out);
      stepper_.admit(&waiting_, &out);
      count_waiting();
      publish();
      stepper_.step(&out);
    });
    if (!oom.empty()) stepper_.fail_running(&out, oom);
    count_waiting();
    count(out);
    publish();
    held_ -= int64_t(out.finished.size()) + out.closed;
    idle = oom.empty() && before == waiting_.size() && out.steps == 0 && out.resumed == 0 &&
           out.finished.empty() && out.closed == 0;
    for (auto& [stream, ev] : out.finished) stream->push(std::move(ev));  // kDone: no allocation
  }
}

// The only place the engine thread takes mu_: it waits until there is work (or a stop), and
// moves what was submitted into waiting_. Returns false when the thread is to end. After a
// pass that did nothing while requests run, they all wait for the workers: it sleeps until one
// wakes it, polling for cancellations. A move that fails to allocate leaves the rest queued
// for the next pass.
bool Engine::take_queue(bool idle) {
  constexpr auto kIdlePoll = std::chrono::milliseconds(20);
  std::unique_lock lk(mu_);
  const auto woken = [&] { return stop_ || !queue_.empty() || wake_; };
  if (idle && stepper_.running())
    cv_.wait_for(lk, kIdlePoll, woken);
  else
    cv_.wait(lk, [&] {
      return woken() || !waiting_.empty() || stepper_.running() || stepper_.preempted();
    });
  wake_ = false;
  const bool moved = out_of_memory([&] {
    for (; !queue_.empty(); queue_.pop_front()) waiting_.push_back(std::move(queue_.front()));
  }).empty();
  counted_waiting_ = waiting_.size();
  if (stop_ && !drain_) {
    for (auto& s : waiting_) s->stream()->cancel();
    stepper_.cancel_running();
  }
  return !(moved && stop_ && waiting_.empty() && !stepper_.running() && !stepper_.preempted());
}

// queued_ less the waiting sequences that left waiting_ since it was last counted.
void Engine::count_waiting() {
  queued_ -= int64_t(counted_waiting_) - int64_t(waiting_.size());
  counted_waiting_ = waiting_.size();
}

void Engine::count(const StepOutput& out) {
  stats_.steps += out.steps;
  stats_.prompt_tokens += out.prompt;
  stats_.generated_tokens += out.generated;
  stats_.finished += out.done;
  stats_.cancelled += out.cancelled;
  stats_.drafted_tokens += out.drafted;
  stats_.accepted_tokens += out.accepted;
  stats_.images_encoded += out.images;
  stats_.tower_stages += out.tower_stages;
  for (size_t i = 0; i < out.drafted_at.size(); ++i) {
    stats_.drafted_at[i] += out.drafted_at[i];
    stats_.accepted_at[i] += out.accepted_at[i];
  }
}

// The gauges from the current slots, published with the counters; called after every change
// so that they fall back to idle when the last request ends.
void Engine::publish() {
  stepper_.gauges(&stats_);
  std::lock_guard lk(pub_mu_);
  published_ = stats_;
}

}  // namespace qwen35::runtime
