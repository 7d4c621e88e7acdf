// Micro-benchmark of the CPU matmul (not part of the test suite): best-of-N time of one call on
// one thread, for decode (n = 1, GB/s of weights) and prefill (n rows, GFLOP/s) shapes.
//   build/tests/kernels/matmul_bench [rows cols bits n]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/ops.h"

using namespace qwen35::kernels;

int main(int argc, char** argv) {
  const int64_t rows = argc > 1 ? atol(argv[1]) : 3584, cols = argc > 2 ? atol(argv[2]) : 1024;
  const int bits = argc > 3 ? atoi(argv[3]) : 4;
  const int64_t n = argc > 4 ? atol(argv[4]) : 1;
  std::mt19937 g(1);
  std::vector<uint32_t> w(size_t(rows * cols * bits / 32));
  for (auto& x : w) x = g();
  std::vector<uint16_t> sc(size_t(rows * cols / 64), 0x3c00), bi(sc.size(), 0x3c00);
  Matrix m;
  m.type = WeightType::kAffine;
  m.rows = rows;
  m.cols = cols;
  m.bits = bits;
  m.group = 64;
  m.data = w.data();
  m.scales = sc.data();
  m.biases = bi.data();
  m.sb_type = qwen35::core::DType::kBF16;
  std::vector<float> x(size_t(n * cols), 0.5f), y(size_t(n * rows));
  cpu::MatmulScratch s;
  Context ctx;
  ctx.int8_activations = argc > 5 && std::string(argv[5]) == "fast";
  double best = 1e9;
  for (int r = 0; r < 50; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cpu::matmul(ctx, x.data(), n, m, y.data(), s);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("target %s  %lldx%lld %d-bit n=%lld: %.3f ms  %.2f GB/s weights  %.2f GFLOP/s\n",
              cpu::simd_target().c_str(), (long long)rows, (long long)cols, bits, (long long)n, best * 1e3,
              double(m.bytes()) / best / 1e9, 2.0 * double(rows * cols * n) / best / 1e9);
}
