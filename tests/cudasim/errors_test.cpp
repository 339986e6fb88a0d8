// Last error (per thread, get clears, peek does not) and error names/strings.
#include <cstring>
#include <thread>

#include "sim_test.h"

namespace {

using Errors = SimTest;

TEST_F(Errors, GetClearsPeekDoesNot) {
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaSetDevice(99), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
}

TEST_F(Errors, SuccessDoesNotClearAndLatestWins) {
  EXPECT_EQ(cudaSetDevice(99), cudaErrorInvalidDevice);
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  EXPECT_EQ(cudaPeekAtLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaFree(&count), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST_F(Errors, LastErrorIsPerThread) {
  EXPECT_EQ(cudaSetDevice(99), cudaErrorInvalidDevice);
  cudaError_t seen = cudaErrorUnknown;
  cudaError_t own = cudaErrorUnknown;
  std::thread([&] {
    seen = cudaPeekAtLastError();
    void* p = nullptr;
    ASSERT_EQ(cudasim_set_capacity(0, 0), 0);
    own = cudaMalloc(&p, 1);
  }).join();
  EXPECT_EQ(seen, cudaSuccess);
  EXPECT_EQ(own, cudaErrorMemoryAllocation);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
}

TEST_F(Errors, NamesAndStrings) {
  EXPECT_STREQ(cudaGetErrorName(cudaSuccess), "cudaSuccess");
  EXPECT_STREQ(cudaGetErrorString(cudaSuccess), "no error");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorMemoryAllocation), "cudaErrorMemoryAllocation");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorMemoryAllocation), "out of memory");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidDevice), "invalid device ordinal");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidResourceHandle), "invalid resource handle");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNotReady), "device not ready");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorNotSupported), "operation not supported");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidMemcpyDirection),
               "invalid copy direction for memcpy");
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidConfiguration), "cudaErrorInvalidConfiguration");
  EXPECT_STREQ(cudaGetErrorName(static_cast<cudaError_t>(1000)), "unrecognized error code");
  EXPECT_STREQ(cudaGetErrorString(static_cast<cudaError_t>(1000)), "unrecognized error code");
}

}  // namespace
