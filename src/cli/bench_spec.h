// bench --spec: speculative decoding end to end (cli/bench_spec.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"
#include "runtime/drafter.h"
#include "runtime/engine_options.h"

namespace qwen35::cli {

// Returns the exit code (1 when speculative tokens differ from plain decoding's). `split`, under
// mpirun: sets an engine's hooks (EngineOptions::forward, draft) for its context and spec.
int bench_speculative(model::Model& m, const runtime::SpecOptions& spec,
                      const std::vector<int32_t>& prompt, int64_t n_gen, bool json,
                      const std::function<void(runtime::EngineOptions*)>& split = {});

}  // namespace qwen35::cli
