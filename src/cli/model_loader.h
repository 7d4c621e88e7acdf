// Shared by the subcommands that run a model: flags for loading and the backend.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/mmap.h"
#include "core/result.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace qwen35::cli {

inline constexpr const char* kLoadModeHelp =
    "weight loading: anon (default: copied into anonymous memory on huge pages; with --fast, a "
    "GGUF file is mapped, as its matmuls read int8 copies), mmap (lazy file mapping) or populate "
    "(pre-faulted file mapping)";

inline constexpr const char* kKvTypeHelp =
    "KV cache type, K[,V]: f32, bf16, q8_0, q4_0, turbo4, turbo3 (default: f32; with --fast, q8_0 "
    "where the model's head_dim takes it); a pair such as "
    "q8_0,turbo4 gives K and V each its own. q8_0/q4_0/turbo rows are Hadamard-rotated (head_dim "
    "a power of two); quantized on write, row by row, so every equality of the exact mode holds "
    "within the type";

// The fast mode's KV cache type when none is named (docs/benchmarks.md: its next-token
// distributions match the f32 cache's to a mean KL of 1e-7 on the bundled model, and decode at
// depth reads a quarter of the bytes).
inline constexpr const char* kNoAmxHelp =
    "keep the fast mode's prefill matmuls off AMX tiles (the same bits; for A/B runs)";

inline constexpr const char* kFastKvType = "q8_0";

struct LoadOptions {
  std::string model_dir;
  int threads = 0;                 // 0: all hardware threads
  std::string backend = "cpu";     // cpu | ref
  std::string device = "cpu";      // --device: cpu | vulkan[:N] (cli/device_select.h)
  std::string load_mode = "anon";  // anon | mmap | populate
  bool fast = false;               // int8 activations for quantized matmuls (MLX, GGUF)
  std::string isa;                 // empty: the best SIMD target; else cap dispatch at this one
  bool no_amx = false;             // --no-amx: the fast mode's prefill stays off AMX tiles
  // --kv-type K[,V] (kernels::parse_kv_types); empty: f32, or with --fast kFastKvType where the
  // model's head_dim takes it.
  std::string kv_type;
  // GGUF models: the vision tower's mmproj file; empty: the one mmproj*.gguf beside the model,
  // if any. A tower that cannot be bound leaves the text model usable (vision_problem says why).
  std::string mmproj;
  // Called on the bound weights before the model is made (a pipeline rank keeps its share of
  // them: cli/pipeline_setup.h); its error is load_model's.
  std::function<core::Status(model::ModelWeights&)> prepare;
};

class DeviceLink;

struct LoadedModel {
  std::unique_ptr<core::ThreadPool> pool;
  std::unique_ptr<model::Model> model;
  // The device the model runs on (cli/device_select.h); null on the CPU.
  std::shared_ptr<DeviceLink> device;
};

core::Result<LoadedModel> load_model(const LoadOptions& o);

// What a state computed by this checkpoint in this mode depends on, hashed: config.json and each
// weight file (safetensors, or the GGUF file and its shards): name, size, first and last MiB; the
// mode (exact or fast) and the SIMD target.
// Tags prefix-cache files (serve --cache-dir) so that another model's are never used.
uint64_t checkpoint_fingerprint(const LoadOptions& o);

}  // namespace qwen35::cli
