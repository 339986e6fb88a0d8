// The hooks nvcc-generated host code calls: registration is accepted, the launch
// configuration round-trips, and launching a kernel fails loudly.
#include <string>

#include "sim_test.h"

#include "nvcc_hooks.h"  // tools/cudasim/src: what nvcc's crt headers declare

namespace {

using Registration = SimTest;

void host_stub() {}

TEST_F(Registration, RegistrationIsAccepted) {
  void** handle = __cudaRegisterFatBinary(nullptr);
  ASSERT_NE(handle, nullptr);
  char name[] = "kernel";
  __cudaRegisterFunction(handle, reinterpret_cast<const char*>(&host_stub), name, name, -1, nullptr,
                         nullptr, nullptr, nullptr, nullptr);
  char var = 0;
  __cudaRegisterVar(handle, &var, &var, "var", 0, 1, 0, 0);
  __cudaRegisterFatBinaryEnd(handle);
  EXPECT_EQ(__cudaInitModule(handle), 1);
  __cudaUnregisterFatBinary(handle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Registration, CallConfigurationRoundTrips) {
  cudaStream_t stream = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&stream));
  EXPECT_EQ(__cudaPushCallConfiguration(dim3(7, 2), dim3(128), 4096, stream), 0u);
  dim3 grid;
  dim3 block;
  size_t shared = 0;
  cudaStream_t popped = nullptr;
  ASSERT_CUDA(__cudaPopCallConfiguration(&grid, &block, &shared, &popped));
  EXPECT_EQ(grid.x, 7u);
  EXPECT_EQ(grid.y, 2u);
  EXPECT_EQ(block.x, 128u);
  EXPECT_EQ(shared, 4096u);
  EXPECT_EQ(popped, stream);
  EXPECT_EQ(__cudaPopCallConfiguration(&grid, &block, &shared, &popped),
            cudaErrorInvalidConfiguration);
  ASSERT_CUDA(cudaStreamDestroy(stream));
}

TEST_F(Registration, LaunchingFailsLoudly) {
  cudaKernel_t kernel = nullptr;
  ASSERT_CUDA(__cudaGetKernel(&kernel, reinterpret_cast<const void*>(&host_stub)));
  testing::internal::CaptureStderr();
  EXPECT_EQ(__cudaLaunchKernel(kernel, dim3(1), dim3(1), nullptr, 0, nullptr),
            cudaErrorNotSupported);
  EXPECT_EQ(cudaLaunchKernel(reinterpret_cast<const void*>(&host_stub), dim3(1), dim3(1), nullptr,
                             0, nullptr),
            cudaErrorNotSupported);
  const std::string err = testing::internal::GetCapturedStderr();
  const std::string message =
      "cudasim: cudaLaunchKernel is not supported (kernels cannot run on the simulator)\n";
  EXPECT_EQ(err, message + message);
  EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
}

}  // namespace
