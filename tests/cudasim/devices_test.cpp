// Devices: runs with CUDASIM_DEVICES=2 and CUDASIM_CAPACITY=8GiB (see CMakeLists.txt).
#include <cuda.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "sim_test.h"

namespace {

constexpr size_t kCapacity = size_t{8} << 30;

using Devices = SimTest;

TEST_F(Devices, CountAndSelection) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  EXPECT_EQ(count, 2);
  EXPECT_EQ(cudaGetDeviceCount(nullptr), cudaErrorInvalidValue);
  int device = -1;
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaGetDevice(&device));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  ASSERT_CUDA(cudaGetDevice(&device));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
}

TEST_F(Devices, CurrentDeviceIsPerThread) {
  ASSERT_CUDA(cudaSetDevice(1));
  int other = -1;
  std::thread([&] { cudaGetDevice(&other); }).join();
  EXPECT_EQ(other, 0);
}

TEST_F(Devices, Attributes) {
  int value = 0;
  ASSERT_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, 0));
  EXPECT_EQ(value, 9);
  ASSERT_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMinor, 1));
  EXPECT_EQ(value, 0);
  ASSERT_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, 0));
  EXPECT_EQ(value, 132);
  ASSERT_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, 0));
  EXPECT_EQ(value, 32);
  ASSERT_CUDA(cudaDeviceGetAttribute(&value, cudaDevAttrMemoryPoolsSupported, 0));
  EXPECT_EQ(value, 1);
  EXPECT_EQ(cudaDeviceGetAttribute(&value, static_cast<cudaDeviceAttr>(250), 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaDeviceGetAttribute(&value, cudaDevAttrWarpSize, 5), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaDeviceGetAttribute(nullptr, cudaDevAttrWarpSize, 0), cudaErrorInvalidValue);
}

TEST_F(Devices, Properties) {
  cudaDeviceProp prop{};
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, 1));
  EXPECT_STREQ(prop.name, "cudasim");
  EXPECT_EQ(prop.totalGlobalMem, kCapacity);
  EXPECT_EQ(prop.major, 9);
  EXPECT_EQ(prop.minor, 0);
  EXPECT_EQ(prop.warpSize, 32);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.unifiedAddressing, 1);
  cudaDeviceProp other{};
  ASSERT_CUDA(cudaGetDeviceProperties(&other, 0));
  EXPECT_NE(std::memcmp(&prop.uuid, &other.uuid, sizeof(prop.uuid)), 0);
  ASSERT_EQ(cudasim_set_capacity(1, 1 << 30), 0);
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, 1));
  EXPECT_EQ(prop.totalGlobalMem, size_t{1} << 30);
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetDeviceProperties(nullptr, 0), cudaErrorInvalidValue);
}

TEST_F(Devices, MemGetInfoTracksUse) {
  size_t free = 0;
  size_t total = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free, &total));
  EXPECT_EQ(total, kCapacity);
  EXPECT_EQ(free, kCapacity);
  void* p = nullptr;
  ASSERT_CUDA(cudaMalloc(&p, 1000));
  ASSERT_CUDA(cudaMemGetInfo(&free, &total));
  EXPECT_EQ(free, kCapacity - 1024);
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaMemGetInfo(&free, &total));
  EXPECT_EQ(free, kCapacity);
  ASSERT_CUDA(cudaFree(p));
  EXPECT_EQ(cudaMemGetInfo(nullptr, &total), cudaErrorInvalidValue);
}

TEST_F(Devices, DevicesHandOutDisjointAddresses) {
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 1 << 20));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaMalloc(&b, 1 << 20));
  const auto x = reinterpret_cast<uintptr_t>(a);
  const auto y = reinterpret_cast<uintptr_t>(b);
  EXPECT_TRUE(x + (1 << 20) <= y || y + (1 << 20) <= x);
  cudaPointerAttributes attr{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, b));
  EXPECT_EQ(attr.device, 1);
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, static_cast<char*>(a) + 100));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(attr.device, 0);
  EXPECT_EQ(counters(1).mallocs, 1u);
  EXPECT_EQ(counters(0).mallocs, 1u);
  ASSERT_CUDA(cudaFree(a));
  ASSERT_CUDA(cudaFree(b));
}

TEST_F(Devices, ResetFreesEverythingOfThatDeviceOnly) {
  void* a = nullptr;
  void* b = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 4096));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaMalloc(&b, 4096));
  ASSERT_CUDA(cudaStreamCreate(&stream));
  ASSERT_CUDA(cudaEventCreate(&event));
  ASSERT_CUDA(cudaDeviceReset());
  EXPECT_EQ(counters(1).in_use_bytes, 0u);
  EXPECT_EQ(counters(0).in_use_bytes, 4096u);
  EXPECT_EQ(cudaFree(b), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamQuery(stream), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(event), cudaErrorInvalidResourceHandle);
  ASSERT_CUDA(cudaFree(a));
}

TEST_F(Devices, EventAndStreamMustShareADevice) {
  cudaEvent_t event = nullptr;
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaEventCreate(&event));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaStreamCreate(&stream));
  int device = -1;
  ASSERT_CUDA(cudaStreamGetDevice(stream, &device));
  EXPECT_EQ(device, 1);
  EXPECT_EQ(cudaEventRecord(event, stream), cudaErrorInvalidResourceHandle);
  ASSERT_CUDA(cudaStreamWaitEvent(stream, event, 0));  // waiting across devices is fine
  ASSERT_CUDA(cudaStreamDestroy(stream));
  ASSERT_CUDA(cudaEventDestroy(event));
}

TEST_F(Devices, ResetUnblocksOtherDevicesWaitingOnIt) {
  cudaStream_t held = nullptr;
  cudaStream_t waiter = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&held));
  ASSERT_CUDA(cudaEventCreate(&event));
  ASSERT_EQ(cudasim_hold_stream(held), 0);
  ASSERT_CUDA(cudaEventRecord(event, held));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaStreamCreate(&waiter));
  ASSERT_CUDA(cudaStreamWaitEvent(waiter, event, 0));
  EXPECT_EQ(cudaStreamQuery(waiter), cudaErrorNotReady);
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_CUDA(cudaDeviceReset());
  EXPECT_CUDA(cudaStreamQuery(waiter));
  ASSERT_CUDA(cudaStreamDestroy(waiter));
}

TEST_F(Devices, Synchronize) {
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  ASSERT_CUDA(cudaEventCreate(&event));
  ASSERT_EQ(cudasim_hold_stream(stream), 0);
  ASSERT_CUDA(cudaEventRecord(event, stream));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    cudasim_release_stream(stream);
  });
  ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_CUDA(cudaEventQuery(event));
  releaser.join();
}

TEST_F(Devices, Versions) {
  int version = 0;
  ASSERT_CUDA(cudaRuntimeGetVersion(&version));
  EXPECT_EQ(version, 13000);
  ASSERT_CUDA(cudaDriverGetVersion(&version));
  EXPECT_EQ(version, 13000);
  EXPECT_EQ(cudaRuntimeGetVersion(nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cudaDriverGetVersion(nullptr), cudaErrorInvalidValue);
}

TEST_F(Devices, Flags) {
  unsigned flags = 0;
  ASSERT_CUDA(cudaGetDeviceFlags(&flags));
  EXPECT_EQ(flags, static_cast<unsigned>(cudaDeviceMapHost));
  ASSERT_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  ASSERT_CUDA(cudaGetDeviceFlags(&flags));
  EXPECT_EQ(flags, static_cast<unsigned>(cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
  EXPECT_EQ(cudaSetDeviceFlags(0x100), cudaErrorInvalidValue);
  EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield),
            cudaErrorInvalidValue);
  ASSERT_CUDA(cudaInitDevice(1, cudaDeviceScheduleSpin, cudaInitDeviceFlagsAreValid));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_CUDA(cudaGetDeviceFlags(&flags));
  EXPECT_EQ(flags, static_cast<unsigned>(cudaDeviceScheduleSpin | cudaDeviceMapHost));
  EXPECT_CUDA(cudaInitDevice(0, 0, 0));
  EXPECT_EQ(cudaInitDevice(7, 0, 0), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaInitDevice(0, 0, 0x10), cudaErrorInvalidValue);
}

TEST_F(Devices, PeerAccessAndPriorities) {
  int can = -1;
  ASSERT_CUDA(cudaDeviceCanAccessPeer(&can, 0, 1));
  EXPECT_EQ(can, 1);
  ASSERT_CUDA(cudaDeviceCanAccessPeer(&can, 1, 1));
  EXPECT_EQ(can, 0);
  EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 3), cudaErrorInvalidDevice);
  int least = 1;
  int greatest = 1;
  ASSERT_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  EXPECT_EQ(least, 0);
  EXPECT_LT(greatest, least);
}

// cudasim_set_vmm_supported applies to one device: the other keeps its VMM API.
TEST_F(Devices, VmmSupportIsPerDevice) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuDeviceGetAttribute", &fn, 13000, 0, &status));
  const auto attribute = reinterpret_cast<decltype(&cuDeviceGetAttribute)>(fn);
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 13000, 0, &status));
  const auto create = reinterpret_cast<decltype(&cuMemCreate)>(fn);
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuMemRelease", &fn, 13000, 0, &status));
  const auto release = reinterpret_cast<decltype(&cuMemRelease)>(fn);
  ASSERT_TRUE(attribute && create && release);
  ASSERT_EQ(cudasim_set_vmm_supported(1, 0), 0);
  const CUresult expected[] = {CUDA_SUCCESS, CUDA_ERROR_NOT_SUPPORTED};
  for (int device : {0, 1}) {
    int supported = -1;
    ASSERT_EQ(
        attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device),
        CUDA_SUCCESS);
    EXPECT_EQ(supported, device == 0 ? 1 : 0) << device;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    CUmemGenericAllocationHandle h = 0;
    const CUresult created = create(&h, size_t{2} << 20, &prop, 0);
    EXPECT_EQ(created, expected[device]) << device;
    if (created == CUDA_SUCCESS) {
      EXPECT_EQ(release(h), CUDA_SUCCESS);
    }
  }
  ASSERT_CUDA(cudaSetDevice(1));
  void* p = nullptr;
  ASSERT_CUDA(cudaMalloc(&p, 1 << 20));  // the fallback works on the device without VMM
  ASSERT_CUDA(cudaFree(p));
  ASSERT_EQ(cudasim_set_vmm_supported(1, 1), 0);
  EXPECT_EQ(cudasim_set_vmm_supported(2, 0), -1);
}

}  // namespace
