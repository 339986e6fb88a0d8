// The C API when the runtime's device count fails: a failure other than "no GPU" is a CUDA
// error for that call, and the next call asks again. Found in review: any failure was taken
// for 0 devices for the life of the process, and every later call said "invalid device ordinal
// 0 (0 devices)", the runtime's own error lost.
//
// This binary defines cudaGetDeviceCount, in front of cudasim's (the program's symbols come
// first), to make the calls a test arms fail: a binary of its own.
#include <cudacache/cudacache.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "require_cudasim.h"

#include <cstring>

namespace {

int g_failures = 0;  // the next calls that fail
cudaError_t g_error = cudaErrorDevicesUnavailable;

}  // namespace

extern "C" cudaError_t cudaGetDeviceCount(int* count) {
  if (g_failures > 0) {
    --g_failures;
    return g_error;
  }
  using Function = cudaError_t (*)(int*);
  static const auto real = reinterpret_cast<Function>(dlsym(RTLD_NEXT, "cudaGetDeviceCount"));
  return real(count);
}

// Tests only, not in the public header (allocator/c_api.cpp).
extern "C" void cudacache_testing_reset(void);

namespace {

class CApiDeviceCount : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    cudacache_testing_reset();
  }
  void TearDown() override {
    g_failures = 0;
    cudacache_testing_reset();
  }
};

TEST_F(CApiDeviceCount, AFailedCountIsACudaErrorAndTheNextCallAsksAgain) {
  g_failures = 1;
  g_error = cudaErrorDevicesUnavailable;
  void* ptr = nullptr;
  EXPECT_EQ(cudacache_allocate(&ptr, 4096, 0, nullptr), CUDACACHE_CUDA_ERROR);
  EXPECT_NE(std::strstr(cudacache_last_error(), "cudaGetDeviceCount"), nullptr)
      << cudacache_last_error();
  // Nothing was fixed by the failed first use: options may still be set, and the device is
  // found now.
  EXPECT_EQ(cudacache_configure("record_history:10"), CUDACACHE_OK) << cudacache_last_error();
  ASSERT_EQ(cudacache_allocate(&ptr, 4096, 0, nullptr), CUDACACHE_OK) << cudacache_last_error();
  EXPECT_NE(ptr, nullptr);
  EXPECT_EQ(cudacache_deallocate(ptr), CUDACACHE_OK);
}

TEST_F(CApiDeviceCount, NoGpuIsZeroDevices) {
  g_failures = 1;
  g_error = cudaErrorNoDevice;
  void* ptr = nullptr;
  EXPECT_EQ(cudacache_allocate(&ptr, 4096, 0, nullptr), CUDACACHE_INVALID_DEVICE);
  EXPECT_NE(std::strstr(cudacache_last_error(), "0 devices"), nullptr) << cudacache_last_error();
}

}  // namespace
