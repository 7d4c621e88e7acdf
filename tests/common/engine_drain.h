// Reads an engine request's stream to its end: the sampled tokens and how it finished. Shared
// by the engine-level tests (header only: test_util does not link the runtime).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace qwen35::testing {

struct EngineOut {
  std::vector<runtime::SampleResult> samples;
  std::string finish;  // the finish reason, or "timeout" when the stream went quiet
  std::string error;   // with "error"
};

inline EngineOut drain(runtime::RequestStream& s,
                       std::chrono::seconds quiet = std::chrono::seconds(120)) {
  EngineOut o;
  runtime::StreamEvent ev;
  for (;;) {
    if (!s.next(&ev, quiet)) {
      o.finish = "timeout";
      return o;
    }
    if (ev.kind == runtime::StreamEvent::kDone) {
      o.finish = ev.finish_reason;
      o.error = ev.error;
      return o;
    }
    if (ev.kind == runtime::StreamEvent::kToken) o.samples.push_back(ev.sample);
  }
}

// Submits `r` and reads its stream to the end (a refused submission fails the test).
inline EngineOut run(runtime::Engine& e, runtime::GenerationRequest r) {
  runtime::SubmitError err;
  std::string msg;
  auto s = e.submit(std::move(r), &err, &msg);
  EXPECT_TRUE(s) << msg;
  return s ? drain(*s) : EngineOut{};
}

// The same tokens and the same logprob bits, and the same finish.
inline void expect_same_bits(const EngineOut& a, const EngineOut& b) {
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t k = 0; k < a.samples.size(); ++k) {
    EXPECT_EQ(a.samples[k].token, b.samples[k].token) << k;
    EXPECT_EQ(std::memcmp(&a.samples[k].logprob, &b.samples[k].logprob, 4), 0) << k;
  }
  EXPECT_EQ(a.finish, b.finish);
}

}  // namespace qwen35::testing
