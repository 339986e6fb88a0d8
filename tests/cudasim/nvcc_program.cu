// An ordinary CUDA program, built by nvcc with -cudart shared and run unmodified on cudasim.
// The kernel is compiled and registered but never launched.
#include <cuda_runtime_api.h>

#include <cstdio>

#include "cudasim.h"

__global__ void scale(float* data, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] *= factor;
}

int main() {
  constexpr int kCount = 1024;
  unsigned host[kCount];
  for (int i = 0; i < kCount; ++i) host[i] = static_cast<unsigned>(i) * 2654435761u;
  void* device = nullptr;
  if (cudaMalloc(&device, sizeof(host)) != cudaSuccess ||
      cudaMemcpy(device, host, sizeof(host), cudaMemcpyHostToDevice) != cudaSuccess) {
    std::printf("FAIL: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  unsigned back[kCount] = {};
  if (cudaMemcpy(back, device, sizeof(back), cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaFree(device) != cudaSuccess) {
    std::printf("FAIL: %s\n", cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  unsigned long long checksum = 0;
  for (int i = 0; i < kCount; ++i) checksum = checksum * 31 + back[i];
  std::printf("checksum=%llu runtime=%s\n", checksum, cudasim_available() ? "cudasim" : "nvidia");
  return 0;
}
