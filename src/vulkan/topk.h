// The device's top-k of logits rows (shaders/topk.comp): for the rows whose sampling reads only
// their k largest logits (model::SequenceRows::logits_top_k), k values and ids come back instead
// of a whole vocabulary row (issue 49 item 6).
#pragma once

#include <cstdint>

#include "vulkan/recorder.h"

namespace qwen35::vulkan {

// Per row r < n of `logits` ([n, vocab] f32): tasks[2r] = k (0: the row is skipped; above vocab:
// vocab) and tasks[2r + 1] = the row's offset in `out` (uint32 words). out[off, off + k) gets the
// k largest values' bits, out[off + k, off + 2k) their ids, ranked by value and then by the lower
// id (-0 equal to +0, NaN below every number): first the values above the k-th largest in
// increasing id, then the k-th's ties in increasing id.
void record_top_k(Recorder& rec, const Binding& logits, int64_t n, int64_t vocab,
                  const Binding& tasks, const Binding& out);

}  // namespace qwen35::vulkan
