// What an engine is made with (EngineOptions) and what it reports (EngineStats):
// runtime/engine.h, runtime/stepper.h.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/state.h"
#include "model/state_op.h"
#include "runtime/drafter.h"
#include "runtime/prefix_cache.h"

namespace qwen35::runtime {

struct EngineOptions {
  int parallel = 4;           // sequence slots (concurrently running requests)
  int64_t ctx = 4096;         // tokens per slot (prompt + generated)
  int max_queue = 64;         // waiting requests beyond the running ones; more are refused
  int64_t step_tokens = 256;  // per-step row budget (decode rows + prefill rows), >= kDeltaChunk
  // The KV pool, in blocks of kernels::kKvBlock positions shared by all slots (0: enough for
  // every slot at full context). Its memory becomes resident as blocks are first written.
  // Requests take blocks as they grow; when the pool runs dry the youngest running request is
  // preempted and resumes later, bit for bit (runtime/stepper.h). A pool smaller than ctx is
  // the context limit of every request.
  int64_t kv_blocks = 0;
  // The prefix cache (runtime/prefix_cache.h): its bound in bytes (0: off), and the interval
  // of its snapshots within long prompts (a multiple of kernels::kKvBlock) besides each
  // prompt's last grid boundary. With the cache off, the n choices of a prompt compute it
  // each too (no fork: Sequence::fork_key), so nothing of a prompt is ever reused.
  int64_t cache_bytes = 0;
  int64_t cache_interval = 2048;
  // Snapshots kept in the device's memory, up to this many bytes, where the model runs on a
  // device (Model::snapshot_store; serve --cache-device-mb): a resume there moves nothing over
  // the bus. Past it, and on the CPU or under a split, they are host memory within cache_bytes.
  int64_t cache_device_bytes = 0;
  // Persistence: the cache is loaded from cache_dir at construction and saved there at
  // shutdown, its files tagged with cache_fingerprint (the checkpoint and arithmetic mode).
  std::string cache_dir{};
  uint64_t cache_fingerprint = 0;
  // Speculative decoding for requests that do not choose (GenerationRequest::spec).
  SpecOptions spec{};
  // How a step's rows reach the model (null: Model::forward). A model split over MPI ranks sets
  // it on rank 0 to send each step through the ranks (dist/pipeline.h); slots[i] is rows[i]'s
  // slot, which names its state on every rank, and `ops` are the state changes since the last
  // step that the other ranks repeat first (model/state_op.h: the prefix cache's snapshots and
  // blocks, resumes, forks, resets).
  std::function<core::Status(std::span<const model::StateOp> ops, std::span<const model::SequenceRows> rows,
                             std::span<const int> slots, std::vector<float>* logits)>
      forward{};
  // Under a split with cache_dir (rank 0; runtime/stepper_cache.cc): the other ranks apply
  // `ops` (the state changes not yet sent), then load (save: false) or save their parts of the
  // prefix cache's snapshot files, `entries` naming the tree's nodes. Returns the snapshots a
  // rank could not load (the engine drops them), or why a rank's save failed (node 0).
  std::function<core::Result<std::vector<model::CacheVerdict>>(
      std::span<const model::StateOp> ops, std::span<const model::CacheEntry> entries, bool save)>
      cache_parts{};
  // With cache_parts: rank 0 holds layers [0, cache_layers_end), the part of each snapshot its
  // own files keep.
  int64_t cache_layers_end = 0;
  // Under a split, MTP drafting (null: refused under a split): Model::draft's contract for the
  // requests, the head being the last rank's; slots[i] is reqs[i]'s slot, and `ops` the state
  // changes since the last step, which the ranks repeat first (they do not ride the next step).
  // The states are rank 0's, without the head's cache: the engine's pool then keeps none.
  std::function<core::Status(std::span<const model::StateOp> ops, std::span<const model::DraftRequest> reqs,
                             std::span<const int> slots)>
      draft{};
  // Tests only: called on the engine thread just before a request is resumed from the prefix
  // cache (a test blocks it there to show what does not wait for the engine thread).
  std::function<void()> before_resume{};
};

// A snapshot of the engine's counters, for /metrics and /health.
struct EngineStats {
  int64_t queued = 0, running = 0, slots = 0, slots_busy = 0;
  int64_t kv_tokens_used = 0, kv_tokens_total = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0;  // the KV pool
  int64_t kv_block_bytes = 0;  // K + V of one block in every layer, in the pool's real formats
  kernels::KvTypes kv_types{};  // the pool's K and V types
  int64_t state_bytes = 0;  // conv + recurrent state of all slots, and the KV pool when full
  // prompt_tokens: prompt rows computed (prefill); prompt_received: prompt tokens of the
  // admitted requests. What the prefix cache and forks saved is the difference.
  int64_t steps = 0, prompt_tokens = 0, generated_tokens = 0, prompt_received = 0;
  int64_t finished = 0, cancelled = 0;
  // Sequences that gave their slot back when the KV pool ran dry (a total), and those of them
  // queued again now (counted in `queued` too).
  int64_t preemptions = 0, preempted = 0;
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding
  int64_t images_encoded = 0, tower_stages = 0;     // the vision tower's runs in the steps
  // Per draft position i (the (i+1)-th drafted token of a step): steps that drafted one there,
  // and steps whose draft there was accepted.
  std::array<int64_t, model::kMaxVerifyRows - 1> drafted_at{}, accepted_at{};
  PrefixCacheStats cache;
};

}  // namespace qwen35::runtime
