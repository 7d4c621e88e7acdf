// The seam between the forward's structure and the backend that runs its ops (issue 48 point 3,
// docs/design.md "The forward pass" and "Vulkan backend").
//
// model.cc and mtp.cc are the one description of a step: the layer order, the per-sequence
// spans, the delta rule's pieces on the 64-grid, state captures, verify records, the MTP rows
// and forward_layers' stages. They decide all of that from metadata alone (spans, positions,
// counts) and issue every op, and every copy of a tensor's rows, to an Executor. An executor may
// run an op at once (the CPU's, below) or record it and run the step later (a device's); so the
// forward reads no tensor's values on the host between ops, and ends each step with finish(),
// after which (and only after which) the outputs it asked for are readable.
//
// An op's metadata (token ids, rotary positions, parameters) is read when it is issued, its tensors
// when it runs; the forward keeps every buffer an issued op names in place until finish().
//
// Operands are named by their host address: a range of an `Activations` buffer, a state's conv
// or recurrent rows, a KV table, a capture's buffer, a weight. On the CPU that is the memory
// itself; a device executor keeps its own twin of each (the residency map) and reads the address
// as the name of that twin. So the forward also says where host and device meet, which the CPU
// ignores: the states a step names (attach: their twins are the current copy during the step,
// model/mirror.h), the host memory an op reads that the host wrote (send: a pipeline stage's
// input rows, an image's rows), and the memory the host reads after finish() (receive: logits,
// a stage's output rows, state captures, draft logits). Any other memory an op names is the
// executor's own between steps (activations, the MTP rows a draft carries to its next position). Op semantics are kernels::Ops's (kernels/ops.h), with the same
// arguments; what is added here is what model.cc did itself between kernel calls: copies, the
// MoE experts' grouping of rows (it reads the router's choices, so it must run where they are)
// and the shared expert gate's sigmoid.
#pragma once

#include <cstdint>
#include <span>

#include "core/check.h"
#include "core/result.h"
#include "kernels/ops.h"
#include "model/snapshot_store.h"
#include "model/state.h"
#include "model/weights.h"

namespace qwen35::model {

class Executor {
 public:
  virtual ~Executor() = default;

  // Ops of kernels::Ops, in this executor's context (thread pool, workspace, mode).
  virtual void embed(const kernels::Matrix& table, const int32_t* tokens, int64_t n,
                     float* out) = 0;
  virtual void rms_norm(const float* x, int64_t n, int64_t dim, const float* w, float eps,
                        float* out) = 0;
  virtual void gated_rms_norm(float* x, const float* z, int64_t n, int64_t dim, const float* w,
                              float eps) = 0;
  virtual void add_rows(const float* x, const float* s, int64_t n, int64_t dim, float* y) = 0;
  // `exact`: in exact arithmetic whatever the mode (the MoE router and the shared expert's gate:
  // a choice between experts must not move with activation rounding).
  virtual void matmul(const float* x, int64_t n, const kernels::Matrix& w, float* y,
                      bool exact = false) = 0;
  virtual void matmul_many(const float* x, int64_t n, const kernels::Matrix* const* ws,
                           float* const* ys, int count) = 0;
  virtual void swiglu(const float* gate, const float* up, int64_t n, int64_t dim, int64_t in_stride,
                      float* out) = 0;
  virtual void attention(const kernels::Ops::AttentionParams& p, const float* qg, const float* k,
                         const float* v, int64_t n, int64_t pos0, const kernels::KvView& cache,
                         float* out) = 0;
  virtual void conv1d_silu(const float* x, int64_t n, int64_t channels, const float* w,
                           int64_t kernel, float* state, float* out) = 0;
  virtual void gated_delta(const kernels::Ops::DeltaParams& p, const float* qkv, const float* a,
                           const float* b, int64_t n, bool chunked, float* state, float* out) = 0;
  virtual void router_topk(const float* logits, int64_t n, int64_t n_experts, int64_t k,
                           bool renormalize, int32_t* idx, float* weight) = 0;
  virtual void moe_combine(const float* expert_out, const float* weight, int64_t n, int64_t k,
                           int64_t dim, float* y) = 0;

  // The routed experts of an MoE layer: for every row t and choice j, expert_out[t, j, :] =
  // down(swiglu(gate(x_t), up(x_t))) of expert idx[t, j], x [n, hidden], idx [n, k],
  // expert_out [n, k, hidden]. Each slot's bits are those of a plain matmul of its row alone,
  // whatever else is routed with it.
  virtual void moe_experts(const float* x, int64_t n, const int32_t* idx, int64_t k,
                           std::span<const MlpWeights> experts, int64_t inter, int64_t hidden,
                           float* expert_out) = 0;
  // In place: x[i] = 1 / (1 + exp(-x[i])) over n values.
  virtual void sigmoid(float* x, int64_t n) = 0;

  // The vision tower's ops (model/vision.h issues them; kernels::Ops has their math). The
  // attention's prepared keys `kv` are vision_kv_floats(p, n) floats in this executor's layout.
  virtual void layer_norm(const float* x, int64_t n, int64_t dim, const float* w, const float* b,
                          float eps, float* out) = 0;
  virtual void gelu(float* x, int64_t n, int64_t dim, bool tanh_form) = 0;
  virtual void add_bias(float* y, int64_t n, int64_t dim, const float* bias) = 0;
  virtual size_t vision_kv_floats(const kernels::Ops::VisionAttentionParams& p,
                                  int64_t n) const = 0;
  virtual void vision_kv_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv,
                              int64_t n, const float* cos, const float* sin, int64_t r0, int64_t r1,
                              float* kv) = 0;
  virtual void vision_attend_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv,
                                  int64_t n, const float* cos, const float* sin, const float* kv,
                                  int64_t q0, int64_t q1, float* out) = 0;
  // dst[r · dst_stride + i] = src[r · src_stride + i] for r < rows, i < width (floats).
  virtual void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride,
                         int64_t rows, int64_t width) = 0;
  void copy(const float* src, int64_t count, float* dst) {
    copy_rows(src, count, dst, count, 1, count);
  }
  // copy() into a snapshot in the executor's memory (a state capture's, StateCapture::device,
  // made by snapshot_store()->make): `count` floats at src into dst from float `at`, in order
  // with the step's ops; nothing crosses to the host. Only an executor with a snapshot store is
  // asked (Model::forward refuses such captures elsewhere).
  virtual void copy_to_snapshot(const float* src, int64_t count, SnapshotStore::Snapshot& dst,
                                int64_t at) {
    (void)src, (void)count, (void)dst, (void)at;
    QWEN35_CHECK_MSG(false, "a state copy into device memory on an executor without any");
  }

  // Where host and device meet (see above); nothing on the CPU. attach before the first op that
  // names the state in a step; send before the op that reads the floats; receive after the op
  // that writes them (readable after finish()).
  virtual void attach(SequenceState& state) { (void)state; }
  virtual void send(const float* p, int64_t count) { (void)p, (void)count; }
  virtual void receive(const float* p, int64_t count) { (void)p, (void)count; }
  // The host is done with the memory at [p, p + count) (an image's run buffers): an executor
  // that keeps its own twin of it frees that, outside a step. Nothing on the CPU.
  virtual void forget(const float* p, int64_t count) { (void)p, (void)count; }
  // receive() for `rows` logits rows of `vocab` at p, where row i's sampling reads only its
  // top_k[i] largest logits (SequenceRows::logits_top_k; 0: the whole row). An executor may bring
  // back only those (ranked by value, then the lower id, as the sampler ranks them) and set the
  // rest of the row to -inf; the CPU's rows are whole.
  virtual void receive_logits(const float* p, int64_t rows, int64_t vocab,
                              std::span<const int32_t> top_k) {
    (void)top_k;
    receive(p, rows * vocab);
  }

  // Ends the step: every op issued so far has run, and what it was asked to receive is readable
  // on the host. Nothing to do on the CPU. A device executor that fails (a lost device, memory)
  // says so here, and the step's outputs are not to be used.
  virtual core::Status finish() = 0;

  // Where the prefix cache can keep snapshots in the executor's memory (a device's); null: host
  // memory only (the CPU).
  virtual SnapshotStore* snapshot_store() { return nullptr; }
};

}  // namespace qwen35::model
