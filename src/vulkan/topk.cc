#include "vulkan/topk.h"

#include <string>

namespace qwen35::vulkan {

namespace {

struct TopKPush {
  uint32_t base, n, vocab;
};

}  // namespace

void record_top_k(Recorder& rec, const Binding& logits, int64_t n, int64_t vocab,
                  const Binding& tasks, const Binding& out) {
  if (n == 0) return;
  if (vocab < 1 || n < 0 || uint64_t(n) * uint64_t(vocab) >= (1ull << 32))
    return rec.fail(core::error("[vulkan] top-k: " + std::to_string(n) + " rows of " +
                                std::to_string(vocab) + " logits exceed what one dispatch indexes"));
  TopKPush pc{0, uint32_t(n), uint32_t(vocab)};
  rec.dispatch("topk", {logits, tasks, out}, &pc, sizeof pc, uint64_t(n));
}

}  // namespace qwen35::vulkan
