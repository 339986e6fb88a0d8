// Memory cudacache did not hand out is passed to the real runtime untouched. Here it comes
// from the real cudaMalloc, looked up with dlvsym on the runtime's handle (dlvsym is not
// interposed: this is how a library that pins a symbol version allocates behind the preload),
// and is freed through the interposed cudaFree and cudaFreeAsync. Also: cudaDeviceReset
// releases what the cache holds, and allocation works again after it. And the dlsym hook keeps
// RTLD_NEXT relative to the library that asks (next_probe.cpp).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

extern "C" void* preload_probe_next();  // next_probe.cpp

int main() {
  // dlsym(RTLD_NEXT) keeps its meaning for other libraries under the preload.
  std::printf("dlsym(RTLD_NEXT) from a library for its own symbol: %s\n",
              preload_probe_next() == nullptr ? "NULL" : "found (wrong)");

  void* runtime = dlopen("libcudart.so.13", RTLD_LAZY | RTLD_NOLOAD);
  using Malloc = cudaError_t (*)(void**, size_t);
  auto real_malloc =
      runtime != nullptr
          ? reinterpret_cast<Malloc>(dlvsym(runtime, "cudaMalloc", "libcudart.so.13"))
          : nullptr;
  if (real_malloc == nullptr) {
    std::printf("FAIL: no real cudaMalloc\n");
    return 1;
  }
  void* a = nullptr;
  void* b = nullptr;
  std::printf("real cudaMalloc: %s\n", cudaGetErrorName(real_malloc(&a, 5 << 20)));
  std::printf("real cudaMalloc: %s\n", cudaGetErrorName(real_malloc(&b, 1000)));
  unsigned value = 0xC0FFEE;
  unsigned back = 0;
  cudaMemcpy(a, &value, sizeof value, cudaMemcpyHostToDevice);
  cudaMemcpy(&back, a, sizeof back, cudaMemcpyDeviceToHost);
  std::printf("round trip: %s\n", back == value ? "ok" : "wrong");
  std::printf("interposed cudaFree of it: %s\n", cudaGetErrorName(cudaFree(a)));
  std::printf("interposed cudaFreeAsync of it: %s\n", cudaGetErrorName(cudaFreeAsync(b, nullptr)));
  std::printf("cudaFree of it again: %s\n", cudaGetErrorName(cudaFree(a)));
  std::printf("cudaGetLastError: %s\n", cudaGetErrorName(cudaGetLastError()));

  // Cached memory, then a reset, then allocation again.
  void* c = nullptr;
  for (int i = 0; i < 100; ++i) {
    if (cudaMalloc(&c, 1 << 20) != cudaSuccess || cudaFree(c) != cudaSuccess) return 1;
  }
  void* held = nullptr;
  cudaMalloc(&held, 1 << 20);
  std::printf("cudaDeviceReset: %s\n", cudaGetErrorName(cudaDeviceReset()));
  size_t free_bytes = 0;
  size_t total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("all memory free after the reset: %s\n", free_bytes == total ? "yes" : "no");
  std::printf("cudaFree of a pointer from before the reset: %s\n",
              cudaGetErrorName(cudaFree(held)));
  cudaGetLastError();
  std::printf("cudaMalloc after the reset: %s\n", cudaGetErrorName(cudaMalloc(&c, 1 << 20)));
  std::printf("cudaFree after the reset: %s\n", cudaGetErrorName(cudaFree(c)));
  return 0;
}
