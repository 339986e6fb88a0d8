// The C++ API, compiled as C++17 to check that the public header is C++17.
#include <cudacache/cudacache.hpp>

#include <cudasim.h>
#include <gtest/gtest.h>

#include "require_cudasim.h"
#include "sim_streams.h"

#include <cstdlib>

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

static_assert(__cplusplus == 201703L, "this test checks the public header as C++17");
static_assert(!std::is_copy_constructible_v<cudacache::DeviceBuffer>);
static_assert(std::is_nothrow_move_constructible_v<cudacache::DeviceBuffer>);
static_assert(std::is_base_of_v<std::bad_alloc, cudacache::OutOfMemoryError>);

// Tests only, not in the public header (allocator/c_api.cpp).
extern "C" void cudacache_testing_reset(void);

namespace {

using cudacache::testing::HeldStream;
using cudacache::testing::ScopedStream;

constexpr std::size_t kMiB = std::size_t{1} << 20;

class CppApi : public ::testing::Test {
 protected:
  // Each case starts from a process where cudacache was never used, as CTest runs it, also
  // when the whole binary runs in one process.
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    unsetenv("CUDACACHE_CONF");
    cudacache_testing_reset();
  }
  void TearDown() override {
    unsetenv("CUDACACHE_CONF");
    cudacache_testing_reset();
  }
};

TEST_F(CppApi, DeviceBufferIsRaiiAndMoveOnly) {
  {
    cudacache::DeviceBuffer a(3 * kMiB);
    ASSERT_TRUE(a);
    EXPECT_EQ(a.size(), 3 * kMiB);
    EXPECT_EQ(cudacache::memory_stats().allocated_bytes[cudacache::kAllPools].current,
              static_cast<std::int64_t>(3 * kMiB));
    cudacache::DeviceBuffer b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from state is specified
    EXPECT_TRUE(b);
    cudacache::DeviceBuffer c;
    c = std::move(b);
    EXPECT_TRUE(c);
    EXPECT_EQ(cudacache::memory_stats().allocation[cudacache::kAllPools].current, 1);
  }
  EXPECT_EQ(cudacache::memory_stats().allocation[cudacache::kAllPools].current, 0);
}

TEST_F(CppApi, AllocateDeallocateAndStats) {
  void* p = cudacache::allocate(1000);
  void* q = cudacache::allocate(1000, 0, nullptr);
  EXPECT_NE(p, q);
  cudacache::MemoryStats stats = cudacache::memory_stats(0);
  EXPECT_EQ(stats.version, cudacache::MemoryStats::kVersion);
  EXPECT_EQ(stats.allocated_bytes[cudacache::kSmallPool].current, 2048);
  EXPECT_EQ(stats.requested_bytes[cudacache::kAllPools].current, 2000);
  cudacache::deallocate(p);
  cudacache::deallocate(q);
  cudacache::deallocate(nullptr);
  EXPECT_EQ(cudacache::allocate(0), nullptr);
  cudacache::reset_peak_memory_stats();
  cudacache::reset_accumulated_memory_stats();
  stats = cudacache::memory_stats();
  EXPECT_EQ(stats.allocated_bytes[cudacache::kAllPools].peak, 0);
  EXPECT_EQ(stats.num_device_alloc, 0);
  EXPECT_NE(cudacache::memory_stats_json().find("\"reserved_bytes.all.current\":2097152"),
            std::string::npos);
  EXPECT_NE(cudacache::snapshot_json().find("\"segment_type\":\"small\""), std::string::npos);
  cudacache::empty_cache();
  EXPECT_EQ(cudacache::memory_stats().reserved_bytes[cudacache::kAllPools].current, 0);
}

TEST_F(CppApi, ErrorsAreTyped) {
  int local = 0;
  try {
    cudacache::deallocate(&local);
    FAIL() << "no exception";
  } catch (const cudacache::Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_UNKNOWN_POINTER);
  }
  EXPECT_THROW(cudacache::allocate(64, 5, nullptr), cudacache::Error);
  EXPECT_THROW(cudacache::allocate(SIZE_MAX), cudacache::Error);
  EXPECT_THROW(cudacache::configure("nonsense:1"), cudacache::Error);
  EXPECT_THROW(cudacache::remove_retry_hook(999), cudacache::Error);
  try {
    cudacache::DeviceBuffer huge(std::size_t{256} << 30);
    FAIL() << "no exception";
  } catch (const cudacache::OutOfMemoryError& error) {
    EXPECT_EQ(error.report().requested_bytes, std::size_t{256} << 30);
    EXPECT_NE(std::string(error.what()).find("256.00 GiB"), std::string::npos);
  }
  cudacache::DeviceBuffer fine(kMiB);  // the allocator keeps working
  EXPECT_TRUE(fine);
}

TEST_F(CppApi, RetryHookAsStdFunction) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  auto hog = std::make_unique<cudacache::DeviceBuffer>(50 * kMiB);
  int calls = 0;
  const int handle = cudacache::add_retry_hook([&](const cudacache::OomContext& context) {
    ++calls;
    EXPECT_EQ(context.requested_bytes, 30 * kMiB);
    hog.reset();
    cudacache::empty_cache();
    return true;
  });
  cudacache::DeviceBuffer wanted(30 * kMiB);
  EXPECT_TRUE(wanted);
  EXPECT_EQ(calls, 1);
  cudacache::remove_retry_hook(handle);
}

TEST_F(CppApi, HistoryRecordAndCsv) {
  cudacache::record_history(10);
  { cudacache::DeviceBuffer buffer(3000); }
  EXPECT_EQ(cudacache::history_csv(), "op,id,size,stream\nalloc,0,3000,0\nfree,0,3000,0\n");
  EXPECT_NE(cudacache::snapshot_json(0).find("\"action\":\"free_completed\""), std::string::npos);
  cudacache::record_history(0);
  try {
    cudacache::record_history(10, 5);
    ADD_FAILURE() << "no error for device 5";
  } catch (const cudacache::Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_INVALID_DEVICE);
  }
  EXPECT_THROW(cudacache::history_csv(-3), cudacache::Error);
}

TEST_F(CppApi, RecordStream) {
  const ScopedStream side;
  void* p = cudacache::allocate(4096);
  cudacache::record_stream(p, side);
  HeldStream held(side);
  cudacache::deallocate(p);
  void* q = cudacache::allocate(4096);
  EXPECT_NE(p, q);
  ASSERT_EQ(held.release(), 0);
  cudacache::deallocate(q);
  int local = 0;
  EXPECT_THROW(cudacache::record_stream(&local, side), cudacache::Error);
}

// Issue 16: the C struct and the C++ struct come from one table; every field agrees.
TEST_F(CppApi, TheCStatsStructHoldsWhatMemoryStatsHolds) {
  void* small = cudacache::allocate(1000);
  void* large = cudacache::allocate(30 * kMiB);
  cudacache::deallocate(small);
  cudacache_memory_stats c{};
  c.size = sizeof c;
  ASSERT_EQ(cudacache_get_memory_stats(-1, &c), CUDACACHE_OK) << cudacache_last_error();
  const cudacache::MemoryStats cpp = cudacache::memory_stats();
  EXPECT_EQ(c.size, sizeof c);
  EXPECT_EQ(c.version, cpp.version);
  auto same = [](const cudacache_stat& a, const cudacache::Stat& b) {
    return a.current == b.current && a.peak == b.peak && a.allocated == b.allocated &&
           a.freed == b.freed;
  };
  int nonzero = 0;
#define CUDACACHE_STAT_ARRAY(name, doc)                                 \
  for (std::size_t pool = 0; pool < cudacache::kNumStatPools; ++pool) { \
    EXPECT_TRUE(same(c.name[pool], cpp.name[pool])) << #name << pool;   \
    nonzero += c.name[pool].allocated != 0;                             \
  }
#define CUDACACHE_STAT_SINGLE(name, doc) EXPECT_TRUE(same(c.name, cpp.name)) << #name;
#define CUDACACHE_STAT_EVENTS(name, doc) EXPECT_EQ(c.name, cpp.name) << #name;
#define CUDACACHE_STAT_SETTING(name, doc) EXPECT_EQ(c.name, cpp.name) << #name;
#include <cudacache/memory_stats.inc>
  EXPECT_GT(nonzero, 10);  // the allocations above show in many counters
  EXPECT_EQ(c.allocated_bytes[CUDACACHE_ALL_POOLS].current, std::int64_t{30} * 1024 * 1024);
  EXPECT_EQ(c.allocation[CUDACACHE_SMALL_POOL].freed, 1);
  EXPECT_GE(c.num_device_alloc, 1);
  cudacache::deallocate(large);
}

// Issue 12, defect 1: blocks of every thread's per-thread default stream shared one key, so a
// block thread A freed while its per-thread stream still had work queued went straight to
// thread B, and A's pending memset then overwrote B's data.
TEST_F(CppApi, PerThreadStreamBlocksWaitForTheFreeingThreadsWork) {
  constexpr std::size_t kSize = 4096;
  void* freed_by_a = nullptr;
  std::promise<void> a_freed;
  std::promise<void> b_done;
  std::thread a([&] {
    freed_by_a = cudacache::allocate(kSize, cudaStreamPerThread);
    HeldStream held(cudaStreamPerThread);  // A's work stays queued
    ASSERT_EQ(cudaMemsetAsync(freed_by_a, 0xAA, kSize, cudaStreamPerThread), cudaSuccess);
    cudacache::deallocate(freed_by_a);
    a_freed.set_value();
    b_done.get_future().wait();
    ASSERT_EQ(held.release(), 0);  // A's memset runs now
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  });
  a_freed.get_future().wait();
  void* b_block = cudacache::allocate(kSize, cudaStreamPerThread);  // this thread is B
  // On B's own stream: the legacy default stream would wait for A's held one.
  ASSERT_EQ(cudaMemsetAsync(b_block, 0x11, kSize, cudaStreamPerThread), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
  b_done.set_value();
  a.join();
  EXPECT_NE(b_block, freed_by_a) << "A's block was reused while A's memset was still queued";
  unsigned char byte = 0;
  ASSERT_EQ(cudaMemcpy(&byte, b_block, 1, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(byte, 0x11) << "B's data was overwritten by A's queued work";
  cudacache::deallocate(b_block);
}

}  // namespace
