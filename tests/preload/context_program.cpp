// A thread with a context of its own (cuCtxCreate on device 0) frees a block of device 1: the
// free switches to device 1 and back, and must leave the thread's own context current, not
// device 0's primary context (which cudaSetDevice alone would make current). Prints which
// context is current after each step; the same with and without the preload. Needs two devices.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>

namespace {

template <typename Function>
Function driver(const char* name) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &function, 13000, cudaEnableDefault, &status) !=
          cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<Function>(function);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    std::printf("needs two devices\n");
    return 1;
  }
  const auto create = driver<decltype(&cuCtxCreate)>("cuCtxCreate");
  const auto destroy = driver<decltype(&cuCtxDestroy)>("cuCtxDestroy");
  const auto get_current = driver<decltype(&cuCtxGetCurrent)>("cuCtxGetCurrent");
  if (create == nullptr || destroy == nullptr || get_current == nullptr) {
    std::printf("no driver context functions\n");
    return 1;
  }
  const auto which = [&](CUcontext own) {
    CUcontext current = nullptr;
    if (get_current(&current) != CUDA_SUCCESS) return "unknown";
    return current == own ? "its own" : "another";
  };
  constexpr size_t kBytes = size_t{1} << 20;
  void* on_device_1 = nullptr;
  void* async_on_device_1 = nullptr;
  if (cudaSetDevice(1) != cudaSuccess || cudaMalloc(&on_device_1, kBytes) != cudaSuccess ||
      cudaMallocAsync(&async_on_device_1, kBytes, nullptr) != cudaSuccess ||
      cudaDeviceSynchronize() != cudaSuccess || cudaSetDevice(0) != cudaSuccess) {
    return 1;
  }
  CUcontext own = nullptr;
  if (create(&own, nullptr, 0, 0) != CUDA_SUCCESS) return 1;
  std::printf("after cuCtxCreate: %s context\n", which(own));
  const cudaError_t freed = cudaFree(on_device_1);
  std::printf("cudaFree of a block of device 1: %s, then %s context\n", cudaGetErrorName(freed),
              which(own));
  const cudaError_t freed_async = cudaFreeAsync(async_on_device_1, nullptr);
  std::printf("cudaFreeAsync of a block of device 1: %s, then %s context\n",
              cudaGetErrorName(freed_async), which(own));
  int device = -1;
  const cudaError_t got = cudaGetDevice(&device);
  std::printf("current device: %s %d\n", cudaGetErrorName(got), device);
  if (destroy(own) != CUDA_SUCCESS) return 1;
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
