// cudaMalloc / cudaFree / cudaMemcpy / cudaMemset / cudaPointerGetAttributes.
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "sim_test.h"

namespace {

using Memory = SimTest;

TEST_F(Memory, PointersAre256ByteAlignedAndSizesRounded) {
  std::vector<void*> blocks;
  for (size_t size : {1, 255, 256, 257, 1000, 4097}) {
    void* p = nullptr;
    ASSERT_CUDA(cudaMalloc(&p, size));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u) << size;
    blocks.push_back(p);
  }
  // 256 + 256 + 256 + 512 + 1024 + 4352
  EXPECT_EQ(counters().in_use_bytes, 6656u);
  for (void* p : blocks) ASSERT_CUDA(cudaFree(p));
  EXPECT_EQ(counters().in_use_bytes, 0u);
}

TEST_F(Memory, ZeroSizeReturnsNull) {
  void* p = reinterpret_cast<void*>(0x1234);
  ASSERT_CUDA(cudaMalloc(&p, 0));
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(counters().mallocs, 0u);
  EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue);
}

TEST_F(Memory, FreeNullIsNoOp) {
  EXPECT_CUDA(cudaFree(nullptr));
  EXPECT_EQ(counters().frees, 0u);
}

TEST_F(Memory, DoubleFreeAndUnknownPointer) {
  void* p = nullptr;
  ASSERT_CUDA(cudaMalloc(&p, 512));
  ASSERT_CUDA(cudaFree(p));
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  int local = 0;
  EXPECT_EQ(cudaFree(&local), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaMalloc(&p, 512));
  EXPECT_EQ(cudaFree(static_cast<char*>(p) + 256), cudaErrorInvalidValue);  // interior
  ASSERT_CUDA(cudaFree(p));
  EXPECT_EQ(counters().frees, 2u);
}

TEST_F(Memory, CapacityExhaustionAndRecovery) {
  ASSERT_EQ(cudasim_set_capacity(0, 1 << 20), 0);
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 768 << 10));
  EXPECT_EQ(cudaMalloc(&b, 512 << 10), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  ASSERT_CUDA(cudaMalloc(&b, 256 << 10));      // exactly what is left
  EXPECT_EQ(cudaMalloc(&b, 1), cudaErrorMemoryAllocation);
  ASSERT_CUDA(cudaFree(a));
  ASSERT_CUDA(cudaMalloc(&a, 512 << 10));
  EXPECT_EQ(counters().peak_bytes, size_t{1} << 20);
  ASSERT_CUDA(cudaFree(a));
  ASSERT_CUDA(cudaFree(b));
}

// Found in review: the peak was raised before the host mapping, and stayed raised when the
// mapping failed.
TEST_F(Memory, AnAllocationTheHostCannotMapLeavesNoPeak) {
  ASSERT_EQ(cudasim_set_capacity(0, size_t{1} << 62), 0);
  void* small = nullptr;
  ASSERT_CUDA(cudaMalloc(&small, 4096));
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, size_t{1} << 61), cudaErrorMemoryAllocation);  // beyond the host's
  EXPECT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_EQ(counters().in_use_bytes, 4096u);
  EXPECT_EQ(counters().peak_bytes, 4096u);
  ASSERT_CUDA(cudaFree(small));
}

TEST_F(Memory, HugeDeviceCostsNothingUntilTouched) {
  ASSERT_EQ(cudasim_set_capacity(0, size_t{80} << 30), 0);
  void* p = nullptr;
  ASSERT_CUDA(cudaMalloc(&p, size_t{64} << 30));
  static_cast<char*>(p)[size_t{63} << 30] = 1;  // one page
  EXPECT_EQ(cudaMalloc(&p, size_t{17} << 30), cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaMalloc(nullptr, SIZE_MAX), cudaErrorInvalidValue);
  void* q = nullptr;
  EXPECT_EQ(cudaMalloc(&q, SIZE_MAX), cudaErrorMemoryAllocation);
  ASSERT_CUDA(cudaFree(p));
}

TEST_F(Memory, RoundTripThroughMemcpyAndMemset) {
  constexpr size_t kCount = 10000;
  std::vector<uint32_t> host(kCount);
  std::iota(host.begin(), host.end(), 7u);
  void* d1 = nullptr;
  void* d2 = nullptr;
  ASSERT_CUDA(cudaMalloc(&d1, kCount * 4));
  ASSERT_CUDA(cudaMalloc(&d2, kCount * 4));
  ASSERT_CUDA(cudaMemcpy(d1, host.data(), kCount * 4, cudaMemcpyHostToDevice));
  ASSERT_CUDA(cudaMemcpy(d2, d1, kCount * 4, cudaMemcpyDeviceToDevice));
  std::vector<uint32_t> back(kCount, 0);
  ASSERT_CUDA(cudaMemcpy(back.data(), d2, kCount * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, host);
  ASSERT_CUDA(cudaMemset(d2, 0xab, 8));
  ASSERT_CUDA(cudaMemcpy(back.data(), d2, 12, cudaMemcpyDefault));
  EXPECT_EQ(back[0], 0xababababu);
  EXPECT_EQ(back[1], 0xababababu);
  EXPECT_EQ(back[2], host[2]);
  ASSERT_CUDA(cudaFree(d1));
  ASSERT_CUDA(cudaFree(d2));
}

TEST_F(Memory, CopyValidation) {
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 1024));
  char host[2048] = {};
  EXPECT_EQ(cudaMemcpy(d, host, 16, static_cast<cudaMemcpyKind>(7)),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(d, host, 2048, cudaMemcpyHostToDevice), cudaErrorInvalidValue);  // overrun
  EXPECT_EQ(cudaMemcpy(host, host + 1024, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpy(nullptr, d, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_CUDA(cudaMemcpy(host, host + 1024, 16, cudaMemcpyHostToHost));
  EXPECT_CUDA(cudaMemcpy(nullptr, nullptr, 0, cudaMemcpyDeviceToDevice));
  EXPECT_EQ(cudaMemset(host, 0, 16), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaFree(d));
  EXPECT_EQ(cudaMemset(d, 0, 16), cudaErrorInvalidValue);  // freed
}

TEST_F(Memory, PointerAttributes) {
  void* d = nullptr;
  ASSERT_CUDA(cudaMalloc(&d, 4096));
  cudaPointerAttributes attr{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, d));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  EXPECT_EQ(attr.devicePointer, d);
  int host = 0;
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, &host));
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(attr.devicePointer, nullptr);
  EXPECT_EQ(cudaPointerGetAttributes(nullptr, d), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaFree(d));
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, d));
  EXPECT_EQ(attr.type, cudaMemoryTypeUnregistered);
}

TEST_F(Memory, ConcurrentAllocationIsConsistent) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 200; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 4096) != cudaSuccess || cudaFree(p) != cudaSuccess) std::abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  const cudasim_counters c = counters();
  EXPECT_EQ(c.mallocs, 800u);
  EXPECT_EQ(c.frees, 800u);
  EXPECT_EQ(c.in_use_bytes, 0u);
}

}  // namespace
