// A process that holds device memory until told to go, for the cudacache-top tests:
//
//   top_holder_api|top_holder_runtime THREADS MIB DEVICE[,DEVICE...]
//
// Each of THREADS threads allocates MIB MiB, in 1 MiB blocks, on every DEVICE: through
// cudacache's C++ API (top_holder_api, HOLDER_USES_CUDACACHE) or plain cudaMalloc
// (top_holder_runtime, which knows nothing of cudacache: cached only under LD_PRELOAD).
// Then it frees 1 MiB per thread and device (so the allocator has a cache), prints "ready",
// and waits for a line or the end of stdin before freeing everything and exiting 0.
#if HOLDER_USES_CUDACACHE
#include <cudacache/cudacache.hpp>
#endif

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Held {
  int device;
  void* pointer;
};

void* allocate(int device) {
#if HOLDER_USES_CUDACACHE
  try {
    return cudacache::allocate(kMiB, device, nullptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return nullptr;
  }
#else
  void* p = nullptr;
  if (cudaSetDevice(device) != cudaSuccess || cudaMalloc(&p, kMiB) != cudaSuccess) return nullptr;
  return p;
#endif
}

void release(int device, void* p) {
#if HOLDER_USES_CUDACACHE
  (void)device;
  cudacache::deallocate(p);
#else
  cudaSetDevice(device);
  cudaFree(p);
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s THREADS MIB DEVICE[,DEVICE...]\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const int mib = std::atoi(argv[2]);
  std::vector<int> devices;
  std::stringstream list(argv[3]);
  for (std::string item; std::getline(list, item, ',');) devices.push_back(std::stoi(item));

  std::mutex mutex;
  std::vector<Held> held;
  bool failed = false;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int device : devices) {
        std::vector<void*> mine;
        for (int i = 0; i < mib; ++i) {
          void* p = allocate(device);
          if (p == nullptr) {
            std::lock_guard<std::mutex> lock(mutex);
            failed = true;
            return;
          }
          mine.push_back(p);
        }
        // One block back to the cache.
        release(device, mine.back());
        mine.pop_back();
        std::lock_guard<std::mutex> lock(mutex);
        for (void* p : mine) held.push_back({device, p});
      }
    });
  }
  for (auto& worker : workers) worker.join();
  if (failed) {
    std::printf("allocation failed\n");
    return 1;
  }
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  for (const Held& h : held) release(h.device, h.pointer);
  return 0;
}
