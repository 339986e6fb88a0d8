// Several threads on one allocator: no two live blocks overlap, accounting ends exact.
// Labelled `concurrency`: the TSan preset runs these tests.
#include "test_support.h"

#include <cudacache/cudacache.h>

#include <gtest/gtest.h>

#include <algorithm>
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
constexpr std::size_t kMaxLivePerThread = 16;

// Marks the first and last bytes of a block with `tag` on `stream` (up to 64 each end) ...
void mark(void* p, std::size_t size, unsigned char tag, cudaStream_t stream) {
  const std::size_t edge = std::min<std::size_t>(size, 64);
  auto* bytes = static_cast<unsigned char*>(p);
  ASSERT_EQ(cudaMemsetAsync(bytes, tag, edge, stream), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(bytes + size - edge, tag, edge, stream), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
}

// ... and checks them before the block is freed: a block that another thread was also given
// (or that the allocator reused while live) shows another thread's tag.
void expect_marked(void* p, std::size_t size, unsigned char tag) {
  auto* bytes = static_cast<unsigned char*>(p);
  for (std::size_t offset : {std::size_t{0}, size - 1}) {
    unsigned char found = 0;
    ASSERT_EQ(cudaMemcpy(&found, bytes + offset, 1, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(found, tag) << "block " << p << " byte " << offset << " overwritten";
  }
}

// One worker of ThreadsShareOneDeviceAllocator: random allocations and frees on its own
// stream, each block tagged and checked before its free.
void run_worker(DeviceAllocator& allocator, LiveRanges& ranges,
                const std::vector<cudaStream_t>& streams, int t) {
  std::mt19937 random(static_cast<unsigned>(t + 11));
  std::vector<std::pair<void*, std::size_t>> mine;
  for (int i = 0; i < kIterations; ++i) {
    if (mine.size() < kMaxLivePerThread && random() % 3 != 0) {
      const std::size_t size = std::size_t{1} << (random() % 25);
      void* p = allocator.allocate(size, streams[t]);
      ranges.add(p, size);
      mark(p, size, static_cast<unsigned char>(t + 1), streams[t]);
      if (random() % 5 == 0) allocator.record_stream(p, streams[(t + 1) % kThreads]);
      mine.emplace_back(p, size);
    } else if (!mine.empty()) {
      const std::size_t index = random() % mine.size();
      expect_marked(mine[index].first, mine[index].second, static_cast<unsigned char>(t + 1));
      ranges.remove(mine[index].first);
      allocator.deallocate(mine[index].first);
      mine.erase(mine.begin() + static_cast<std::ptrdiff_t>(index));
    }
  }
  for (auto& [p, size] : mine) {
    ranges.remove(p);
    allocator.deallocate(p);
  }
}

TEST(Concurrency, ThreadsShareOneDeviceAllocator) {
  CUDACACHE_REQUIRE_CUDASIM();
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
        EXPECT_LE(s.allocation[kAllPools].current,
                  static_cast<std::int64_t>(kThreads * kMaxLivePerThread));
        // Active blocks (allocated, or freed with events pending) hold what was asked of them.
        EXPECT_GE(s.active_bytes[kAllPools].current, s.requested_bytes[kAllPools].current);
        if (s.allocation[kAllPools].current % 7 == 0) {
          try {
            allocator.empty_cache();
          } catch (const Error& error) {
            ADD_FAILURE() << "observer: " << error.what();
          }
        }
        std::this_thread::yield();
      }
    });
    std::vector<std::thread> workers;
    for (int t = 0; t < kThreads; ++t) {
      workers.emplace_back([&, t] {
        // An error is this test's failure, not the process's end (the fault sweep fails calls).
        try {
          run_worker(allocator, ranges, streams, t);
        } catch (const Error& error) {
          ADD_FAILURE() << "thread " << t << ": " << error.what();
        } catch (const std::bad_alloc& error) {
          ADD_FAILURE() << "thread " << t << ": " << error.what();
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
  CUDACACHE_REQUIRE_CUDASIM();
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([t] {
      std::mt19937 random(static_cast<unsigned>(t + 101));
      for (int i = 0; i < kIterations; ++i) {
        const auto size = static_cast<ssize_t>(1 + random() % (4 << 20));
        void* p = cudacache_malloc(size, 0, nullptr);
        ASSERT_NE(p, nullptr) << cudacache_last_error();
        const auto tag = static_cast<unsigned char>(t + 1);
        mark(p, static_cast<std::size_t>(size), tag, nullptr);
        if (i % 50 == 0) cudacache_empty_cache();
        std::this_thread::yield();  // let the other threads allocate meanwhile
        expect_marked(p, static_cast<std::size_t>(size), tag);
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
