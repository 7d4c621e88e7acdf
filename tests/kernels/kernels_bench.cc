// Micro-benchmarks of the hot CPU kernels (Google Benchmark; not part of the test suite: speed is
// measured, never asserted). One thread (unless an argument says otherwise), on the SIMD target
// the dispatcher picks. Shapes are the
// 0.8B geometry's. Matmuls report the weight bytes streamed (bytes_per_second) and GFLOP/s.
//   build/tests/kernels/kernels_bench [--benchmark_filter=Matmul]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/conv1d.h"
#include "kernels/cpu/delta_rule.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/kv_attention.h"
#include "kernels/int8_form.h"
#include "kernels/kv_format.h"
#include "kernels/matrix.h"
#include "kernels/ops.h"

namespace {

using namespace qwen35::kernels;

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// An MLX affine matrix with random codes and unit bf16 scales/biases.
struct AffineMatrix {
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales, biases;
  Matrix m;
  AffineMatrix(int64_t rows, int64_t cols, int bits) {
    std::mt19937 g(1);
    words.resize(size_t(rows * cols * bits / 32));
    for (auto& w : words) w = g();
    scales.assign(size_t(rows * cols / 64), 0x3c00);
    biases.assign(scales.size(), 0xbc00);
    m.type = WeightType::kAffine;
    m.rows = rows;
    m.cols = cols;
    m.bits = bits;
    m.group = 64;
    m.data = words.data();
    m.scales = scales.data();
    m.biases = biases.data();
    m.sb_type = qwen35::core::DType::kBF16;
  }
};

// args: rows, cols, bits, activation rows n, fast (0/1)
void BM_MatmulAffine(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1), n = st.range(3);
  const int bits = int(st.range(2));
  AffineMatrix w(rows, cols, bits);
  std::vector<float> x = random_floats(size_t(n * cols), 2), y(size_t(n * rows));
  cpu::MatmulScratch s;
  Context ctx;
  ctx.int8_activations = st.range(4) != 0;
  for (auto _ : st) {
    cpu::matmul(ctx, x.data(), n, w.m, y.data(), s);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(w.m.bytes()));
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(rows * cols * n) * double(st.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
  st.SetLabel(cpu::simd_target() + (ctx.int8_activations ? " fast" : " exact"));
}
BENCHMARK(BM_MatmulAffine)
    ->ArgNames({"rows", "cols", "bits", "n", "fast"})
    ->Args({3584, 1024, 4, 1, 0})
    ->Args({3584, 1024, 4, 1, 1})
    ->Args({248320, 1024, 4, 1, 1})
    ->Args({3584, 1024, 4, 8, 0})
    ->Args({3584, 1024, 4, 8, 1})
    ->Args({3584, 1024, 4, 64, 0})
    ->Args({3584, 1024, 4, 64, 1})
    ->Args({1024, 3584, 4, 64, 1})
    ->Args({3584, 1024, 8, 1, 0})
    ->Args({3584, 1024, 8, 1, 1})
    ->Args({3584, 1024, 8, 64, 1})
    ->Args({3584, 1024, 2, 64, 1});

// The int8 form of a GGUF block matrix (random codes, small f16 block scales) in the fast mode.
// args: type (WeightType), rows, cols, activation rows n
void BM_MatmulInt8Form(benchmark::State& st) {
  Matrix b;
  b.type = WeightType(st.range(0));
  b.rows = st.range(1);
  b.cols = st.range(2);
  const int64_t n = st.range(3);
  const BlockFormat f = block_format(b.type);
  std::vector<uint8_t> blocks(size_t(b.rows * b.cols / f.elements * f.bytes));
  std::mt19937 g(1);
  for (auto& v : blocks) v = uint8_t(g());
  const size_t d_at = b.type == WeightType::kQ6_K ? 208 : 0;
  for (size_t i = d_at; i < blocks.size(); i += size_t(f.bytes)) {
    const uint16_t h = qwen35::core::f32_to_f16(1e-3f);
    std::memcpy(&blocks[i], &h, 2);
    if (b.type == WeightType::kQ4_K || b.type == WeightType::kQ5_K) std::memcpy(&blocks[i + 2], &h, 2);
  }
  b.data = blocks.data();
  const auto form = make_int8_form(b, nullptr);
  std::vector<float> x = random_floats(size_t(n * b.cols), 2), y(size_t(n * b.rows));
  cpu::MatmulScratch s;
  Context ctx;
  ctx.int8_activations = true;
  for (auto _ : st) {
    cpu::matmul(ctx, x.data(), n, form->m, y.data(), s);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(form->m.bytes()));
  st.SetLabel(cpu::simd_target() + " " + std::to_string(form->m.bits) + "-bit g" + std::to_string(form->m.group));
}
BENCHMARK(BM_MatmulInt8Form)
    ->ArgNames({"type", "rows", "cols", "n"})
    ->Args({int64_t(WeightType::kQ4_K), 3584, 1024, 1})
    ->Args({int64_t(WeightType::kQ6_K), 3584, 1024, 1})
    ->Args({int64_t(WeightType::kQ6_K), 248320, 1024, 1})
    ->Args({int64_t(WeightType::kQ8_0), 3584, 1024, 1})
    ->Args({int64_t(WeightType::kIQ4_XS), 3584, 1024, 1})
    ->Args({int64_t(WeightType::kQ4_K), 3584, 1024, 64});

void BM_MatmulBF16(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1), n = st.range(2);
  std::vector<uint16_t> wdata(size_t(rows * cols), 0x3c00);
  Matrix m;
  m.type = WeightType::kBF16;
  m.rows = rows;
  m.cols = cols;
  m.data = wdata.data();
  std::vector<float> x = random_floats(size_t(n * cols), 3), y(size_t(n * rows));
  cpu::MatmulScratch s;
  for (auto _ : st) {
    cpu::matmul({}, x.data(), n, m, y.data(), s);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * int64_t(m.bytes()));
  st.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(rows * cols * n) * double(st.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}
// {1152, 4304, 256}: the 9B-and-larger vision towers' MLP down projection (a width that is not a
// multiple of the tile's 32), against {1152, 4288, 256}, one that is.
BENCHMARK(BM_MatmulBF16)->ArgNames({"rows", "cols", "n"})->Args({3584, 1024, 1})->Args({3584, 1024, 64})
    ->Args({1152, 4304, 256})->Args({1152, 4288, 256});

// One token of the recurrent delta rule for one 128x128 head (state read and written once).
void BM_DeltaStep(benchmark::State& st) {
  const int64_t dk = 128, dv = 128;
  std::vector<float> S = random_floats(size_t(dk * dv), 4, 0.1f), k = random_floats(size_t(dk), 5),
                     q = random_floats(size_t(dk), 6), v = random_floats(size_t(dv), 7);
  std::vector<float> o(static_cast<size_t>(dv));
  for (auto _ : st) {
    cpu::delta_step(S.data(), k.data(), q.data(), v.data(), 0.99f, 0.5f, dk, dv, o.data());
    benchmark::DoNotOptimize(o.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * dk * dv * 4 * 2);  // state in and out
}
BENCHMARK(BM_DeltaStep);

// A 64-token chunk of the chunked delta rule for one 128x128 head.
void BM_DeltaChunk(benchmark::State& st) {
  const int64_t n = 64, dk = 128, dv = 128;
  std::vector<float> S = random_floats(size_t(dk * dv), 8, 0.1f), qk = random_floats(size_t(2 * n * dk), 9, 0.09f),
                     g = random_floats(size_t(n), 10, 0.01f), beta(size_t(n), 0.5f),
                     v = random_floats(size_t(n * dv), 11), out(size_t(n * dv)),
                     scratch(size_t(2 * n + n * n + 2 * n * dv + n * dk + std::max(n, dk)));
  for (auto& x : g) x = -std::abs(x);
  for (auto _ : st) {
    cpu::delta_chunk({n, dk, dv, qk.data(), qk.data() + n * dk, dk, g.data(), beta.data(), 1, v.data(), dv,
                      S.data(), out.data(), dv, scratch.data()});
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["tokens/s"] = benchmark::Counter(double(n) * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DeltaChunk);

// Causal conv1d + SiLU over the 0.8B's 6144 GDN channels, kernel 4; args: rows n.
void BM_Conv1dSilu(benchmark::State& st) {
  const int64_t ch = 6144, kernel = 4, n = st.range(0);
  std::vector<float> x = random_floats(size_t(n * ch), 12), w = random_floats(size_t(ch * kernel), 13),
                     state(size_t((kernel - 1) * ch)), out(size_t(n * ch));
  for (auto _ : st) {
    cpu::conv1d_silu_channels(x.data(), n, ch, w.data(), kernel, state.data(), out.data(), 0, ch);
    benchmark::DoNotOptimize(out.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * n * ch * 4 * 2);
}
BENCHMARK(BM_Conv1dSilu)->Arg(1)->Arg(64);

// One query row attending over `pos` cached positions (head_dim 256, the 0.8B's).
void BM_Attend(benchmark::State& st) {
  const int64_t hd = 256, pos = st.range(0);
  std::vector<float> q = random_floats(size_t(hd), 14, 0.06f), k = random_floats(size_t(pos * hd), 15),
                     v = random_floats(size_t(pos * hd), 16);
  std::vector<float> s(static_cast<size_t>(pos)), o(static_cast<size_t>(hd));
  for (auto _ : st) {
    cpu::attend(q.data(), k.data(), v.data(), hd, pos, hd, 0.0625f, s.data(), o.data());
    benchmark::DoNotOptimize(o.data());
  }
  st.SetBytesProcessed(int64_t(st.iterations()) * pos * hd * 4 * 2);
}
BENCHMARK(BM_Attend)->Arg(512)->Arg(4096);

// A prefill work item: the 4 query heads of one key/value head at 4 consecutive positions
// (16 queries) over the cache, as the CPU attention op groups them.
void BM_AttendMany(benchmark::State& st) {
  const int64_t hd = 256, pos = st.range(0);
  constexpr int kQ = 16;
  std::vector<float> q = random_floats(size_t(kQ * hd), 17, 0.06f), k = random_floats(size_t(pos * hd), 18),
                     v = random_floats(size_t(pos * hd), 19), s(size_t(kQ * 64)), m(size_t(2 * kQ)),
                     o(size_t(kQ * hd));
  const float* qp[kQ];
  float* op[kQ];
  int64_t n_pos[kQ];
  for (int i = 0; i < kQ; ++i) {
    qp[i] = q.data() + i * hd;
    op[i] = o.data() + i * hd;
    n_pos[i] = pos - 3 + i / 4;
  }
  const auto kb = cpu::contiguous_blocks(k.data(), pos, hd), vb = cpu::contiguous_blocks(v.data(), pos, hd);
  for (auto _ : st) {
    cpu::attend_many(qp, n_pos, kQ, {kb.data(), vb.data(), 0, hd}, hd, 0.0625f, s.data(), m.data(), op);
    benchmark::DoNotOptimize(o.data());
  }
  st.counters["query_keys/s"] =
      benchmark::Counter(double(kQ) * double(pos) * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttendMany)->Arg(512)->Arg(4096);

// The vision tower's attention over one image of n patch rows (args: n, heads, head_dim, threads;
// 16×72 is the 1152-wide tower's). Reports GFLOP/s of its two matrix products
// (4·n²·heads·head_dim); with threads > 1, per wall-clock second.
void BM_VisionAttention(benchmark::State& st) {
  const int64_t n = st.range(0), nh = st.range(1), hd = st.range(2), threads = st.range(3);
  std::unique_ptr<qwen35::core::ThreadPool> pool;
  if (threads > 1) pool = std::make_unique<qwen35::core::ThreadPool>(int(threads));
  const std::vector<float> qkv = random_floats(size_t(n * 3 * nh * hd), 20, 1.5f);
  std::vector<float> cos(size_t(n * hd / 2)), sin(cos.size()), out(size_t(n * nh * hd));
  for (size_t i = 0; i < cos.size(); ++i) {
    cos[i] = std::cos(0.01f * float(i));
    sin[i] = std::sin(0.01f * float(i));
  }
  const Ops& ops = cpu_ops();
  const auto ws = ops.new_workspace();
  for (auto _ : st) {
    ops.vision_attention({pool.get(), false, ws.get()}, {nh, hd}, qkv.data(), n, cos.data(), sin.data(), out.data());
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(4.0 * double(n) * double(n) * double(nh * hd) * double(st.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_VisionAttention)->ArgNames({"n", "heads", "head_dim", "threads"})->Args({256, 12, 64, 1})
    ->Args({1024, 16, 72, 1})->Args({4096, 16, 72, 1})->Args({1024, 16, 72, 2})
    ->Unit(benchmark::kMillisecond)->UseRealTime();

// GELU (tanh form) over one MLP row of the 1152-wide tower (4304 values).
void BM_GeluTanh(benchmark::State& st) {
  std::vector<float> x = random_floats(4304, 21, 2.0f);
  for (auto _ : st) {
    std::vector<float> y = x;
    cpu::gelu(y.data(), int64_t(y.size()), true);
    benchmark::DoNotOptimize(y.data());
  }
  st.SetItemsProcessed(int64_t(st.iterations()) * 4304);
}
BENCHMARK(BM_GeluTanh);

// The KV-format primitives over one 64-position block of one KV head (head_dim 256; two KV heads
// per position, so rows sit at twice the row's bytes), per type (arg 0: kAllKvTypes index; q8_0
// and q4_0 rotated, as K would be). Reports the row bytes read (bytes_per_second) and rows/s.
struct KvBlock {
  KvFormat f;
  std::vector<uint8_t> bytes;
  int64_t stride;
  explicit KvBlock(int64_t type) : f(kv_format(kAllKvTypes[type], 256, kAllKvTypes[type] != KvType::kF32 && kAllKvTypes[type] != KvType::kBF16)) {
    stride = int64_t(kv_row_bytes(f)) * 2;
    bytes.assign(size_t(64 * stride), 0);
    const std::vector<float> x = random_floats(size_t(64 * 256), 22);
    for (int64_t j = 0; j < 64; ++j) kv_encode_row(f, x.data() + j * 256, bytes.data() + j * stride);
  }
};

void BM_KvScores(benchmark::State& st) {
  const KvBlock kb(st.range(0));
  PreparedQuery pq;
  const std::vector<float> q = random_floats(256, 23);
  kv_prepare_query(kb.f, q.data(), &pq);
  std::vector<float> s(64);
  for (auto _ : st) {
    cpu::kv_scores(pq, kb.bytes.data(), kb.stride, 64, 0.0625f, s.data());
    benchmark::DoNotOptimize(s.data());
  }
  st.SetLabel(std::string(kv_type_name(kb.f.type)));
  st.SetBytesProcessed(int64_t(st.iterations()) * 64 * int64_t(kv_row_bytes(kb.f)));
  st.counters["rows/s"] = benchmark::Counter(64.0 * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KvScores)->DenseRange(0, 5);

// Four query heads of one KV head (the 0.8B's group) against the block: rows decoded once.
void BM_KvScoresMany(benchmark::State& st) {
  const KvBlock kb(st.range(0));
  PreparedQuery pq[4];
  const PreparedQuery* qp[4];
  std::vector<float> s(4 * 64);
  float* sp[4];
  for (int a = 0; a < 4; ++a) {
    const std::vector<float> q = random_floats(256, 26 + uint32_t(a));
    kv_prepare_query(kb.f, q.data(), &pq[a]);
    qp[a] = &pq[a];
    sp[a] = s.data() + 64 * a;
  }
  for (auto _ : st) {
    cpu::kv_scores_many(qp, 4, kb.bytes.data(), kb.stride, 64, 0.0625f, sp);
    benchmark::DoNotOptimize(s.data());
  }
  st.SetLabel(std::string(kv_type_name(kb.f.type)));
  st.counters["query_rows/s"] = benchmark::Counter(4 * 64.0 * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KvScoresMany)->DenseRange(0, 5);

void BM_KvValues(benchmark::State& st) {
  const KvBlock kb(st.range(0));
  const std::vector<float> w = random_floats(64, 24, 0.01f);
  std::vector<float> acc(256, 0.0f);
  for (auto _ : st) {
    cpu::kv_values(kb.f, w.data(), kb.bytes.data(), kb.stride, 64, acc.data());
    benchmark::DoNotOptimize(acc.data());
  }
  st.SetLabel(std::string(kv_type_name(kb.f.type)));
  st.SetBytesProcessed(int64_t(st.iterations()) * 64 * int64_t(kv_row_bytes(kb.f)));
  st.counters["rows/s"] = benchmark::Counter(64.0 * double(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_KvValues)->DenseRange(0, 5);

// The query's preparation, once per query row and K format (rotation; q8_0/q4_0: int8 codes).
void BM_KvPrepareQuery(benchmark::State& st) {
  const KvFormat f = kv_format(kAllKvTypes[st.range(0)], 256, true);
  const std::vector<float> q = random_floats(256, 25);
  PreparedQuery pq;
  for (auto _ : st) {
    kv_prepare_query(f, q.data(), &pq);
    benchmark::DoNotOptimize(pq.f.data());
  }
  st.SetLabel(std::string(kv_type_name(f.type)));
}
BENCHMARK(BM_KvPrepareQuery)->DenseRange(2, 5);

}  // namespace

BENCHMARK_MAIN();
