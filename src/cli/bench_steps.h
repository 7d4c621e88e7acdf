// bench's generation tests through the engine's own step (runtime::Stepper): the same rows,
// forward call, sampling, drafting (DraftLength, the grammar's check of drafts) and verification
// that `serve` and `run` run, so a measured path is the path that serves.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/result.h"
#include "model/model.h"
#include "runtime/engine_options.h"
#include "runtime/generation_request.h"

namespace qwen35::cli {

// What the timed steps did. A step is timed when no sequence reads its prompt in it (prefill,
// including a request started again after it ended, is not timed).
struct StepRun {
  int64_t steps = 0;    // timed steps
  int64_t tokens = 0;   // tokens generated in them
  int64_t rows = 0;     // decode and verification rows they fed
  double seconds = 0;   // their wall time
  // Of that time: planning the rows (drafting included), the forward call, and advancing the
  // sequences (sampling included).
  double plan_s = 0, forward_s = 0, advance_s = 0;
  int64_t drafted = 0, accepted = 0;
  // The steps that read prompts (untimed above): prompt tokens fed and wall time.
  int64_t prefill_tokens = 0;
  double prefill_s = 0;
  std::vector<int32_t> first;  // the first request's tokens, until it first ends
  // FNV-1a of each request's first steps/2 tokens (across its restarts), request by request:
  // the generation's result, to compare runs (a split's micro-batches against one process).
  // Only the first half: the last steps' tokens may still be with the samplers at the end.
  uint64_t tokens_hash = 0;
};

}  // namespace qwen35::cli

namespace qwen35::runtime {
class Stepper;
}

namespace qwen35::cli {

// Runs one sequence per request (`eo.parallel` of them at most) in a Stepper until `steps`
// steps have been timed; a request that ends (an end-of-sequence id, its max_tokens, the
// context) starts again. `prepare`, when set, is called once on the new Stepper before any
// request is admitted (bench --depth-fill puts the filled context into its prefix cache). An
// error names what failed.
core::Result<StepRun> run_steps(model::Model& m, const runtime::EngineOptions& eo,
                                const std::vector<runtime::GenerationRequest>& reqs,
                                int64_t steps,
                                const std::function<core::Status(runtime::Stepper&)>& prepare = {});

// Time to first token: `req` (max_tokens 1) submitted to `stepper`, whose slots are free, and
// stepped until it ends; seconds from its admission to its one token. Its prompt is read as
// serve reads it (prefill pieces of the stepper's step budget, images laid out by the engine).
core::Result<double> first_token_seconds(runtime::Stepper& stepper, runtime::GenerationRequest req);

}  // namespace qwen35::cli
