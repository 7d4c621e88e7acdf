// The engine's per-request record (runtime/engine.h), shared by the engine's source files
// (engine.cc: scheduling and sampling; engine_spec.cc: speculative decoding). Private to them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/drafter.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace qwen35::runtime {

// A request holding a slot. Touched by the engine thread only (after admission).
struct Engine::Active {
  GenerationRequest req;
  std::shared_ptr<RequestStream> stream;
  model::SequenceState* state = nullptr;
  std::unique_ptr<Sampler> sampler;
  int64_t prefilled = 0;    // prompt tokens consumed
  int64_t resumed = 0;      // of which resumed, not computed
  int64_t generated = 0;    // tokens sampled and sent
  int32_t next_token = -1;  // sampled, not yet fed
  uint64_t order = 0;       // admission order: older prompts prefill first
  std::vector<int32_t> fed;  // keep_state only: every token the state holds, in order
  SpecOptions spec;          // the request's speculative decoding
  std::vector<int32_t> context;  // lookup only: the prediction, the prompt, every sampled token
  std::vector<int32_t> verify;   // the rows of a verification: next_token, then the drafts
  std::vector<int32_t> drafts;   // mtp only: the head's drafts of this step
  DraftLength draft_length;      // how many to draft next (acceptance so far)
};

}  // namespace qwen35::runtime
