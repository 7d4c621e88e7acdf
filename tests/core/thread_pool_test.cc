#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace qwen35::core {
namespace {

TEST(ThreadPool, CoversEveryItemOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {0, 1, 2, 7, 64, 1000}) {
      for (size_t grain : {1, 3, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, [&](size_t b, size_t e, int t) {
          EXPECT_LT(t, threads);
          for (size_t i = b; i < e; ++i) hits[i]++;
        }, grain);
        for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
      }
    }
  }
}

TEST(ThreadPool, ManyRoundsStayConsistent) {
  ThreadPool pool(4);
  std::atomic<long> sum{0};
  for (int r = 0; r < 2000; ++r)
    pool.parallel_for(10, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) sum += long(i);
    });
  EXPECT_EQ(sum.load(), 2000L * 45);
}

}  // namespace
}  // namespace qwen35::core
