// Stream-ordered frees on the per-thread default stream (Note [Per-thread streams] in
// preload/cached_memory.h): on the block's own device the block waits for an event on that
// stream, with no host wait; from another device the handle names that device's stream, not
// one the block can wait for by event, so the free waits for it on the host. Prints the
// synchronizations each free made (cudasim's call counts, both devices). Needs two devices.
#include <cuda_runtime_api.h>
#include <cudasim.h>

#include <cstdio>

namespace {

unsigned long long synchronizations() {
  unsigned long long total = 0;
  for (int device = 0; device < 2; ++device) {
    cudasim_call_counts counts{};
    if (cudasim_get_call_counts(device, &counts) == 0) total += counts.synchronize;
  }
  return total;
}

}  // namespace

int main() {
  if (cudasim_get_call_counts == nullptr) {
    std::printf("not on cudasim\n");
    return 0;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) {
    std::printf("needs two devices\n");
    return 1;
  }
  constexpr size_t kBytes = size_t{1} << 20;
  void* freed_on_its_device = nullptr;
  void* freed_from_another = nullptr;
  if (cudaSetDevice(0) != cudaSuccess ||
      cudaMallocAsync(&freed_on_its_device, kBytes, cudaStreamPerThread) != cudaSuccess ||
      cudaMallocAsync(&freed_from_another, kBytes, cudaStreamPerThread) != cudaSuccess ||
      cudaStreamSynchronize(cudaStreamPerThread) != cudaSuccess) {
    return 1;
  }
  const unsigned long long before = synchronizations();
  const cudaError_t own = cudaFreeAsync(freed_on_its_device, cudaStreamPerThread);
  const unsigned long long after_own = synchronizations();
  if (cudaSetDevice(1) != cudaSuccess) return 1;
  const cudaError_t other = cudaFreeAsync(freed_from_another, cudaStreamPerThread);
  const unsigned long long after_other = synchronizations();
  std::printf("free on its device's per-thread stream: %s, synchronizations %llu\n",
              cudaGetErrorName(own), after_own - before);
  std::printf("free on another device's per-thread stream: %s, synchronizations %llu\n",
              cudaGetErrorName(other), after_other - after_own);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
