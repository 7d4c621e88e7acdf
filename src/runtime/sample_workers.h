// Threads that do a grammar's slow work off the engine thread (docs/design.md, "Constrained
// decoding"): a token whose sample needs the automaton to grow (a mask pass over the
// vocabulary, a long finish count, a configuration of many stacks), and the masks a step is
// going to need, computed while its forward call runs.
//
// A sample handed over here is a DeferredSample: the sequence's sampler and a copy of its
// logits row. The sequence runs no row until the sample is done; what it samples is the same
// as on the engine thread, since a sample is a function of the logits and of the sampler's own
// record (runtime/sampler.h). So one request's grammar never holds up another's rows, and a
// request's tokens do not depend on which thread sampled them or when.
//
// Thread-safety: submit() from the engine thread; the jobs run on the workers. A
// DeferredSample belongs to the worker until `done` is set (release), then to the engine
// thread (acquire).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/sampler.h"

namespace qwen35::runtime {

struct DeferredSample {
  std::shared_ptr<Sampler> sampler;  // shared: a cancelled sequence may go before the job ends
  std::vector<float> logits;         // [vocab], the row to sample from
  int64_t fed = 0;                   // tokens the state had consumed for that row
  std::optional<SampleResult> result;
  // Without a result: the automaton is exhausted, or (out_of_memory) an allocation failed.
  grammar::Unavailable::Why why = grammar::Unavailable::kExhausted;
  bool out_of_memory = false;
  std::atomic<bool> done{false};
};

class SampleWorkers {
 public:
  // At most `threads` threads, started as jobs first need them; `wake` runs on a worker after
  // each sample it finished (the engine's loop waits for it when nothing else can run).
  SampleWorkers(int threads, std::function<void()> wake);
  ~SampleWorkers();  // drops the jobs not started, waits for the running ones
  SampleWorkers(const SampleWorkers&) = delete;
  SampleWorkers& operator=(const SampleWorkers&) = delete;

  void set_wake(std::function<void()> wake);
  // Samples d->logits with d->sampler, building whatever the grammar needs, then sets d->done.
  void sample(std::shared_ptr<DeferredSample> d);
  // Computes the masks `a` will be asked for (config, limit); a job at a time per `busy` flag:
  // none is queued while the last one it flagged runs.
  void prefetch(std::shared_ptr<grammar::Automaton> a,
                std::vector<std::pair<int32_t, int64_t>> masks,
                std::shared_ptr<std::atomic<bool>> busy);
  // Blocks until a sample finishes that had not when `seen` was read (samples_done()).
  void wait_for_sample(int64_t seen);
  int64_t samples_done() const { return samples_done_.load(std::memory_order_acquire); }

 private:
  void submit(std::function<void()> job);
  void run();

  const int max_threads_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool stop_ = false;
  std::function<void()> wake_;
  std::atomic<int64_t> samples_done_{0};
};

}  // namespace qwen35::runtime
