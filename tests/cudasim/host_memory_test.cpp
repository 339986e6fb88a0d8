// Page-locked host memory: cudaHostAlloc / cudaMallocHost / cudaFreeHost, cudaHostRegister /
// cudaHostUnregister, and what cudaPointerGetAttributes says about it.
#include <cstring>
#include <vector>

#include "sim_test.h"

namespace {

using HostMemory = SimTest;

TEST_F(HostMemory, AllocUseAndFree) {
  void* pinned = nullptr;
  ASSERT_CUDA(cudaHostAlloc(&pinned, 4096, cudaHostAllocPortable | cudaHostAllocMapped));
  ASSERT_NE(pinned, nullptr);
  std::memset(pinned, 7, 4096);  // host-writable
  void* device = nullptr;
  ASSERT_CUDA(cudaMalloc(&device, 4096));
  ASSERT_CUDA(cudaMemcpyAsync(device, pinned, 4096, cudaMemcpyHostToDevice, nullptr));
  std::vector<unsigned char> back(4096);
  ASSERT_CUDA(cudaMemcpy(back.data(), device, 4096, cudaMemcpyDeviceToHost));
  EXPECT_EQ(back, std::vector<unsigned char>(4096, 7));
  EXPECT_EQ(counters().in_use_bytes, 4096u);  // only the device allocation counts
  ASSERT_CUDA(cudaFreeHost(pinned));
  EXPECT_EQ(cudaFreeHost(pinned), cudaErrorInvalidValue);  // already freed
  ASSERT_CUDA(cudaFreeHost(nullptr));
  ASSERT_CUDA(cudaFree(device));

  void* other = nullptr;
  ASSERT_CUDA(cudaMallocHost(&other, 100));
  EXPECT_EQ(cudaFreeHost(static_cast<char*>(other) + 1), cudaErrorInvalidValue);  // not a base
  ASSERT_CUDA(cudaFreeHost(other));
  EXPECT_EQ(cudaHostAlloc(&other, 64, 0x80), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostAlloc(nullptr, 64, 0), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaHostAlloc(&other, 0, 0));
  EXPECT_EQ(other, nullptr);
  (void)cudaGetLastError();
}

TEST_F(HostMemory, PointerAttributes) {
  void* pinned = nullptr;
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaMallocHost(&pinned, 1000));
  cudaPointerAttributes attributes{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attributes, static_cast<char*>(pinned) + 999));
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  EXPECT_EQ(attributes.device, 0);
  EXPECT_EQ(attributes.hostPointer, static_cast<char*>(pinned) + 999);
  ASSERT_CUDA(cudaPointerGetAttributes(&attributes, static_cast<char*>(pinned) + 1000));
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);  // past the end
  ASSERT_CUDA(cudaFreeHost(pinned));
  ASSERT_CUDA(cudaPointerGetAttributes(&attributes, pinned));
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
}

TEST_F(HostMemory, RegisterAndUnregister) {
  std::vector<char> buffer(8192);
  ASSERT_CUDA(cudaHostRegister(buffer.data(), 4096, cudaHostRegisterDefault));
  cudaPointerAttributes attributes{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attributes, buffer.data() + 100));
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  EXPECT_EQ(cudaHostRegister(buffer.data() + 4000, 100, 0), cudaErrorHostMemoryAlreadyRegistered);
  ASSERT_CUDA(cudaHostRegister(buffer.data() + 4096, 4096, cudaHostRegisterPortable));
  EXPECT_EQ(cudaFreeHost(buffer.data()), cudaErrorInvalidValue);  // registered, not allocated
  ASSERT_CUDA(cudaHostUnregister(buffer.data()));
  EXPECT_EQ(cudaHostUnregister(buffer.data()), cudaErrorHostMemoryNotRegistered);
  ASSERT_CUDA(cudaHostUnregister(buffer.data() + 4096));
  EXPECT_EQ(cudaHostRegister(nullptr, 10, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostRegister(buffer.data(), 0, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaHostRegister(buffer.data(), 10, 0x100), cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

}  // namespace
