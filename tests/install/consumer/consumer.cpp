// A C++17 program on the installed C++ API: allocate, free, stats, the typed OOM, on cudasim.
#include <cudasim.h>
#include <cudacache/cudacache.hpp>

#include <cstdio>
#include <cstring>

int main() {
  if (!cudasim_available()) {
    std::puts("consumer: not running on cudasim");
    return 1;
  }
  static_assert(CUDACACHE_VERSION >= 100, "version macros");
  if (std::strcmp(cudacache_version(), CUDACACHE_VERSION_STRING) != 0) {
    std::printf("consumer: headers %s, library %s\n", CUDACACHE_VERSION_STRING,
                cudacache_version());
    return 2;
  }
  {
    cudacache::DeviceBuffer buffer(3 << 20);
    if (cudacache::memory_stats().allocated_bytes[cudacache::kAllPools].current != 3 << 20) {
      return 3;
    }
  }
  cudasim_set_capacity(0, 64 << 20);
  try {
    cudacache::DeviceBuffer too_large(std::size_t{1} << 30);
    return 4;
  } catch (const cudacache::OutOfMemoryError& error) {
    if (error.report().requested_bytes != std::size_t{1} << 30) return 5;
  }
  std::printf("consumer: cudacache %s ok\n", cudacache_version());
  return 0;
}
