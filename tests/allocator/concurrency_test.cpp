// Several threads on one allocator: no two live blocks overlap, accounting ends exact.
// Labelled `concurrency`: the TSan preset runs these tests.
#include "test_support.h"

#include <cudacache/cudacache.h>

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace cudacache {
namespace {

// The test's own record of live ranges, to detect two threads given overlapping memory.
class LiveRanges {
 public:
  void add(void* p, std::size_t size) {
    const auto begin = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard lock(mutex_);
    auto next = ranges_.lower_bound(begin);
    if (next != ranges_.end()) {
      EXPECT_GE(next->first, begin + size) << "overlap";
    }
    if (next != ranges_.begin()) {
      const auto previous = std::prev(next);
      EXPECT_LE(previous->first + previous->second, begin) << "overlap";
    }
    ranges_.emplace(begin, size);
  }
  void remove(void* p) {
    std::lock_guard lock(mutex_);
    ranges_.erase(reinterpret_cast<std::uintptr_t>(p));
  }

 private:
  std::mutex mutex_;
  std::map<std::uintptr_t, std::size_t> ranges_;
};

constexpr int kThreads = 4;
constexpr int kIterations = 5000;

TEST(Concurrency, ThreadsShareOneDeviceAllocator) {
  if (!cudasim_available()) GTEST_SKIP() << "needs the cudasim runtime";
  std::vector<cudaStream_t> streams(kThreads, nullptr);
  for (int t = 1; t < kThreads; ++t) ASSERT_EQ(cudaStreamCreate(&streams[t]), cudaSuccess);
  {
    DeviceAllocator allocator(0, Options("max_split_size_mb:64"));
    LiveRanges ranges;
    std::atomic<bool> done{false};
    std::thread observer([&] {
      while (!done.load()) {
        const MemoryStats s = allocator.stats();
        EXPECT_GE(s.reserved_bytes[kAllPools].current, s.allocated_bytes[kAllPools].current);
        if (s.allocation[kAllPools].current % 7 == 0) allocator.empty_cache();
        std::this_thread::yield();
      }
    });
    std::vector<std::thread> workers;
    for (int t = 0; t < kThreads; ++t) {
      workers.emplace_back([&, t] {
        std::mt19937 random(static_cast<unsigned>(t + 11));
        std::vector<std::pair<void*, std::size_t>> mine;
        for (int i = 0; i < kIterations; ++i) {
          if (mine.size() < 16 && random() % 3 != 0) {
            const std::size_t size = std::size_t{1} << (random() % 25);
            void* p = allocator.allocate(size, streams[t]);
            ranges.add(p, size);
            if (random() % 5 == 0) allocator.record_stream(p, streams[(t + 1) % kThreads]);
            mine.emplace_back(p, size);
          } else if (!mine.empty()) {
            const std::size_t index = random() % mine.size();
            ranges.remove(mine[index].first);
            allocator.deallocate(mine[index].first);
            mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(index));
          }
        }
        for (auto& [p, size] : mine) {
          ranges.remove(p);
          allocator.deallocate(p);
        }
      });
    }
    for (auto& worker : workers) worker.join();
    done = true;
    observer.join();
    testing::expect_invariants(allocator, {});
    allocator.empty_cache();
    EXPECT_EQ(allocator.stats().reserved_bytes[kAllPools].current, 0);
  }
  EXPECT_EQ(testing::sim_counters().in_use_bytes, 0u);
  for (int t = 1; t < kThreads; ++t) cudaStreamDestroy(streams[t]);
}

TEST(Concurrency, ThreadsShareTheCApi) {
  if (!cudasim_available()) GTEST_SKIP() << "needs the cudasim runtime";
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([t] {
      std::mt19937 random(static_cast<unsigned>(t + 101));
      for (int i = 0; i < kIterations; ++i) {
        const auto size = static_cast<ssize_t>(1 + random() % (4 << 20));
        void* p = cudacache_malloc(size, 0, nullptr);
        ASSERT_NE(p, nullptr) << cudacache_last_error();
        if (i % 50 == 0) cudacache_empty_cache();
        cudacache_free(p, size, 0, nullptr);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  EXPECT_EQ(cudacache_memory_allocated(0), 0u);
  cudacache_empty_cache();
  EXPECT_EQ(cudacache_memory_reserved(0), 0u);
}

}  // namespace
}  // namespace cudacache
