// The forward pass on a Vulkan device (issue 48; docs/design.md "Vulkan backend"): an executor
// (model/executor.h) that records every op model.cc and mtp.cc issue onto one Recorder and
// submits the whole step once, at finish(). Weights are uploaded once, in their stored type,
// when it is made; activations, the KV blocks and the conv and recurrent states live on the
// device (vkmodel/residency.h); the host sends token ids, positions and image rows and
// receives what the forward asks for (logits, a stage's rows, state copies). The vision tower's
// weights are uploaded with the rest; its pieces run here as their own steps (model/vision.h).
//
// Exact mode only: the device's matmuls take fp32 activations whatever the model's mode, so the
// caller refuses fast mode before it installs the executor. Every KV format of the pool is read
// in place by the device's attention (vulkan/attention.h), in the CPU's bytes. The device's bits are its own (not the CPU's);
// on one device a row's bits do not depend on the rest of the step (vulkan/ops.h).
#pragma once

#include <atomic>
#include <initializer_list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "model/executor.h"
#include "vkmodel/residency.h"
#include "vkmodel/snapshots.h"
#include "vulkan/matrix.h"

namespace qwen35::vkmodel {

class VulkanExecutor final : public model::Executor {
 public:
  // Uploads the weights the model holds (a pipeline rank: its layers) to `dev`. Fails in one line
  // for a weight type the device does not read, or device memory running out.
  static core::Result<std::unique_ptr<VulkanExecutor>> create(std::shared_ptr<vulkan::Device> dev,
                                                              const model::ModelWeights& w);
  ~VulkanExecutor() override;

  vulkan::Device& device() { return *dev_; }
  // Submissions so far (one per step: the tests check it), and device bytes of the weights.
  uint32_t submissions() const { return rec_->submissions(); }
  uint64_t weight_bytes() const { return weight_bytes_; }
  uint64_t twin_bytes() const { return res_->bytes(); }
  // Copies of mirrored memory made on the device (forks: model/mirror.h device_copy).
  uint64_t device_copies() const { return res_->device_copies(); }
  // Bytes the steps brought back to the host (logits, a stage's rows, state captures), and the
  // copies they made into device snapshots (copy_to_snapshot): the tests check that a capture
  // into one crosses nothing.
  uint64_t received_bytes() const { return rec_->staged_out_bytes(); }
  uint64_t snapshot_copies() const { return snapshot_copies_; }
  // Device memory by use, readable from any thread while steps run (serve's /metrics): the
  // weights (matrices and vectors), the sequences' states, the KV pool, the step's workspace
  // (scratch twins and temporaries), and all the device's live allocations (staging excluded).
  struct Memory {
    uint64_t weights = 0, states = 0, kv = 0, snapshots = 0, workspace = 0, allocated = 0;
  };
  Memory memory() const;

  void embed(const kernels::Matrix& table, const int32_t* tokens, int64_t n, float* out) override;
  void rms_norm(const float* x, int64_t n, int64_t dim, const float* w, float eps,
                float* out) override;
  void gated_rms_norm(float* x, const float* z, int64_t n, int64_t dim, const float* w,
                      float eps) override;
  void add_rows(const float* x, const float* s, int64_t n, int64_t dim, float* y) override;
  void matmul(const float* x, int64_t n, const kernels::Matrix& w, float* y, bool exact) override;
  void matmul_many(const float* x, int64_t n, const kernels::Matrix* const* ws, float* const* ys,
                   int count) override;
  void swiglu(const float* gate, const float* up, int64_t n, int64_t dim, int64_t in_stride,
              float* out) override;
  void attention(const kernels::Ops::AttentionParams& p, const float* qg, const float* k,
                 const float* v, int64_t n, int64_t pos0, const kernels::KvView& cache,
                 float* out) override;
  void conv1d_silu(const float* x, int64_t n, int64_t channels, const float* w, int64_t kernel,
                   float* state, float* out) override;
  void gated_delta(const kernels::Ops::DeltaParams& p, const float* qkv, const float* a,
                   const float* b, int64_t n, bool chunked, float* state, float* out) override;
  void router_topk(const float* logits, int64_t n, int64_t n_experts, int64_t k, bool renormalize,
                   int32_t* idx, float* weight) override;
  void moe_combine(const float* expert_out, const float* weight, int64_t n, int64_t k, int64_t dim,
                   float* y) override;
  void moe_experts(const float* x, int64_t n, const int32_t* idx, int64_t k,
                   std::span<const model::MlpWeights> experts, int64_t inter, int64_t hidden,
                   float* expert_out) override;
  void sigmoid(float* x, int64_t n) override;
  // The vision tower's ops (vulkan/vision_ops.h): kv holds the rotated keys [n, n_heads,
  // head_dim]; the values are read from qkv in place.
  void layer_norm(const float* x, int64_t n, int64_t dim, const float* w, const float* b, float eps,
                  float* out) override;
  void gelu(float* x, int64_t n, int64_t dim, bool tanh_form) override;
  void add_bias(float* y, int64_t n, int64_t dim, const float* bias) override;
  size_t vision_kv_floats(const kernels::Ops::VisionAttentionParams& p, int64_t n) const override;
  void vision_kv_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv, int64_t n,
                      const float* cos, const float* sin, int64_t r0, int64_t r1,
                      float* kv) override;
  void vision_attend_rows(const kernels::Ops::VisionAttentionParams& p, const float* qkv, int64_t n,
                          const float* cos, const float* sin, const float* kv, int64_t q0,
                          int64_t q1, float* out) override;
  void copy_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows,
                 int64_t width) override;
  void copy_to_snapshot(const float* src, int64_t count, model::SnapshotStore::Snapshot& dst,
                        int64_t at) override;
  void attach(model::SequenceState& state) override;
  void send(const float* p, int64_t count) override;
  void receive(const float* p, int64_t count) override;
  void forget(const float* p, int64_t count) override;
  // Rows with a top k (below the vocabulary) get theirs from the device (vulkan/topk.h): k values
  // and ids back instead of the row, the rest of the row -inf after finish().
  void receive_logits(const float* p, int64_t rows, int64_t vocab,
                      std::span<const int32_t> top_k) override;
  core::Status finish() override;
  // The prefix cache's snapshots in device memory (vkmodel/snapshots.h).
  model::SnapshotStore* snapshot_store() override { return snapshots_.get(); }

 private:
  explicit VulkanExecutor(std::shared_ptr<vulkan::Device> dev);
  core::Status upload(const model::ModelWeights& w);
  core::Status upload_matrix(const kernels::Matrix& m);
  // The recorder of the step, begun at its first op.
  vulkan::Recorder& rec();
  // Bindings of host ranges for an op: read, written, or both. A range whose twin offset the
  // device cannot bind (its alignment) goes through a temporary, copied in before the op and
  // back after it (done()).
  vulkan::Binding in(const void* p, uint64_t bytes);
  vulkan::Binding out(const void* p, uint64_t bytes);
  vulkan::Binding inout(const void* p, uint64_t bytes);
  void done();
  // Makes the twins of an op's host ranges before any is bound: a range that grows a scratch
  // twin (merging others) would otherwise leave a binding made before it on a retired buffer.
  void need(std::initializer_list<std::pair<const void*, uint64_t>> ranges);
  // Device memory of the step alone (workspace), and host bytes staged into some.
  vulkan::Binding temp(uint64_t bytes);
  vulkan::Binding staged(const void* p, uint64_t bytes);
  const vulkan::DeviceMatrix* matrix(const kernels::Matrix& m);
  // The rotary table covering positions [0, rows) for (theta, rotary_dim), grown as needed.
  vulkan::Binding rope_table(float theta, int64_t rotary_dim, int64_t rows, int64_t* table_rows);

  std::shared_ptr<vulkan::Device> dev_;  // shared: tests run several models on one device
  std::unique_ptr<vulkan::Recorder> rec_;
  std::unique_ptr<Residency> res_;
  std::unique_ptr<DeviceSnapshots> snapshots_;  // before res_ in destruction: it names res_
  bool open_ = false;
  uint64_t align_ = 4;
  std::map<std::pair<const void*, int64_t>, vulkan::DeviceMatrix> matrices_;
  uint64_t weight_bytes_ = 0;
  uint64_t snapshot_copies_ = 0;
  struct Back {
    vulkan::Binding from, to;
    uint64_t bytes;
  };
  std::vector<Back> back_;
  // The step's top-k rows: where each host row is, its k, and its pairs' offset in topk_words_
  // (k value bits, then k ids), which the submission fills.
  struct TopKRow {
    float* row;
    int64_t vocab;
    uint32_t k, at;
  };
  std::vector<TopKRow> topk_rows_;
  std::vector<uint32_t> topk_words_;
  // The step's workspace: chunks reused from step to step, filled from the first.
  std::vector<vulkan::Buffer> temp_;
  std::atomic<uint64_t> temp_bytes_{0};
  size_t temp_chunk_ = 0;
  uint64_t temp_used_ = 0;
  // Rotary tables by (theta bits, rotary_dim): rows and buffer.
  std::map<std::pair<uint32_t, int64_t>, std::pair<int64_t, vulkan::Buffer>> rope_;
  std::map<const uint8_t*, vulkan::Buffer> pair_axis_;  // the config's pair axes as uint32
  std::vector<vulkan::Buffer> retired_;
};

}  // namespace qwen35::vkmodel
