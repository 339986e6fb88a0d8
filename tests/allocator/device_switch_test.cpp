// Work on another device than the calling thread's (an allocation or free of device 1's memory
// from a thread on device 0) switches devices and back (device_api.cpp's DeviceGuard). A thread
// that made its own context current (cuCtxCreate, as driver-API programs and libraries do) keeps
// it: cudaSetDevice alone would leave the device's primary context current in its place. Two
// simulated devices (CUDASIM_DEVICES=2), whose driver has private contexts.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "device_allocator.h"
#include "device_api.h"
#include "driver_function.h"
#include "test_support.h"

namespace cudacache {
namespace {

class DeviceSwitchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    int devices = 0;
    ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
    if (devices < 2) GTEST_SKIP() << "needs CUDASIM_DEVICES >= 2";
    ASSERT_NO_FATAL_FAILURE(load_driver_function("cuCtxCreate", &create_, 13000));
    ASSERT_NO_FATAL_FAILURE(load_driver_function("cuCtxDestroy", &destroy_, 13000));
    ASSERT_NO_FATAL_FAILURE(load_driver_function("cuCtxGetCurrent", &get_current_, 13000));
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(create_(&mine_, nullptr, 0, 0), CUDA_SUCCESS);  // current from here on
  }
  void TearDown() override {
    if (mine_ != nullptr) destroy_(mine_);
    cudaSetDevice(0);
  }
  CUcontext current() const {
    CUcontext context = nullptr;
    EXPECT_EQ(get_current_(&context), CUDA_SUCCESS);
    return context;
  }

  decltype(&cuCtxCreate) create_ = nullptr;
  decltype(&cuCtxDestroy) destroy_ = nullptr;
  decltype(&cuCtxGetCurrent) get_current_ = nullptr;
  CUcontext mine_ = nullptr;
};

// Device 1's memory and event, given back however a test ends (the suite-wide fault sweep
// fails a call of each kind in turn, and an early ASSERT must not leave them behind).
struct DeviceOneResources {
  void* memory = nullptr;
  cudaEvent_t event = nullptr;
  ~DeviceOneResources() {
    if (memory != nullptr) device_api::free_memory(1, memory);
    if (event != nullptr) cudaEventDestroy(event);
    cudaGetLastError();
  }
};

// Every device_api call that switches: the thread's own context is current after each.
TEST_F(DeviceSwitchTest, DeviceCallsOnAnotherDeviceLeaveTheThreadsOwnContextCurrent) {
  ASSERT_EQ(current(), mine_);
  DeviceOneResources held;
  ASSERT_EQ(device_api::malloc_memory(1, &held.memory, 1 << 20), cudaSuccess);
  EXPECT_EQ(current(), mine_);
  ASSERT_EQ(device_api::create_event(1, &held.event), cudaSuccess);
  EXPECT_EQ(current(), mine_);
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_EQ(device_api::memory_info(1, &free_bytes, &total_bytes), cudaSuccess);
  EXPECT_EQ(current(), mine_);
  ASSERT_EQ(device_api::synchronize(1), cudaSuccess);
  EXPECT_EQ(current(), mine_);
  void* const memory = held.memory;
  held.memory = nullptr;
  ASSERT_EQ(device_api::free_memory(1, memory), cudaSuccess);
  EXPECT_EQ(current(), mine_);
  int device = -1;
  ASSERT_EQ(cudaGetDevice(&device), cudaSuccess);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// A thread on the primary context keeps it (what the switch did before).
TEST_F(DeviceSwitchTest, AThreadOnThePrimaryContextIsLeftOnIt) {
  ASSERT_EQ(destroy_(mine_), CUDA_SUCCESS);
  mine_ = nullptr;
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const CUcontext primary = current();
  ASSERT_NE(primary, nullptr);
  DeviceOneResources held;
  ASSERT_EQ(device_api::malloc_memory(1, &held.memory, 1 << 20), cudaSuccess);
  EXPECT_EQ(current(), primary);
  void* const memory = held.memory;
  held.memory = nullptr;
  ASSERT_EQ(device_api::free_memory(1, memory), cudaSuccess);
  EXPECT_EQ(current(), primary);
}

// Through the allocators: device 1's allocator used, and its block freed, from a thread in its
// own context on device 0, under cudaMalloc segments and under the default policy's pages.
TEST_F(DeviceSwitchTest, AllocatorsOfAnotherDeviceLeaveTheThreadsOwnContextCurrent) {
  for (const char* conf : {"policy:pytorch", ""}) {
    SCOPED_TRACE(conf);
    {
      DeviceAllocator allocator(1, Options(conf));
      void* p = allocator.allocate(3 << 20, nullptr);
      EXPECT_EQ(current(), mine_);
      allocator.deallocate(p);
      EXPECT_EQ(current(), mine_);
      allocator.empty_cache();
      EXPECT_EQ(current(), mine_);
    }
    EXPECT_EQ(current(), mine_);  // its teardown too
  }
}

}  // namespace
}  // namespace cudacache
