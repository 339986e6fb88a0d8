// Shared fixture for the cudasim tests: skips when not running on cudasim and returns every
// device to a clean state (no allocations, streams, events; default capacity; VMM support as
// CUDASIM_VMM says; zero counters).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "cudasim.h"
#include "require_cudasim.h"

#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess)
#define EXPECT_CUDA(expr) EXPECT_EQ((expr), cudaSuccess)

class SimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    int count = 0;
    ASSERT_CUDA(cudaGetDeviceCount(&count));
    static const size_t initial_capacity = cudasim_get_capacity(0);
    const char* vmm = std::getenv("CUDASIM_VMM");
    const int vmm_supported = vmm != nullptr && std::strcmp(vmm, "0") == 0 ? 0 : 1;
    for (int d = 0; d < count; ++d) {
      ASSERT_CUDA(cudaSetDevice(d));
      ASSERT_CUDA(cudaDeviceReset());
      ASSERT_EQ(cudasim_set_capacity(d, initial_capacity), 0);
      ASSERT_EQ(cudasim_fail_nth_allocation(d, 0), 0);
      ASSERT_EQ(cudasim_set_vmm_supported(d, vmm_supported), 0);
      ASSERT_EQ(cudasim_reset_counters(d), 0);
    }
    ASSERT_CUDA(cudaSetDevice(0));
    (void)cudaGetLastError();
  }

  static cudasim_counters counters(int device = 0) {
    cudasim_counters c{};
    EXPECT_EQ(cudasim_get_counters(device, &c), 0);
    return c;
  }

  static cudasim_call_counts calls(int device = 0) {
    cudasim_call_counts c{};
    EXPECT_EQ(cudasim_get_call_counts(device, &c), 0);
    return c;
  }
};
