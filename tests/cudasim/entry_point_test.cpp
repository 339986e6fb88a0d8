// cudaGetDriverEntryPoint[ByVersion] and the driver error functions it hands out.
#include <cuda.h>

#include "sim_test.h"

// cudaGetDriverEntryPoint is deprecated in CUDA 13 but still part of the runtime: test it.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace {

using EntryPoint = SimTest;

TEST_F(EntryPoint, KnownSymbol) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_CUDA(
      cudaGetDriverEntryPointByVersion("cuMemCreate", &fn, 12000, cudaEnableDefault, &status));
  EXPECT_EQ(status, cudaDriverEntryPointSuccess);
  EXPECT_NE(fn, nullptr);
  void* again = nullptr;
  ASSERT_CUDA(cudaGetDriverEntryPoint("cuMemCreate", &again, cudaEnableDefault, &status));
  EXPECT_EQ(again, fn);
}

TEST_F(EntryPoint, UnknownSymbolIsNotFoundNotFaked) {
  void* fn = reinterpret_cast<void*>(0x1);
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  ASSERT_CUDA(
      cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 13000, cudaEnableDefault, &status));
  EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(EntryPoint, VersionTooOld) {
  void* fn = reinterpret_cast<void*>(0x1);
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSuccess;
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuMemMap", &fn, 10000, cudaEnableDefault, &status));
  EXPECT_EQ(status, cudaDriverEntryPointVersionNotSufficent);
  EXPECT_EQ(fn, nullptr);
}

TEST_F(EntryPoint, BadArguments) {
  void* fn = nullptr;
  EXPECT_EQ(cudaGetDriverEntryPointByVersion(nullptr, &fn, 13000, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemMap", nullptr, 13000, 0, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetDriverEntryPoint("cuMemMap", &fn, 0x100, nullptr), cudaErrorInvalidValue);
}

TEST_F(EntryPoint, DriverErrorStrings) {
  void* name_fn = nullptr;
  void* string_fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuGetErrorName", &name_fn, 13000, 0, &status));
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuGetErrorString", &string_fn, 13000, 0, &status));
  auto get_name = reinterpret_cast<decltype(&cuGetErrorName)>(name_fn);
  auto get_string = reinterpret_cast<decltype(&cuGetErrorString)>(string_fn);
  const char* text = nullptr;
  ASSERT_EQ(get_name(CUDA_ERROR_OUT_OF_MEMORY, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(get_string(CUDA_ERROR_INVALID_VALUE, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "invalid argument");
  ASSERT_EQ(get_string(CUDA_ERROR_ALREADY_MAPPED, &text), CUDA_SUCCESS);
  EXPECT_STREQ(text, "resource already mapped");
  EXPECT_EQ(get_string(static_cast<CUresult>(1000), &text), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(text, nullptr);
}

}  // namespace
