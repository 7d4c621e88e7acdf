#include "vkmodel/vulkan_executor.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>

#include "vulkan/attention.h"
#include "vulkan/ops.h"
#include "vulkan/topk.h"

namespace qwen35::vkmodel {

using vulkan::Binding;

namespace {
constexpr uint64_t kTempChunk = 16ull << 20;

uint64_t floats(int64_t n) { return uint64_t(std::max<int64_t>(n, 0)) * 4; }
}  // namespace

VulkanExecutor::VulkanExecutor(std::shared_ptr<vulkan::Device> dev)
    : dev_(std::move(dev)),
      rec_(std::make_unique<vulkan::Recorder>(*dev_)),
      res_(std::make_unique<Residency>(*dev_)),
      snapshots_(std::make_unique<DeviceSnapshots>(dev_, *res_)) {
  align_ = std::max<uint64_t>(4, dev_->info().storage_offset_alignment);
}

VulkanExecutor::~VulkanExecutor() = default;

core::Result<std::unique_ptr<VulkanExecutor>> VulkanExecutor::create(
    std::shared_ptr<vulkan::Device> dev, const model::ModelWeights& w) {
  std::unique_ptr<VulkanExecutor> ex(new VulkanExecutor(std::move(dev)));
  QWEN35_RETURN_IF_ERROR(ex->rec_->status());
  QWEN35_RETURN_IF_ERROR(ex->upload(w));
  return ex;
}

core::Status VulkanExecutor::upload_matrix(const kernels::Matrix& m) {
  if (m.data == nullptr || m.rows == 0) return core::ok_status();
  const auto key = std::make_pair(m.data, m.rows);
  if (matrices_.count(key)) return core::ok_status();
  auto dm = vulkan::upload_matrix(*dev_, m);
  if (!dm.ok()) return dm.status();
  weight_bytes_ += dm->bytes();
  matrices_.emplace(key, std::move(*dm));
  return core::ok_status();
}

// Every matrix and float vector of the layers held (model/weights.h), the embedding, the head
// and the MTP head: the device's copy of the weights, made once.
core::Status VulkanExecutor::upload(const model::ModelWeights& w) {
  auto vec = [&](const std::vector<float>& v) -> core::Status {
    if (v.empty()) return core::ok_status();
    weight_bytes_ += floats(int64_t(v.size()));
    return res_->add_constant(v.data(), floats(int64_t(v.size())));
  };
  auto mlp = [&](const model::MlpWeights& m) -> core::Status {
    for (const kernels::Matrix* x : {&m.gate_proj, &m.up_proj, &m.down_proj})
      QWEN35_RETURN_IF_ERROR(upload_matrix(*x));
    return core::ok_status();
  };
  auto layer = [&](const model::LayerWeights& L) -> core::Status {
    QWEN35_RETURN_IF_ERROR(vec(L.input_norm));
    QWEN35_RETURN_IF_ERROR(vec(L.post_norm));
    if (L.kind == model::LayerKind::kFullAttention) {
      const model::AttentionWeights& a = L.attn;
      for (const kernels::Matrix* x : {&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj})
        QWEN35_RETURN_IF_ERROR(upload_matrix(*x));
      QWEN35_RETURN_IF_ERROR(vec(a.q_norm));
      QWEN35_RETURN_IF_ERROR(vec(a.k_norm));
    } else {
      const model::DeltaNetWeights& g = L.gdn;
      for (const kernels::Matrix* x :
           {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a, &g.out_proj})
        QWEN35_RETURN_IF_ERROR(upload_matrix(*x));
      for (const std::vector<float>* v : {&g.conv, &g.decay, &g.dt_bias, &g.norm})
        QWEN35_RETURN_IF_ERROR(vec(*v));
    }
    QWEN35_RETURN_IF_ERROR(mlp(L.mlp));
    const model::MoeWeights& m = L.moe;
    QWEN35_RETURN_IF_ERROR(upload_matrix(m.router));
    for (const model::MlpWeights& e : m.experts) QWEN35_RETURN_IF_ERROR(mlp(e));
    if (m.has_shared) QWEN35_RETURN_IF_ERROR(mlp(m.shared));
    if (m.has_shared_gate) QWEN35_RETURN_IF_ERROR(upload_matrix(m.shared_gate));
    return core::ok_status();
  };
  for (int64_t l = w.held_first; l < w.end_held(); ++l)
    QWEN35_RETURN_IF_ERROR(layer(w.layers[size_t(l)]));
  QWEN35_RETURN_IF_ERROR(upload_matrix(w.embed));
  QWEN35_RETURN_IF_ERROR(upload_matrix(w.head));
  QWEN35_RETURN_IF_ERROR(vec(w.final_norm));
  if (w.vision && w.held_first == 0) {  // the first stage encodes the images
    const model::VisionWeights& v = *w.vision;
    for (const std::vector<float>* x : {&v.patch_b, &v.merger_norm_w, &v.merger_norm_b,
                                        &v.merger_fc1_b, &v.merger_fc2_b})
      QWEN35_RETURN_IF_ERROR(vec(*x));
    for (const kernels::Matrix* x : {&v.patch, &v.merger_fc1, &v.merger_fc2})
      QWEN35_RETURN_IF_ERROR(upload_matrix(*x));
    for (const model::VisionBlockWeights& b : v.blocks) {
      for (const std::vector<float>* x : {&b.norm1_w, &b.norm1_b, &b.norm2_w, &b.norm2_b,
                                          &b.qkv_b, &b.proj_b, &b.fc1_b, &b.fc2_b})
        QWEN35_RETURN_IF_ERROR(vec(*x));
      for (const kernels::Matrix* x : {&b.qkv, &b.proj, &b.fc1, &b.fc2})
        QWEN35_RETURN_IF_ERROR(upload_matrix(*x));
    }
  }
  if (w.mtp) {
    QWEN35_RETURN_IF_ERROR(upload_matrix(w.mtp->fc));
    for (const std::vector<float>* v : {&w.mtp->norm_embedding, &w.mtp->norm_hidden, &w.mtp->norm})
      QWEN35_RETURN_IF_ERROR(vec(*v));
    QWEN35_RETURN_IF_ERROR(layer(w.mtp->layer));
  }
  return core::ok_status();
}

VulkanExecutor::Memory VulkanExecutor::memory() const {
  const Residency::Usage u = res_->usage();
  return {weight_bytes_, u.states, u.kv, snapshots_->bytes(), u.scratch + temp_bytes_.load(),
          dev_->allocated()};
}

vulkan::Recorder& VulkanExecutor::rec() {
  if (!open_) {
    open_ = true;
    temp_chunk_ = 0;
    temp_used_ = 0;
    (void)rec_->begin();  // a failure stays in the recorder: finish() returns it
    res_->begin(rec_.get());
  }
  return *rec_;
}

Binding VulkanExecutor::temp(uint64_t bytes) {
  vulkan::Recorder& r = rec();
  bytes = std::max<uint64_t>((bytes + 3) & ~uint64_t(3), 4);
  for (;; ++temp_chunk_, temp_used_ = 0) {
    if (temp_chunk_ == temp_.size()) {
      auto b = dev_->buffer(std::max(bytes, kTempChunk), vulkan::MemoryKind::kDevice);
      if (!b.ok()) {
        r.fail(b.status());
        return {};
      }
      temp_bytes_ += b->bytes();
      temp_.push_back(std::move(*b));
    }
    const uint64_t at = (temp_used_ + align_ - 1) / align_ * align_;
    if (at + bytes <= temp_[temp_chunk_].bytes()) {
      temp_used_ = at + bytes;
      return {&temp_[temp_chunk_], at, bytes};
    }
  }
}

Binding VulkanExecutor::staged(const void* p, uint64_t bytes) {
  const Binding b = temp(bytes);
  if (b.buffer) rec().stage_in(p, bytes, b);
  return b;
}

Binding VulkanExecutor::in(const void* p, uint64_t bytes) {
  rec();
  const Binding b = res_->at(p, bytes);
  if (!b.buffer || b.offset % align_ == 0) return b;
  const Binding t = temp(bytes);
  if (t.buffer) rec_->copy(b, t, bytes);
  return t;
}

Binding VulkanExecutor::out(const void* p, uint64_t bytes) {
  rec();
  const Binding b = res_->at(p, bytes);
  if (!b.buffer || b.offset % align_ == 0) return b;
  const Binding t = temp(bytes);
  if (t.buffer) back_.push_back({t, b, bytes});
  return t;
}

Binding VulkanExecutor::inout(const void* p, uint64_t bytes) {
  rec();
  const Binding b = res_->at(p, bytes);
  if (!b.buffer || b.offset % align_ == 0) return b;
  const Binding t = temp(bytes);
  if (!t.buffer) return t;
  rec_->copy(b, t, bytes);
  back_.push_back({t, b, bytes});
  return t;
}

void VulkanExecutor::need(std::initializer_list<std::pair<const void*, uint64_t>> ranges) {
  rec();
  for (const auto& [p, bytes] : ranges)
    if (p) (void)res_->at(p, bytes);
}

void VulkanExecutor::done() {
  for (const Back& c : back_) rec_->copy(c.from, c.to, c.bytes);
  back_.clear();
}

const vulkan::DeviceMatrix* VulkanExecutor::matrix(const kernels::Matrix& m) {
  auto it = matrices_.find({m.data, m.rows});
  if (it == matrices_.end()) {
    // A row slice of a resident matrix (the MTP draft head): uploaded once as its own.
    core::Status st = upload_matrix(m);
    if (!st.ok()) {
      rec().fail(st);
      return nullptr;
    }
    it = matrices_.find({m.data, m.rows});
  }
  return &it->second;
}

void VulkanExecutor::embed(const kernels::Matrix& table, const int32_t* tokens, int64_t n,
                           float* out) {
  const vulkan::DeviceMatrix* t = matrix(table);
  if (!t || n == 0) return;
  need({{out, floats(n * table.cols)}});
  const Binding ids = staged(tokens, uint64_t(n) * 4);
  vulkan::record_embed(rec(), *t, ids, n, this->out(out, floats(n * table.cols)));
  done();
}

void VulkanExecutor::rms_norm(const float* x, int64_t n, int64_t dim, const float* w, float eps,
                              float* out) {
  if (n == 0) return;
  need({{x, floats(n * dim)}, {out, floats(n * dim)}});
  vulkan::record_rms_norm(rec(), in(x, floats(n * dim)), n, dim, in(w, floats(dim)), eps,
                          this->out(out, floats(n * dim)));
  done();
}

void VulkanExecutor::gated_rms_norm(float* x, const float* z, int64_t n, int64_t dim,
                                    const float* w, float eps) {
  if (n == 0) return;
  need({{x, floats(n * dim)}, {z, floats(n * dim)}});
  vulkan::record_gated_rms_norm(rec(), inout(x, floats(n * dim)), in(z, floats(n * dim)), n, dim,
                                in(w, floats(dim)), eps);
  done();
}

void VulkanExecutor::add_rows(const float* x, const float* s, int64_t n, int64_t dim, float* y) {
  if (n == 0) return;
  need({{x, floats(n * dim)}, {s, s ? floats(n) : 0}, {y, floats(n * dim)}});
  const Binding bx = in(x, floats(n * dim));
  Binding bs;
  if (s) bs = in(s, floats(n));
  vulkan::record_add_rows(rec(), bx, s ? &bs : nullptr, n, dim, inout(y, floats(n * dim)));
  done();
}

void VulkanExecutor::matmul(const float* x, int64_t n, const kernels::Matrix& w, float* y, bool) {
  const vulkan::DeviceMatrix* m = matrix(w);
  if (!m || n == 0) return;
  need({{x, floats(n * w.cols)}, {y, floats(n * w.rows)}});
  vulkan::record_matmul(rec(), *m, in(x, floats(n * w.cols)), n, out(y, floats(n * w.rows)));
  done();
}

void VulkanExecutor::matmul_many(const float* x, int64_t n, const kernels::Matrix* const* ws,
                                 float* const* ys, int count) {
  for (int i = 0; i < count; ++i) matmul(x, n, *ws[i], ys[i], false);
}

void VulkanExecutor::swiglu(const float* gate, const float* up, int64_t n, int64_t dim,
                            int64_t in_stride, float* out) {
  if (n == 0) return;
  const uint64_t span = floats((n - 1) * in_stride + dim);
  need({{gate, span}, {up, span}, {out, floats(n * dim)}});
  vulkan::record_swiglu(rec(), in(gate, span), in(up, span), n, dim, in_stride,
                        this->out(out, floats(n * dim)));
  done();
}

Binding VulkanExecutor::rope_table(float theta, int64_t rotary_dim, int64_t rows,
                                   int64_t* table_rows) {
  uint32_t bits;
  std::memcpy(&bits, &theta, 4);
  auto& [have, buf] = rope_[{bits, rotary_dim}];
  if (have < rows) {
    int64_t want = 4096;
    while (want < rows) want *= 2;
    const std::vector<float> t = vulkan::rope_table(double(theta), rotary_dim, want);
    auto b = dev_->buffer(floats(int64_t(t.size())), vulkan::MemoryKind::kDevice);
    if (!b.ok()) {
      rec().fail(b.status());
      return {};
    }
    if (buf.valid()) retired_.push_back(std::move(buf));
    buf = std::move(*b);
    have = want;
    rec().stage_in(t.data(), floats(int64_t(t.size())), {&buf});
  }
  *table_rows = have;
  return {&buf};
}

void VulkanExecutor::attention(const kernels::Ops::AttentionParams& p, const float* qg,
                               const float* k, const float* v, int64_t n, int64_t pos0,
                               const kernels::KvView& cache, float* out) {
  if (n == 0) return;
  vulkan::Recorder& r = rec();
  const int64_t nh = p.n_heads, nkv = p.n_kv_heads, hd = p.head_dim;
  const int64_t q_row = (p.gated ? 2 : 1) * hd;
  // The rows' rotary positions, int32 [n, 3].
  std::vector<int32_t> pos(size_t(3 * n));
  int64_t most = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int a = 0; a < 3; ++a) {
      const int64_t x = p.positions ? p.positions[3 * t + a] : pos0 + t;
      if (x < 0 || x > INT32_MAX)
        return r.fail(core::error("[vulkan] a rotary position " + std::to_string(x) +
                                  " outside [0, 2^31)"));
      pos[size_t(3 * t + a)] = int32_t(x);
      most = std::max(most, x);
    }
  // The sequence's blocks: indices into its pool's K and V memory of this layer.
  const int64_t n_blocks = (cache.capacity + kernels::kKvBlock - 1) / kernels::kKvBlock;
  const uint64_t kb = uint64_t(cache.k_stride()) * kernels::kKvBlock;
  const uint64_t vb = uint64_t(cache.v_stride()) * kernels::kKvBlock;
  uintptr_t kbase = 0, vbase = 0;
  vulkan::DeviceKv kv;
  kv.k_pool = res_->whole(cache.k_blocks[0], &kbase);
  kv.v_pool = res_->whole(cache.v_blocks[0], &vbase);
  if (!kv.k_pool.buffer || !kv.v_pool.buffer) return;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint64_t ko = reinterpret_cast<uintptr_t>(cache.k_blocks[b]) - kbase;
    const uint64_t vo = reinterpret_cast<uintptr_t>(cache.v_blocks[b]) - vbase;
    if (ko % kb != 0 || vo % vb != 0 || ko / kb != vo / vb || ko >= kv.k_pool.bytes)
      return r.fail(core::error("[vulkan] a KV block outside its pool's memory"));
    table[size_t(b)] = int32_t(ko / kb);
  }
  kv.table = staged(table.data(), floats(n_blocks));
  kv.capacity = n_blocks * kernels::kKvBlock;
  if (!cache.f32()) {
    // The pool's formats, read in place (vulkan/attention.h); their codebooks staged per call
    // (256 bytes).
    kv.k_format = cache.k_format;
    kv.v_format = cache.v_format;
    const std::vector<float> books = vulkan::kv_books(kv.k_format, kv.v_format);
    kv.books = staged(books.data(), floats(int64_t(books.size())));
  }

  need({{qg, floats(n * nh * q_row)}, {k, floats(n * nkv * hd)}, {v, floats(n * nkv * hd)},
        {out, floats(n * nh * hd)}});
  vulkan::AttentionShape s{nh, nkv, hd, p.rotary_dim, p.eps, p.first_key, p.gated};
  vulkan::AttentionInputs ai;
  ai.qg = in(qg, floats(n * nh * q_row));
  ai.k = in(k, floats(n * nkv * hd));
  ai.v = in(v, floats(n * nkv * hd));
  ai.q_norm = in(p.q_norm, floats(hd));
  ai.k_norm = in(p.k_norm, floats(hd));
  ai.positions = staged(pos.data(), uint64_t(pos.size()) * 4);
  Binding axis;
  if (p.pair_axis && p.rotary_dim > 0) {
    auto& buf = pair_axis_[p.pair_axis];
    if (!buf.valid()) {
      std::vector<uint32_t> a(size_t(p.rotary_dim / 2));
      for (size_t i = 0; i < a.size(); ++i) a[i] = p.pair_axis[i];
      auto b = dev_->buffer(uint64_t(a.size()) * 4, vulkan::MemoryKind::kDevice);
      if (!b.ok()) return r.fail(b.status());
      buf = std::move(*b);
      r.stage_in(a.data(), uint64_t(a.size()) * 4, {&buf});
    }
    axis = {&buf};
    ai.pair_axis = &axis;
  }
  ai.rope_table = rope_table(p.rope_theta, std::max<int64_t>(p.rotary_dim, 2), most + 1, &ai.rope_rows);
  ai.q_tmp = temp(floats(n * nh * hd));
  ai.k_tmp = temp(floats(n * nkv * hd));
  vulkan::record_attention(r, s, ai, n, pos0, kv, this->out(out, floats(n * nh * hd)));
  done();
}

void VulkanExecutor::conv1d_silu(const float* x, int64_t n, int64_t channels, const float* w,
                                 int64_t kernel, float* state, float* out) {
  if (n == 0) return;
  need({{x, floats(n * channels)}, {out, floats(n * channels)}});
  vulkan::record_conv1d_silu(rec(), in(x, floats(n * channels)), n, channels,
                             in(w, floats(channels * kernel)), kernel,
                             inout(state, floats((kernel - 1) * channels)),
                             this->out(out, floats(n * channels)));
  done();
}

void VulkanExecutor::gated_delta(const kernels::Ops::DeltaParams& p, const float* qkv,
                                 const float* a, const float* b, int64_t n, bool chunked,
                                 float* state, float* out) {
  if (n == 0) return;
  const int64_t nk = p.n_k_heads, nv = p.n_v_heads, dk = p.d_k, dv = p.d_v;
  const vulkan::DeltaShape s{nk, nv, dk, dv, p.tiled_v_heads};
  need({{qkv, floats(n * (2 * nk * dk + nv * dv))}, {a, floats(n * nv)}, {b, floats(n * nv)},
        {out, floats(n * nv * dv)}});
  const Binding bq = in(qkv, floats(n * (2 * nk * dk + nv * dv)));
  const Binding ba = in(a, floats(n * nv)), bb = in(b, floats(n * nv));
  const Binding decay = in(p.decay, floats(nv)), dt = in(p.dt_bias, floats(nv));
  Binding sin;
  if (p.state_in) sin = in(p.state_in, floats(nv * dk * dv));
  const Binding st = inout(state, floats(nv * dk * dv));
  const Binding o = this->out(out, floats(n * nv * dv));
  if (chunked)
    vulkan::record_delta_chunk(rec(), s, bq, ba, bb, n, decay, dt, st, o);
  else
    vulkan::record_delta_step(rec(), s, bq, ba, bb, n, decay, dt, p.state_in ? &sin : nullptr, st, o);
  done();
}

void VulkanExecutor::router_topk(const float* logits, int64_t n, int64_t n_experts, int64_t k,
                                 bool renormalize, int32_t* idx, float* weight) {
  if (n == 0) return;
  need({{logits, floats(n * n_experts)}, {idx, floats(n * k)}, {weight, floats(n * k)}});
  vulkan::record_router_topk(rec(), in(logits, floats(n * n_experts)), n, n_experts, k, renormalize,
                             out(idx, floats(n * k)), out(weight, floats(n * k)));
  done();
}

void VulkanExecutor::moe_combine(const float* expert_out, const float* weight, int64_t n, int64_t k,
                                 int64_t dim, float* y) {
  if (n == 0) return;
  need({{expert_out, floats(n * k * dim)}, {weight, floats(n * k)}, {y, floats(n * dim)}});
  vulkan::record_moe_combine(rec(), in(expert_out, floats(n * k * dim)), in(weight, floats(n * k)),
                             n, k, dim, out(y, floats(n * dim)));
  done();
}

// Each expert's three matmuls over every slot, computing the slots routed to it (vulkan/ops.h
// record_matmul_indexed: each slot with the bits of a plain matmul of its row alone).
void VulkanExecutor::moe_experts(const float* x, int64_t n, const int32_t* idx, int64_t k,
                                 std::span<const model::MlpWeights> experts, int64_t inter,
                                 int64_t hidden, float* expert_out) {
  if (n == 0) return;
  const int64_t slots = n * k;
  need({{x, floats(n * hidden)}, {idx, floats(slots)}, {expert_out, floats(slots * hidden)}});
  const Binding bx = in(x, floats(n * hidden));
  const Binding bi = in(idx, floats(slots));
  const Binding gate = temp(floats(slots * inter)), up = temp(floats(slots * inter));
  const Binding act = temp(floats(slots * inter));
  const Binding y = out(expert_out, floats(slots * hidden));
  vulkan::Recorder& r = rec();
  for (size_t e = 0; e < experts.size(); ++e) {
    const vulkan::DeviceMatrix* g = matrix(experts[e].gate_proj);
    const vulkan::DeviceMatrix* u = matrix(experts[e].up_proj);
    if (!g || !u) return;
    vulkan::record_matmul_indexed(r, *g, bx, slots, k, bi, int32_t(e), gate);
    vulkan::record_matmul_indexed(r, *u, bx, slots, k, bi, int32_t(e), up);
  }
  vulkan::record_swiglu(r, gate, up, slots, inter, inter, act);
  for (size_t e = 0; e < experts.size(); ++e) {
    const vulkan::DeviceMatrix* d = matrix(experts[e].down_proj);
    if (!d) return;
    vulkan::record_matmul_indexed(r, *d, act, slots, 1, bi, int32_t(e), y);
  }
  done();
}

void VulkanExecutor::sigmoid(float* x, int64_t n) {
  if (n == 0) return;
  vulkan::record_sigmoid(rec(), inout(x, floats(n)), n);
  done();
}

void VulkanExecutor::copy_rows(const float* src, int64_t src_stride, float* dst,
                               int64_t dst_stride, int64_t rows, int64_t width) {
  if (rows == 0 || width == 0) return;
  vulkan::Recorder& r = rec();
  need({{src, floats((rows - 1) * src_stride + width)}, {dst, floats((rows - 1) * dst_stride + width)}});
  if (rows == 1 || (src_stride == width && dst_stride == width)) {
    const uint64_t bytes = floats(rows * width);
    const Binding s = res_->at(src, bytes), d = res_->at(dst, bytes);
    if (s.buffer && d.buffer) r.copy(s, d, bytes);
    return;
  }
  const Binding s = res_->at(src, floats((rows - 1) * src_stride + width));
  const Binding d = res_->at(dst, floats((rows - 1) * dst_stride + width));
  if (!s.buffer || !d.buffer) return;
  r.copy_rows(s, floats(src_stride), d, floats(dst_stride), uint64_t(rows), floats(width));
}

void VulkanExecutor::copy_to_snapshot(const float* src, int64_t count,
                                      model::SnapshotStore::Snapshot& dst, int64_t at) {
  if (count == 0) return;
  vulkan::Recorder& r = rec();
  need({{src, floats(count)}});
  const Binding s = res_->at(src, floats(count));
  const Binding d = DeviceSnapshots::binding(dst, floats(at), floats(count));
  if (!d.buffer) {
    r.fail(core::error("[vulkan] a state copy past the end of its device snapshot"));
    return;
  }
  if (!s.buffer) return;  // the step has failed
  r.copy(s, d, floats(count));
  ++snapshot_copies_;
}

void VulkanExecutor::attach(model::SequenceState& state) {
  rec();
  res_->attach(state);
}

void VulkanExecutor::send(const float* p, int64_t count) {
  rec();
  res_->send(p, floats(count));
}

void VulkanExecutor::receive(const float* p, int64_t count) {
  rec();
  res_->receive(p, floats(count));
}

void VulkanExecutor::forget(const float* p, int64_t count) {
  if (p && count > 0) res_->forget(p, floats(count));
}

void VulkanExecutor::receive_logits(const float* p, int64_t rows, int64_t vocab,
                                    std::span<const int32_t> top_k) {
  auto k_of = [&](int64_t r) -> uint32_t {
    const int32_t k = size_t(r) < top_k.size() ? top_k[size_t(r)] : 0;
    return k > 0 && k < vocab ? uint32_t(k) : 0u;  // k >= vocab: the whole row is as cheap
  };
  // Sized once for the step's rows before any is staged out (the submission writes into it).
  uint64_t words = 0;
  for (int64_t r = 0; r < rows; ++r) words += 2 * uint64_t(k_of(r));
  if (words == 0) return receive(p, rows * vocab);
  if (!topk_rows_.empty()) {
    rec().fail(core::error("[vulkan] logits received by top k twice in one step"));
    return;
  }
  topk_words_.assign(size_t(words), 0);
  // Runs of whole rows go back whole; runs of top-k rows are one dispatch each, cut so that the
  // run's logits fit one binding.
  const uint64_t row_bytes = floats(vocab);
  const int64_t per_binding = std::max<int64_t>(1, int64_t(dev_->part_limit() / row_bytes));
  uint32_t at = 0;
  for (int64_t r = 0; r < rows;) {
    const bool whole = k_of(r) == 0;
    int64_t e = r + 1;
    while (e < rows && (k_of(e) == 0) == whole && (whole || e - r < per_binding)) ++e;
    const float* first = p + r * vocab;
    if (whole) {
      receive(first, (e - r) * vocab);
    } else {
      std::vector<uint32_t> tasks;
      const uint32_t at0 = at;
      for (int64_t i = r; i < e; ++i) {
        const uint32_t k = k_of(i);
        tasks.push_back(k);
        tasks.push_back(at - at0);
        topk_rows_.push_back({const_cast<float*>(p + i * vocab), vocab, k, at});
        at += 2 * k;
      }
      need({{first, floats((e - r) * vocab)}});
      const Binding logits = in(first, floats((e - r) * vocab));
      const Binding t = staged(tasks.data(), tasks.size() * 4);
      const Binding out = temp(uint64_t(at - at0) * 4);
      if (logits.buffer && t.buffer && out.buffer) {
        vulkan::record_top_k(rec(), logits, e - r, vocab, t, out);
        rec().stage_out(out, uint64_t(at - at0) * 4, topk_words_.data() + at0);
      }
    }
    r = e;
  }
}

core::Status VulkanExecutor::finish() {
  if (!open_) return core::ok_status();
  open_ = false;
  core::Status st = rec_->submit();
  if (!st.ok()) {
    // Nothing of the step ran: what it made on the device holds no defined bytes.
    res_->abort();
    rope_.clear();
    pair_axis_.clear();
  } else {
    for (const TopKRow& t : topk_rows_) {
      std::fill(t.row, t.row + t.vocab, -std::numeric_limits<float>::infinity());
      const uint32_t* w = topk_words_.data() + t.at;
      for (uint32_t j = 0; j < t.k; ++j)
        t.row[w[t.k + j]] = std::bit_cast<float>(w[j]);
    }
  }
  topk_rows_.clear();
  res_->end();
  retired_.clear();
  return st;
}

}  // namespace qwen35::vkmodel
