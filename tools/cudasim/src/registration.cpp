// What nvcc-generated host code calls around kernels. Registration is accepted and ignored
// (there is no device to load code onto); launching fails loudly, since kernels cannot run on
// the simulator. Declarations: nvcc_hooks.h.
#include <cstdio>
#include <vector>

#include "api.h"
#include "nvcc_hooks.h"

namespace cudasim {

namespace {

struct CallConfiguration {
  dim3 grid;
  dim3 block;
  size_t shared_memory;
  cudaStream_t stream;
};

std::vector<CallConfiguration>& call_configurations() {
  thread_local std::vector<CallConfiguration> stack;
  return stack;
}

}  // namespace

cudaError_t launch_not_supported() {
  std::fputs("cudasim: cudaLaunchKernel is not supported (kernels cannot run on the simulator)\n",
             stderr);
  return finish(cudaErrorNotSupported);
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

void** __cudaRegisterFatBinary(void*) {
  // Any non-null handle will do: nothing is ever looked up through it.
  static void* handle = nullptr;
  return &handle;
}

void __cudaRegisterFatBinaryEnd(void**) {}

void __cudaUnregisterFatBinary(void**) {}

void __cudaRegisterFunction(void**, const char*, char*, const char*, int, uint3*, uint3*, dim3*,
                            dim3*, int*) {}

void __cudaRegisterVar(void**, char*, char*, const char*, int, size_t, int, int) {}

char __cudaInitModule(void**) { return 1; }

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
                                     struct CUstream_st* stream) {
  call_configurations().push_back({gridDim, blockDim, sharedMem, stream});
  return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3* gridDim, dim3* blockDim, size_t* sharedMem,
                                       void* stream) {
  auto& stack = call_configurations();
  if (stack.empty()) return finish(cudaErrorInvalidConfiguration);
  const CallConfiguration c = stack.back();
  stack.pop_back();
  *gridDim = c.grid;
  *blockDim = c.block;
  *sharedMem = c.shared_memory;
  *static_cast<cudaStream_t*>(stream) = c.stream;
  return cudaSuccess;
}

// Hands back the host stub's address as the kernel handle, so the launch itself is what fails.
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* function) {
  *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(function));
  return cudaSuccess;
}

cudaError_t __cudaLaunchKernel(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) {
  return launch_not_supported();
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t) {
  return launch_not_supported();
}

cudaError_t cudaLaunchKernel(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return launch_not_supported();
}

}  // extern "C"
