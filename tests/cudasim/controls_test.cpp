// The test controls of cudasim.h.
#include "sim_test.h"

namespace {

using Controls = SimTest;

TEST_F(Controls, Counters) {
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 1000));
  ASSERT_CUDA(cudaMalloc(&b, 3000));
  ASSERT_CUDA(cudaFree(a));
  cudasim_counters c = counters();
  EXPECT_EQ(c.mallocs, 2u);
  EXPECT_EQ(c.frees, 1u);
  EXPECT_EQ(c.in_use_bytes, 3072u);
  EXPECT_EQ(c.peak_bytes, 4096u);
  ASSERT_EQ(cudasim_reset_counters(0), 0);
  c = counters();
  EXPECT_EQ(c.mallocs, 0u);
  EXPECT_EQ(c.frees, 0u);
  EXPECT_EQ(c.in_use_bytes, 3072u);
  EXPECT_EQ(c.peak_bytes, 3072u);
  ASSERT_CUDA(cudaFree(b));
  EXPECT_EQ(cudasim_get_counters(1, &c), -1);
  EXPECT_EQ(cudasim_get_counters(0, nullptr), -1);
  EXPECT_EQ(cudasim_reset_counters(-1), -1);
}

TEST_F(Controls, Capacity) {
  EXPECT_EQ(cudasim_get_capacity(0), size_t{8} << 30);  // CUDASIM_CAPACITY=8GiB from CTest
  ASSERT_EQ(cudasim_set_capacity(0, 4096), 0);
  EXPECT_EQ(cudasim_get_capacity(0), 4096u);
  void* a = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 4096));
  // Lowering below what is in use is allowed; allocations fail until enough is freed.
  ASSERT_EQ(cudasim_set_capacity(0, 1024), 0);
  void* b = nullptr;
  EXPECT_EQ(cudaMalloc(&b, 256), cudaErrorMemoryAllocation);
  size_t free = 1;
  size_t total = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free, &total));
  EXPECT_EQ(free, 0u);
  ASSERT_CUDA(cudaFree(a));
  ASSERT_CUDA(cudaMalloc(&b, 256));
  ASSERT_CUDA(cudaFree(b));
  EXPECT_EQ(cudasim_set_capacity(3, 1), -1);
  EXPECT_EQ(cudasim_get_capacity(3), 0u);
}

TEST_F(Controls, FailNthAllocation) {
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 2), 0);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 256));
  EXPECT_EQ(cudaMalloc(&b, 256), cudaErrorMemoryAllocation);
  ASSERT_CUDA(cudaMalloc(&b, 256));  // only once
  ASSERT_CUDA(cudaFree(b));
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 1), 0);
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 0), 0);  // cancelled
  ASSERT_CUDA(cudaMalloc(&b, 256));
  ASSERT_CUDA(cudaFree(b));
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 1), 0);
  EXPECT_EQ(cudaMallocAsync(&b, 256, nullptr), cudaErrorMemoryAllocation);
  ASSERT_CUDA(cudaFree(a));
  EXPECT_EQ(counters().mallocs, 3u);
  EXPECT_EQ(cudasim_fail_nth_allocation(0, -1), -1);
  EXPECT_EQ(cudasim_fail_nth_allocation(4, 1), -1);
}

TEST_F(Controls, FailNthCallOfAKind) {
  void* a = nullptr;
  ASSERT_EQ(cudasim_fail_nth_call(0, "free", 2), 0);
  ASSERT_CUDA(cudaMalloc(&a, 256));
  ASSERT_CUDA(cudaFree(a));  // the first free
  ASSERT_CUDA(cudaMalloc(&a, 256));
  EXPECT_EQ(cudaFree(a), cudaErrorUnknown);  // the second: failed, nothing freed
  EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
  EXPECT_EQ(counters().in_use_bytes, 256u);
  ASSERT_CUDA(cudaFree(a));     // only once
  EXPECT_EQ(calls().free, 3u);  // the failed call counts too

  ASSERT_EQ(cudasim_fail_nth_call(0, "synchronize", 1), 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorUnknown);
  ASSERT_CUDA(cudaDeviceSynchronize());
  static_cast<void>(cudaGetLastError());

  ASSERT_EQ(cudasim_fail_nth_call(0, "malloc", 1), 0);
  EXPECT_EQ(cudaMalloc(&a, 256), cudaErrorMemoryAllocation);
  static_cast<void>(cudaGetLastError());
  ASSERT_EQ(cudasim_fail_nth_call(0, "malloc", 1), 0);
  ASSERT_EQ(cudasim_fail_nth_call(0, "malloc", 0), 0);  // cancelled
  ASSERT_CUDA(cudaMalloc(&a, 256));
  ASSERT_CUDA(cudaFree(a));

  EXPECT_EQ(cudasim_fail_nth_call(0, "no_such_kind", 1), -1);
  EXPECT_EQ(cudasim_fail_nth_call(0, nullptr, 1), -1);
  EXPECT_EQ(cudasim_fail_nth_call(0, "map", -1), -1);
  EXPECT_EQ(cudasim_fail_nth_call(4, "map", 1), -1);
}

TEST_F(Controls, HoldAndReleaseStreams) {
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_EQ(cudasim_hold_stream(nullptr), 0);  // the legacy default stream
  ASSERT_CUDA(cudaEventRecord(e, nullptr));
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(cudaStreamLegacy), cudaErrorNotReady);
  ASSERT_EQ(cudasim_release_stream(cudaStreamLegacy), 0);
  EXPECT_CUDA(cudaEventQuery(e));
  ASSERT_CUDA(cudaStreamDestroy(s));
  EXPECT_EQ(cudasim_hold_stream(s), -1);
  EXPECT_EQ(cudasim_release_stream(s), -1);
  int bogus = 0;
  EXPECT_EQ(cudasim_hold_stream(reinterpret_cast<cudaStream_t>(&bogus)), -1);
  ASSERT_CUDA(cudaEventDestroy(e));
}

}  // namespace
