#include "cli/bench_steps.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>

#include "runtime/sequence.h"
#include "runtime/stepper.h"

namespace qwen35::cli {

using runtime::Phase;
using runtime::StreamEvent;

core::Result<StepRun> run_steps(model::Model& m, const runtime::EngineOptions& eo,
                                const std::vector<runtime::GenerationRequest>& reqs,
                                int64_t steps,
                                const std::function<core::Status(runtime::Stepper&)>& prepare) {
  using Clock = std::chrono::steady_clock;
  runtime::Stepper stepper(m, eo);
  if (prepare)
    if (auto st = prepare(stepper); !st.ok()) return core::error("[bench] " + st.message());
  std::string why;
  for (const auto& r : reqs)
    if (!stepper.validate(r, &why)) return core::error("[bench] " + why);
  std::deque<std::unique_ptr<runtime::Sequence>> waiting;
  std::vector<std::shared_ptr<runtime::RequestStream>> streams(reqs.size());
  auto start = [&](size_t i) {
    streams[i] = std::make_shared<runtime::RequestStream>(int64_t(reqs[i].prompt.size()));
    waiting.push_back(std::make_unique<runtime::Sequence>(reqs[i], streams[i], eo.spec));
  };
  for (size_t i = 0; i < reqs.size(); ++i) start(i);
  StepRun run;
  bool first_open = true;
  std::vector<uint64_t> hashes(reqs.size(), 1469598103934665603ull);
  std::vector<int64_t> hashed(reqs.size(), 0);
  while (run.steps < steps) {
    stepper.admit(&waiting);
    if (!stepper.running()) return core::error("[bench] no request could be admitted");
    bool prefill = false;
    int64_t generating = 0;
    for (size_t i = 0; i < size_t(stepper.options().parallel); ++i) {
      const auto* s = stepper.slot(i);
      if (!s) continue;
      if (s->phase() == Phase::kPrefill) prefill = true;
      else ++generating;
    }
    runtime::StepOutput out;
    const auto t0 = Clock::now();
    stepper.step(&out);
    // Every sequence waits for a grammar worker: the wait is part of what generating costs.
    if (out.steps == 0) stepper.wait_for_sample();
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (prefill) {
      run.prefill_tokens += out.prompt;
      run.prefill_s += dt;
    } else {
      run.steps += out.steps;
      run.seconds += dt;
      run.tokens += out.generated;
      if (out.steps > 0) run.rows += generating + out.drafted;
      run.plan_s += out.plan_s;
      run.forward_s += out.forward_s;
      run.advance_s += out.advance_s;
      run.drafted += out.drafted;
      run.accepted += out.accepted;
    }
    for (auto& [stream, ev] : out.finished) stream->push(std::move(ev));
    for (size_t i = 0; i < streams.size(); ++i) {
      StreamEvent ev;
      while (streams[i]->next(&ev, std::chrono::milliseconds(0))) {
        if (ev.kind == StreamEvent::kToken && i == 0 && first_open)
          run.first.push_back(ev.sample.token);
        if (ev.kind == StreamEvent::kToken && hashed[i]++ < std::max<int64_t>(1, steps / 2))
          hashes[i] = (hashes[i] ^ uint64_t(uint32_t(ev.sample.token))) * 1099511628211ull;
        if (ev.kind != StreamEvent::kDone) continue;
        if (ev.finish_reason == "error") return core::error("[bench] " + ev.error);
        if (i == 0) first_open = false;
        start(i);
      }
    }
  }
  run.tokens_hash = 1469598103934665603ull;
  for (uint64_t h : hashes) run.tokens_hash = (run.tokens_hash ^ h) * 1099511628211ull;
  return run;
}

core::Result<double> first_token_seconds(runtime::Stepper& stepper, runtime::GenerationRequest req) {
  using Clock = std::chrono::steady_clock;
  req.max_tokens = 1;
  std::string why;
  if (!stepper.validate(req, &why)) return core::error("[bench] " + why);
  auto stream = std::make_shared<runtime::RequestStream>(int64_t(req.prompt.size()));
  std::deque<std::unique_ptr<runtime::Sequence>> waiting;
  waiting.push_back(std::make_unique<runtime::Sequence>(std::move(req), stream, stepper.options().spec));
  const auto t0 = Clock::now();
  stepper.admit(&waiting);
  if (!stepper.running()) return core::error("[bench] the request could not be admitted");
  for (;;) {
    runtime::StepOutput out;
    stepper.step(&out);
    if (out.steps == 0) stepper.wait_for_sample();
    for (auto& [s, ev] : out.finished) s->push(std::move(ev));
    StreamEvent ev;
    while (stream->next(&ev, std::chrono::milliseconds(0))) {
      if (ev.kind != StreamEvent::kDone) continue;
      if (ev.finish_reason == "error") return core::error("[bench] " + ev.error);
      return std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (!stepper.running()) return core::error("[bench] the request ended without its token");
  }
}

}  // namespace qwen35::cli
