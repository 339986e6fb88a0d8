// record_stream: a block freed while another stream still uses it is reused only after that
// stream's work completes. cudasim_hold_stream makes "still running" deterministic.
#include "captured_log.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <optional>

namespace cudacache {
namespace {

using testing::CapturedLog;
using testing::HeldStream;
using testing::ScopedStream;

class StreamEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    compute_ = compute_stream_.emplace().get();
    copy_ = copy_stream_.emplace().get();
  }
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;

 private:
  std::optional<ScopedStream> compute_stream_;  // created after the skip without cudasim
  std::optional<ScopedStream> copy_stream_;
};

TEST_F(StreamEventsTest, BlockWaitsForTheRecordedStream) {
  DeviceAllocator allocator(0, Options{});
  void* a = allocator.allocate(4096, compute_);
  allocator.record_stream(a, copy_);
  HeldStream held(copy_);
  allocator.deallocate(a);
  MemoryStats stats = allocator.stats();
  EXPECT_EQ(stats.allocation[kAllPools].current, 0);
  EXPECT_EQ(stats.active[kAllPools].current, 1);  // pending, still active
  EXPECT_EQ(stats.active_bytes[kAllPools].current, 4096);

  void* b = allocator.allocate(4096, compute_);
  EXPECT_NE(b, a) << "reused while copy_ may still read it";

  ASSERT_EQ(held.release(), 0);
  void* c = allocator.allocate(4096, compute_);  // polls events first: a is free again
  EXPECT_EQ(c, a);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  allocator.deallocate(b);
  allocator.deallocate(c);
  EXPECT_EQ(allocator.stats().active[kAllPools].current, 0);
}

TEST_F(StreamEventsTest, RecordingTheAllocationStreamIsANoOp) {
  DeviceAllocator allocator(0, Options{});
  void* a = allocator.allocate(4096, compute_);
  allocator.record_stream(a, compute_);
  HeldStream held(compute_);
  allocator.deallocate(a);  // no event: stream order protects same-stream reuse
  void* b = allocator.allocate(4096, compute_);
  EXPECT_EQ(b, a);
  ASSERT_EQ(held.release(), 0);
  allocator.deallocate(b);
}

TEST_F(StreamEventsTest, PendingBlockDoesNotMergeUntilComplete) {
  DeviceAllocator allocator(0, Options{});
  void* a = allocator.allocate(4096, compute_);
  void* b = allocator.allocate(4096, compute_);
  allocator.record_stream(b, copy_);
  HeldStream held(copy_);
  allocator.deallocate(b);
  allocator.deallocate(a);
  // a merged with the free tail? b sits between them, pending: three blocks remain.
  EXPECT_EQ(allocator.snapshot().segments.at(0).blocks.size(), 3u);
  ASSERT_EQ(held.release(), 0);
  void* c = allocator.allocate(512, compute_);  // processes the event: everything merges
  allocator.deallocate(c);
  EXPECT_EQ(allocator.snapshot().segments.at(0).blocks.size(), 1u);
  EXPECT_EQ(allocator.stats().inactive_split[kAllPools].current, 0);
}

TEST_F(StreamEventsTest, EmptyCacheWaitsForPendingBlocks) {
  DeviceAllocator allocator(0, Options{});
  void* a = allocator.allocate(4096, compute_);
  allocator.record_stream(a, copy_);
  allocator.deallocate(a);  // copy_ not held: the event completes at once
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes[kAllPools].current, 0);
  EXPECT_EQ(testing::sim_counters().in_use_bytes, 0u);
}

// Issue 12, defect 4: a destroyed stream used once stayed accepted (a cache of verified streams
// that never forgot one), while a destroyed stream never used was rejected.
TEST_F(StreamEventsTest, ADestroyedStreamIsRejectedWhetherUsedBeforeOrNot) {
  DeviceAllocator allocator(0, Options{});
  cudaStream_t used = nullptr;
  cudaStream_t unused = nullptr;
  ASSERT_EQ(cudaStreamCreate(&used), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&unused), cudaSuccess);
  allocator.deallocate(allocator.allocate(4096, used));
  ASSERT_EQ(cudaStreamDestroy(used), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(unused), cudaSuccess);
  for (cudaStream_t stream : {used, unused}) {
    try {
      allocator.allocate(4096, stream);
      ADD_FAILURE() << "no error for a destroyed stream";
    } catch (const Error& error) {
      EXPECT_EQ(error.status(), CUDACACHE_INVALID_ARGUMENT);
      EXPECT_NE(std::string(error.what()).find("is not a valid CUDA stream"), std::string::npos)
          << error.what();
    }
  }
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* p = allocator.allocate(4096, nullptr);  // the allocator keeps working
  allocator.deallocate(p);
}

TEST_F(StreamEventsTest, StreamOfAnotherDeviceIsRejected) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) GTEST_SKIP() << "needs CUDASIM_DEVICES >= 2";
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  const ScopedStream foreign;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceAllocator allocator(0, Options{});
  try {
    allocator.allocate(4096, foreign);
    ADD_FAILURE() << "no error";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_INVALID_DEVICE);
    EXPECT_NE(std::string(error.what()).find("belongs to device 1"), std::string::npos);
  }
  void* a = allocator.allocate(4096, compute_);
  EXPECT_THROW(allocator.record_stream(a, foreign), Error);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  allocator.deallocate(a);
}

// A failed cudaEventQuery says nothing about the stream's work: the block stays pending
// instead of being reused while the other stream may still use it (before the fix, a failed
// query counted as completion; found by the fault sweep's event kinds).
TEST_F(StreamEventsTest, AFailedEventQueryKeepsTheBlockPending) {
  DeviceAllocator allocator(0, Options{});
  void* a = allocator.allocate(4096, compute_);
  allocator.record_stream(a, copy_);
  testing::HeldStream held(copy_);
  allocator.deallocate(a);
  ASSERT_EQ(cudasim_fail_nth_call(0, "event_query", 1), 0);
  void* b = allocator.allocate(4096, compute_);  // polls: the query fails
  EXPECT_NE(b, a) << "reused after a failed query while the copy stream still runs";
  EXPECT_EQ(allocator.stats().active[kAllPools].current, 2);  // b, and a still pending
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "the failure leaked into the application";
  ASSERT_EQ(held.release(), 0);
  void* c = allocator.allocate(4096, compute_);  // polls again: done now
  EXPECT_EQ(c, a);
  allocator.deallocate(b);
  allocator.deallocate(c);
}

// Issue 16: the C++ API and the preload find a pointer's allocator by asking each one; the
// question is not an error. record_stream_if_owned answers without logging; record_stream of a
// pointer nobody owns is one logged UNKNOWN_POINTER error.
TEST_F(StreamEventsTest, OwnershipQueryIsNotAnError) {
  const CapturedLog log(spdlog::level::err, 16);
  DeviceAllocator allocator(0, Options{});
  void* owned = allocator.allocate(4096, compute_);
  int foreign = 0;
  EXPECT_FALSE(allocator.record_stream_if_owned(&foreign, copy_));
  EXPECT_TRUE(allocator.record_stream_if_owned(owned, copy_));
  EXPECT_TRUE(log.lines().empty());
  try {
    allocator.record_stream(&foreign, copy_);
    ADD_FAILURE() << "record_stream of a foreign pointer did not throw";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_UNKNOWN_POINTER);
  }
  EXPECT_EQ(log.lines().size(), 1u);
  // The recorded use is real: the block waits for copy_ after the free.
  HeldStream held(copy_);
  allocator.deallocate(owned);
  EXPECT_EQ(allocator.stats().active[kAllPools].current, 1);
  ASSERT_EQ(held.release(), 0);
}

}  // namespace
}  // namespace cudacache
