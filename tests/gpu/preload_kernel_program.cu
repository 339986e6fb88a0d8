// Kernels on memory that libcudacache_preload.so hands out: what cudasim cannot run
// (PRELOAD_CHECKS.md, check 3's kernel launch and the first half of check 7). Built with plain
// nvcc (static runtime, so the preload serves it through the driver hooks).
//
// Each round: allocate a block, launch a slow kernel on a non-blocking stream that writes A over
// it, cudaFree it without synchronizing, allocate the same size again at once (the cache hands
// back the same memory), launch a kernel on another non-blocking stream that writes B, read the
// block back on that stream and count the bytes that are not B. If cudaFree did not wait for the
// first kernel (Note [Free synchronizes]), its late writes of A would show up here.
//
// Output: "rounds=N bytes=M wrong=0 checksum=X", the same with and without the preload; exit
// status 1 when a byte is wrong or a call fails.
#include <cuda_runtime.h>

#include "preload_program_support.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using preload_check::check;
using preload_check::fill;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 200;
  constexpr std::size_t kSizes[] = {1000, 1 << 20, (4 << 20) + 123, 16 << 20};
  cudaStream_t first = nullptr;
  cudaStream_t second = nullptr;
  if (!check(cudaStreamCreateWithFlags(&first, cudaStreamNonBlocking), "stream") ||
      !check(cudaStreamCreateWithFlags(&second, cudaStreamNonBlocking), "stream")) {
    return 1;
  }
  std::vector<unsigned char> back;
  std::uint64_t checksum = 0;
  std::uint64_t bytes = 0;
  std::uint64_t wrong = 0;
  for (int round = 0; round < rounds; ++round) {
    const std::size_t size = kSizes[round % 4];
    const auto a = static_cast<unsigned char>(2 * round + 1);
    const auto b = static_cast<unsigned char>(2 * round + 2);
    void* p = nullptr;
    if (!check(cudaMalloc(&p, size), "cudaMalloc")) return 1;
    fill<<<64, 256, 0, first>>>(static_cast<unsigned char*>(p), a, size, 20);
    if (!check(cudaGetLastError(), "launch") || !check(cudaFree(p), "cudaFree")) return 1;
    void* q = nullptr;
    if (!check(cudaMalloc(&q, size), "cudaMalloc again")) return 1;
    fill<<<64, 256, 0, second>>>(static_cast<unsigned char*>(q), b, size, 1);
    back.assign(size, 0);
    if (!check(cudaGetLastError(), "launch") ||
        !check(cudaMemcpyAsync(back.data(), q, size, cudaMemcpyDeviceToHost, second), "copy") ||
        !check(cudaStreamSynchronize(second), "synchronize")) {
      return 1;
    }
    for (unsigned char byte : back) {
      wrong += byte != b;
      checksum = checksum * 1099511628211ULL + byte;
    }
    bytes += size;
    if (!check(cudaFree(q), "cudaFree")) return 1;
  }
  if (!check(cudaStreamDestroy(first), "stream destroy") ||
      !check(cudaStreamDestroy(second), "stream destroy") ||
      !check(cudaDeviceSynchronize(), "device synchronize")) {
    return 1;
  }
  std::printf("rounds=%d bytes=%llu wrong=%llu checksum=%llu\n", rounds,
              static_cast<unsigned long long>(bytes), static_cast<unsigned long long>(wrong),
              static_cast<unsigned long long>(checksum));
  return wrong == 0 ? 0 : 1;
}
