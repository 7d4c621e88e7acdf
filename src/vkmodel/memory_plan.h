// Device memory, planned before anything is uploaded (issue 48, point 2): what the Vulkan
// executor holds on the device for a model served at `ctx` positions a sequence, `parallel`
// sequences and `step_tokens` rows a step, and the one-line refusal of a model that does not fit
// (`qwen35 inspect --device vulkan`, and the executor before its upload).
//
// - weights: every matrix in its stored type as vulkan::upload_matrix holds it (codes or blocks,
//   an MLX matrix's scales and biases, the IQ2/IQ3 code book), and every float vector (norms,
//   conv taps, decay, dt_bias); the MTP head's with `mtp`; a tied head once. The layers this
//   process holds (ModelWeights::held_first..end_held). The vision tower is not counted (its ops
//   are not on the device yet).
// - kv: the KV blocks for ctx positions of every sequence (64-position blocks) in the pool's
//   formats (--kv-type: the device holds the CPU's bytes), every full-attention layer and, with
//   `mtp`, the MTP head's (model::KvPool's sizes).
// - state: per sequence, the conv and recurrent state of every Gated DeltaNet layer and the MTP
//   hidden row (SequenceState::recurrent_bytes), and with `mtp` its verification records
//   (SequenceState::verify_bytes).
// - workspace: model::Activations for step_tokens rows, the attention's scratch (normed and
//   turned q and k), the MoE experts' per-slot rows, the logits of every row, the MTP head's
//   rows with `mtp`, and the rotary table for ctx positions.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "kernels/kv_format.h"
#include "model/weights.h"
#include "vulkan/instance.h"

namespace qwen35::vkmodel {

struct DeviceMemoryPlan {
  uint64_t weights = 0, kv = 0, state = 0, workspace = 0;
  uint64_t snapshots = 0;  // the prefix cache's on the device (serve --cache-device-mb)
  uint64_t total() const { return weights + kv + state + workspace + snapshots; }
};

// `mtp` counts the MTP head (weights, its KV layer, state) where the checkpoint has a usable one
// (ModelWeights::mtp). `part_limit`: the device's Device::part_limit(), which decides how
// matrices split across bindings (0: each matrix one part; the difference is a few bytes of
// padding a part). `kv_types`: the KV cache's formats (default f32).
DeviceMemoryPlan plan_device_memory(const model::ModelWeights& w, int64_t ctx, int64_t parallel,
                                    int64_t step_tokens, bool mtp, uint64_t part_limit = 0,
                                    kernels::KvTypes kv_types = {});

// What fits a budget of device memory (`inspect --device vulkan --fit-mb`): the largest ctx, a
// multiple of the 64-position KV block up to max_ctx, at which `parallel` sequences plan within
// `budget` bytes (0: not even one block), and the largest number of sequences, up to
// max_parallel, at `ctx` positions each (0: not one). The other arguments as plan_device_memory's.
// Every plan grows with ctx and with parallel, so each is a bisection of plans.
int64_t fit_ctx(const model::ModelWeights& w, uint64_t budget, int64_t parallel, int64_t max_ctx,
                int64_t step_tokens, bool mtp, uint64_t part_limit, kernels::KvTypes kv_types);
int64_t fit_parallel(const model::ModelWeights& w, uint64_t budget, int64_t ctx,
                     int64_t max_parallel, int64_t step_tokens, bool mtp, uint64_t part_limit,
                     kernels::KvTypes kv_types);

// The bytes of the device's largest device-local heap (0: none).
uint64_t device_local_bytes(const vulkan::DeviceInfo& info);

// OK when plan.total() fits the largest device-local heap; else one line with the numbers:
// "[vulkan] the model needs 9.1 GiB of device memory (weights 8.0, KV 0.8, state 0.2,
// workspace 0.1) but NAME has 8.0 GiB".
core::Status check_fits(const DeviceMemoryPlan& plan, const vulkan::DeviceInfo& info);

// "weights 8.00 GiB, KV 0.80 GiB, state 0.20 GiB, workspace 0.10 GiB; total 9.10 GiB" (the
// lines `inspect --device vulkan` prints).
std::string describe(const DeviceMemoryPlan& plan);

}  // namespace qwen35::vkmodel
