#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
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

// Shares are claimed by whichever thread is free, but each share index is called once per job with
// the range of the static partition (what the kernels' per-share scratch and exactness rest on).
TEST(ThreadPool, EachShareIsItsStaticRangeOnce) {
  for (int threads : {2, 3, 5}) {
    ThreadPool pool(threads);
    for (size_t n : {5, 9, 100, 1001}) {
      for (size_t grain : {1, 4}) {
        const size_t chunks = (n + grain - 1) / grain;
        std::vector<std::atomic<int>> calls(static_cast<size_t>(threads));
        std::vector<size_t> begin(size_t(threads), SIZE_MAX), end(size_t(threads), SIZE_MAX);
        pool.parallel_for(n, [&](size_t b, size_t e, int k) {
          calls[size_t(k)]++;
          begin[size_t(k)] = b;
          end[size_t(k)] = e;
        }, grain);
        size_t chunk = 0;
        for (int k = 0; k < threads; ++k) {
          const size_t mine = chunks / size_t(threads) + (size_t(k) < chunks % size_t(threads));
          const size_t b = std::min(n, chunk * grain), e = std::min(n, (chunk + mine) * grain);
          chunk += mine;
          if (b == e) {
            EXPECT_EQ(calls[size_t(k)].load(), 0) << threads << " " << n << " " << k;
            continue;
          }
          EXPECT_EQ(calls[size_t(k)].load(), 1) << threads << " " << n << " " << k;
          EXPECT_EQ(begin[size_t(k)], b);
          EXPECT_EQ(end[size_t(k)], e);
        }
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

// Idle workers spin, then sleep: calls spaced out past the spin time go through the sleep/wake
// path, back-to-back calls through the spinning one; both must see every job exactly once.
TEST(ThreadPool, WakesSleepingAndSpinningWorkers) {
  ThreadPool pool(3);
  std::atomic<long> sum{0};
  for (int r = 0; r < 60; ++r) {
    if (r % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    pool.parallel_for(30, [&](size_t b, size_t e, int) {
      for (size_t i = b; i < e; ++i) sum += long(i);
    });
    ASSERT_EQ(sum.load(), long(r + 1) * 435);
  }
}

TEST(ThreadPool, DestroyedWhileWorkersSleepOrSpin) {
  for (int wait_ms : {0, 5}) {
    ThreadPool pool(4);
    pool.parallel_for(8, [](size_t, size_t, int) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(wait_ms));
  }  // the destructor must join promptly in both states (the test's timeout would catch a hang)
}

}  // namespace
}  // namespace qwen35::core
