// cudaMemGetInfo under the preload counts the memory cudacache caches as free: a program that
// frees everything sees the whole device free again, and one that sizes a buffer from the
// reported free memory gets it, even all of it. The output is the same with and without the
// preload.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

int main() {
  size_t free_bytes = 0;
  size_t total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return 1;
  const size_t initial_free = free_bytes;
  std::vector<void*> blocks(64);
  for (void*& p : blocks) {
    if (cudaMalloc(&p, 3 << 20) != cudaSuccess) return 1;
  }
  cudaMemGetInfo(&free_bytes, &total);
  const bool shrank = free_bytes <= initial_free - 64 * (size_t{3} << 20);
  std::printf("free shrinks by at least what is allocated: %s\n", shrank ? "yes" : "no");
  for (void* p : blocks) cudaFree(p);
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("everything free again after cudaFree: %s\n",
              free_bytes == initial_free ? "yes" : "no");

  // Size one buffer from the reported free memory, as frameworks do.
  void* big = nullptr;
  const size_t want = free_bytes / 4 * 3;
  const cudaError_t error = cudaMalloc(&big, want);
  std::printf("cudaMalloc of 3/4 of the reported free memory: %s\n", cudaGetErrorName(error));
  cudaFree(big);

  // Keep a small block and ask for all the free memory reported (whole MiB). The free rest of
  // the small block's segment or page cannot be given back, so it is not reported free: it
  // was until 2026-12-05, and this cudaMalloc failed under the preload.
  void* small = nullptr;
  if (cudaMalloc(&small, 1024) != cudaSuccess) return 1;
  cudaMemGetInfo(&free_bytes, &total);
  void* all = nullptr;
  const cudaError_t all_error = cudaMalloc(&all, free_bytes & ~((size_t{1} << 20) - 1));
  std::printf("cudaMalloc of all the reported free memory beside a small block: %s\n",
              cudaGetErrorName(all_error));
  cudaFree(all);
  cudaFree(small);
  return error == cudaSuccess && all_error == cudaSuccess ? 0 : 1;
}
