// What the preload's GPU check programs share, one program per file (preload_kernel_program.cu,
// preload_graph_program.cu): a slow fill kernel and a call check that prints what failed.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>

namespace preload_check {

// Writes value over data[0, n) `passes` times (volatile: every pass is a real store), so that
// the kernel is still running when the host goes on.
__global__ void fill(volatile unsigned char* data, unsigned char value, std::size_t n, int passes) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (int pass = 0; pass < passes; ++pass) {
    for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
         i += stride) {
      data[i] = value;
    }
  }
}

inline bool check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return true;
  std::printf("FAIL: %s: %s\n", what, cudaGetErrorName(error));
  return false;
}

}  // namespace preload_check
