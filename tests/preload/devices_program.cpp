// Two devices (CUDASIM_DEVICES=2): allocations on each, frees while the other device is
// current, cudaMemGetInfo per device, and cudaDeviceReset of one device while the other keeps
// its memory. Same output with and without the preload.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

namespace {

unsigned round_trip(void* device_ptr, unsigned value) {
  unsigned back = 0;
  cudaMemcpy(device_ptr, &value, sizeof value, cudaMemcpyHostToDevice);
  cudaMemcpy(&back, device_ptr, sizeof back, cudaMemcpyDeviceToHost);
  return back;
}

}  // namespace

int main() {
  int count = 0;
  cudaGetDeviceCount(&count);
  std::printf("devices: %d\n", count);
  if (count < 2) return 1;
  std::vector<void*> on[2];
  for (int round = 0; round < 200; ++round) {
    for (int device = 0; device < 2; ++device) {
      cudaSetDevice(device);
      void* p = nullptr;
      if (cudaMalloc(&p, (round % 7 + 1) << 18) != cudaSuccess) return 1;
      on[device].push_back(p);
    }
    // Free the other device's oldest block while this one is current.
    for (int device = 0; device < 2; ++device) {
      cudaSetDevice(device);
      auto& other = on[1 - device];
      if (other.size() > 4) {
        if (cudaFree(other.front()) != cudaSuccess) return 1;
        other.erase(other.begin());
      }
    }
  }
  cudaSetDevice(1);
  std::printf("device 1 block reads back: %s\n",
              round_trip(on[1].back(), 77) == 77 ? "ok" : "wrong");
  int current = -1;
  cudaGetDevice(&current);
  std::printf("current device after frees: %d\n", current);
  for (void* p : on[1]) cudaFree(p);
  size_t free_bytes = 0;
  size_t total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  std::printf("device 1 all free: %s\n", free_bytes == total ? "yes" : "no");
  std::printf("reset device 1: %s\n", cudaGetErrorName(cudaDeviceReset()));
  cudaSetDevice(0);
  std::printf("device 0 block survives the reset of device 1: %s\n",
              round_trip(on[0].back(), 99) == 99 ? "ok" : "wrong");
  for (void* p : on[0]) {
    if (cudaFree(p) != cudaSuccess) return 1;
  }
  std::printf("done: %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
