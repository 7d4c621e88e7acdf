// Drives a runtime::Stepper by hand in the engine tests, so that each step's rows, work and tower
// stages can be seen: admit a request into the stepper, and after each step hand its finished
// events to their streams (once) and read every admitted request's tokens.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <initializer_list>
#include <memory>
#include <string>

#include "engine_drain.h"
#include "runtime/stepper.h"

namespace qwen35::testing {

struct Driven {
  std::shared_ptr<runtime::RequestStream> stream;  // null until admitted
  EngineOut out;
};

inline void admit(runtime::Stepper& st, const runtime::GenerationRequest& r, Driven* d) {
  std::string why;
  ASSERT_TRUE(st.validate(r, &why)) << why;
  d->stream = std::make_shared<runtime::RequestStream>(int64_t(r.prompt.size()));
  std::deque<std::unique_ptr<runtime::Sequence>> waiting;
  waiting.push_back(std::make_unique<runtime::Sequence>(r, d->stream, st.options().spec));
  st.admit(&waiting);
  ASSERT_TRUE(waiting.empty());
}

inline void collect(runtime::StepOutput& out, std::initializer_list<Driven*> driven) {
  for (auto& [s, ev] : out.finished) s->push(std::move(ev));
  out.finished.clear();
  for (Driven* d : driven) {
    if (!d->stream) continue;
    runtime::StreamEvent ev;
    while (d->stream->next(&ev, std::chrono::milliseconds(0))) {
      if (ev.kind == runtime::StreamEvent::kToken) d->out.samples.push_back(ev.sample);
      if (ev.kind == runtime::StreamEvent::kDone) d->out.finish = ev.finish_reason, d->out.error = ev.error;
    }
  }
}

}  // namespace qwen35::testing
