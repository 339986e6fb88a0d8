// Note [Never pass our memory on]: a free of a pointer inside one of our segments that the
// allocator does not own is a double free or an interior pointer. Forwarding it would be wrong
// in the worst way: when the pointer is a segment's base, the real runtime would free the whole
// segment under the cache. The hooks report it as the runtime reports a pointer it does not
// know (cudaErrorInvalidValue) instead.
#include "segment_registry.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <new>

#include "real_runtime.h"

namespace cudacache::preload {
namespace {

struct SegmentRange {
  std::size_t bytes;
  int device;
};

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, SegmentRange> segments;  // by base address
};

// Never destroyed: frees can arrive from other libraries' static destructors.
Registry& registry() {
  static Registry* instance = new Registry;
  return *instance;
}

}  // namespace

int segment_device(const void* ptr) {
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto it = r.segments.upper_bound(address);
  if (it == r.segments.begin()) return -1;
  --it;
  return address - it->first < it->second.bytes ? it->second.device : -1;
}

}  // namespace cudacache::preload

using cudacache::preload::Registry;

extern "C" {

__attribute__((visibility("hidden"))) cudaError_t __wrap_cudaMalloc(void** ptr, size_t size);
__attribute__((visibility("hidden"))) cudaError_t __wrap_cudaFree(void* ptr);

// The allocator calls these with its device current (device_api.cpp's DeviceGuard).
cudaError_t __wrap_cudaMalloc(void** ptr, size_t size) {
  namespace real = cudacache::preload::real;
  const cudaError_t error = real::cudaMalloc(ptr, size);
  if (error != cudaSuccess) return error;
  int device = 0;
  real::cudaGetDevice(&device);
  try {
    Registry& r = cudacache::preload::registry();
    std::lock_guard lock(r.mutex);
    r.segments[reinterpret_cast<std::uintptr_t>(*ptr)] = {size, device};
  } catch (const std::bad_alloc&) {
    real::cudaFree(*ptr);
    *ptr = nullptr;
    return cudaErrorMemoryAllocation;
  }
  return cudaSuccess;
}

cudaError_t __wrap_cudaFree(void* ptr) {
  {
    Registry& r = cudacache::preload::registry();
    std::lock_guard lock(r.mutex);
    r.segments.erase(reinterpret_cast<std::uintptr_t>(ptr));
  }
  return cudacache::preload::real::cudaFree(ptr);
}

}  // extern "C"
