// Streaming safetensors writer: each shard's header is computed from the plan first, then tensor
// data is generated and written in fixed-size chunks (peak memory: one chunk buffer).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/result.h"
#include "tools/synth/tensor_plan.h"

namespace qwen35::tools {

// A progress bar on stderr: bytes written / total. Silent unless enabled.
class Progress {
 public:
  Progress(uint64_t total, bool enabled) : total_(total), enabled_(enabled) {}
  void add(uint64_t bytes);
  void finish();

 private:
  void draw(bool force);
  uint64_t total_;
  uint64_t done_ = 0;
  bool enabled_;
  double start_ = -1.0;
  double last_draw_ = -1.0;
};

struct ShardedOutput {
  std::vector<std::string> files;  // file names in `dir`
  uint64_t total_bytes = 0;        // tensor data bytes
};

// Plain HF uses 5 GB shards; we cut at 4 GiB as the brief asks.
constexpr uint64_t kDefaultMaxShardBytes = uint64_t(4) << 30;

// Writes plan.tensors into DIR as model.safetensors, or as shards plus
// model.safetensors.index.json when the data exceeds max_shard_bytes. Shard names follow the
// dialect: HF "model.safetensors-0000i-of-0000N.safetensors", MLX
// "model-0000i-of-0000N.safetensors".
core::Result<ShardedOutput> write_checkpoint_tensors(const std::string& dir, const TensorPlan& plan,
                                                     Dialect dialect, uint64_t seed,
                                                     uint64_t max_shard_bytes, bool progress);

// Total bytes of tensor data in the plan.
uint64_t plan_bytes(const TensorPlan& plan);

}  // namespace qwen35::tools
