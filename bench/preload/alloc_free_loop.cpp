// The smallest allocation-heavy program: N cudaMalloc + cudaFree pairs of one size. Prints
// "pairs=N size=S ok" (the same with and without the preload) and the time per pair on stderr.
// Built by run.sh with the host compiler against libcudart.so.13, like any program.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  const int pairs = argc > 1 ? std::atoi(argv[1]) : 100000;
  const size_t size = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1024;
  cudaFree(nullptr);  // create the context outside the timed loop
  void* p = nullptr;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    if (cudaMalloc(&p, size) != cudaSuccess || cudaFree(p) != cudaSuccess) {
      std::printf("FAIL\n");
      return 1;
    }
  }
  const std::chrono::duration<double, std::nano> elapsed = std::chrono::steady_clock::now() - start;
  std::printf("pairs=%d size=%zu ok\n", pairs, size);
  std::fprintf(stderr, "%.0f ns per pair\n", elapsed.count() / pairs);
  return 0;
}
