// The *_ptsz / *_ptds exports, called the way nvcc --default-stream per-thread programs call
// them: this file is compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM, so the header renames
// cudaMemcpy to cudaMemcpy_ptds, cudaStreamQuery to cudaStreamQuery_ptsz, and so on.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "compile with CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include <cstring>
#include <thread>

#include "sim_test.h"

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still part of the runtime: test it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using PerThread = SimTest;

TEST_F(PerThread, NullStreamIsThisThreadsStream) {
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_EQ(cudasim_hold_stream(cudaStreamPerThread), 0);
  ASSERT_CUDA(cudaEventRecord(e, nullptr));  // cudaEventRecord_ptsz
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  EXPECT_EQ(cudaStreamQuery(nullptr), cudaErrorNotReady);
  cudaError_t other = cudaErrorUnknown;
  std::thread([&] { other = cudaStreamQuery(nullptr); }).join();
  EXPECT_EQ(other, cudaSuccess);
  ASSERT_EQ(cudasim_release_stream(cudaStreamPerThread), 0);
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  EXPECT_CUDA(cudaEventQuery(e));
  ASSERT_CUDA(cudaEventRecordWithFlags(e, nullptr, 0));
  ASSERT_CUDA(cudaEventDestroy(e));
}

TEST_F(PerThread, MemoryAndStreamFunctions) {
  void* d = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&d, 64, nullptr));
  char host[64];
  std::memset(host, 7, sizeof(host));
  ASSERT_CUDA(cudaMemcpy(d, host, 64, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemset(d, 9, 8));
  ASSERT_CUDA(cudaMemsetAsync(d, 8, 4, nullptr));
  char back[64] = {};
  ASSERT_CUDA(cudaMemcpyAsync(back, d, 64, cudaMemcpyDeviceToHost, nullptr));
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(back[0], 8);
  EXPECT_EQ(back[5], 9);
  EXPECT_EQ(back[63], 7);
  ASSERT_CUDA(cudaFreeAsync(d, nullptr));
  unsigned flags = 1;
  int priority = 1;
  int device = -1;
  ASSERT_CUDA(cudaStreamGetFlags(nullptr, &flags));
  ASSERT_CUDA(cudaStreamGetPriority(nullptr, &priority));
  ASSERT_CUDA(cudaStreamGetDevice(nullptr, &device));
  EXPECT_EQ(device, 0);
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_CUDA(cudaEventRecord(e, cudaStreamLegacy));
  ASSERT_CUDA(cudaStreamWaitEvent(nullptr, e, 0));
  EXPECT_CUDA(cudaStreamQuery(nullptr));
  ASSERT_CUDA(cudaEventDestroy(e));
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  ASSERT_CUDA(cudaGetDriverEntryPoint("cuMemMap", &fn, cudaEnablePerThreadDefaultStream, &status));
  EXPECT_NE(fn, nullptr);
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuMemMap", &fn, 13000, 0, &status));
  EXPECT_NE(fn, nullptr);
  EXPECT_EQ(counters().in_use_bytes, 0u);
}

// cudaMallocAsync_ptsz, cudaFreeAsync_ptsz and cudaStreamSynchronize_ptsz are counted as
// their plain names are (cudasim_get_call_counts).
TEST_F(PerThread, CallCountsIncludeThePerThreadNames) {
  void* d = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&d, 64, nullptr));
  EXPECT_EQ(cudaMallocAsync(nullptr, 64, nullptr), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  ASSERT_CUDA(cudaFreeAsync(d, nullptr));
  EXPECT_EQ(cudaFreeAsync(d, nullptr), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaFreeAsync(nullptr, nullptr));  // a free of NULL is not counted
  ASSERT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  cudasim_call_counts c{};
  ASSERT_EQ(cudasim_get_call_counts(0, &c), 0);
  EXPECT_EQ(c.malloc, 2u);
  EXPECT_EQ(c.free, 2u);
  EXPECT_EQ(c.synchronize, 2u);
  EXPECT_EQ(c.create + c.release + c.map + c.unmap + c.set_access + c.reserve + c.address_free, 0u);
  (void)cudaGetLastError();
}

TEST_F(PerThread, LaunchFailsLoudly) {
  testing::internal::CaptureStderr();
  const cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void*>(&counters), dim3(1), dim3(1),
                                         nullptr, 0, nullptr);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(e, cudaErrorNotSupported);
  EXPECT_NE(err.find("cudasim: cudaLaunchKernel is not supported"), std::string::npos);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
}

}  // namespace
