// Stream-ordered allocation and asynchronous copies.
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace {

using AsyncMemory = SimTest;

TEST_F(AsyncMemory, MallocAsyncAndFreeAsync) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  void* p = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&p, 1000, stream));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(counters().in_use_bytes, 1024u);
  ASSERT_CUDA(cudaFreeAsync(p, stream));
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(counters().in_use_bytes, 0u);
  EXPECT_EQ(counters().frees, 1u);
  EXPECT_EQ(cudaFreeAsync(p, stream), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaFreeAsync(nullptr, stream));
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(AsyncMemory, FreeAsyncOnHeldStreamWaitsForTheStream) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  void* p = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&p, 4096, stream));
  ASSERT_EQ(cudasim_hold_stream(stream), 0);
  ASSERT_CUDA(cudaFreeAsync(p, stream));
  EXPECT_EQ(counters().in_use_bytes, 4096u);      // not yet reached by the stream
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);  // already being freed
  EXPECT_EQ(cudaFreeAsync(p, stream), cudaErrorInvalidValue);
  ASSERT_EQ(cudasim_release_stream(stream), 0);
  EXPECT_EQ(counters().in_use_bytes, 0u);
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(AsyncMemory, InvalidStreamAndArguments) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  ASSERT_CUDA(cudaStreamDestroy(stream));
  void* p = nullptr;
  EXPECT_EQ(cudaMallocAsync(&p, 64, stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaMallocAsync(nullptr, 64, nullptr), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaMallocAsync(&p, 64, cudaStreamPerThread));
  EXPECT_EQ(cudaFreeAsync(p, stream), cudaErrorInvalidResourceHandle);
  ASSERT_CUDA(cudaFreeAsync(p, cudaStreamLegacy));
  ASSERT_CUDA(cudaMallocAsync(&p, 0, nullptr));
  EXPECT_EQ(p, nullptr);
}

TEST_F(AsyncMemory, AsyncCopiesRunInStreamOrder) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  std::vector<uint8_t> src(4096, 0x11);
  std::vector<uint8_t> dst(4096, 0);
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 4096));
  ASSERT_EQ(cudasim_hold_stream(stream), 0);
  ASSERT_CUDA(cudaMemcpyAsync(d, src.data(), 4096, cudaMemcpyHostToDevice, stream));
  ASSERT_CUDA(cudaMemsetAsync(d, 0x22, 16, stream));
  ASSERT_CUDA(cudaMemcpyAsync(dst.data(), d, 4096, cudaMemcpyDeviceToHost, stream));
  EXPECT_EQ(dst[0], 0);  // nothing ran yet
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorNotReady);
  ASSERT_EQ(cudasim_release_stream(stream), 0);
  ASSERT_CUDA(cudaStreamSynchronize(stream));
  EXPECT_EQ(dst[0], 0x22);
  EXPECT_EQ(dst[15], 0x22);
  EXPECT_EQ(dst[16], 0x11);
  EXPECT_EQ(cudaMemsetAsync(src.data(), 0, 16, stream), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(d, src.data(), 16, static_cast<cudaMemcpyKind>(7), stream),
            cudaErrorInvalidMemcpyDirection);
  ASSERT_CUDA(cudaFree(d));
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(AsyncMemory, SynchronousCopyWaitsForBlockingStreams) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 64));
  ASSERT_CUDA(cudaMemset(d, 0, 64));
  ASSERT_EQ(cudasim_hold_stream(stream), 0);
  ASSERT_CUDA(cudaMemsetAsync(d, 0x5a, 64, stream));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    cudasim_release_stream(stream);
  });
  uint8_t host[64] = {};
  // The legacy default stream waits for the held blocking stream, so this sees its memset.
  ASSERT_CUDA(cudaMemcpy(host, d, 64, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[63], 0x5a);
  releaser.join();
  ASSERT_CUDA(cudaFree(d));
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
