#include "segment.h"

#include "device_api.h"

namespace cudacache {

cudaError_t MallocSegmentBackend::allocate(int device, std::size_t bytes, std::uintptr_t* base) {
  void* ptr = nullptr;
  const cudaError_t error = device_api::malloc_memory(device, &ptr, bytes);
  *base = reinterpret_cast<std::uintptr_t>(ptr);
  return error;
}

cudaError_t MallocSegmentBackend::release(int device, std::uintptr_t base, std::size_t /*bytes*/) {
  return device_api::free_memory(device, reinterpret_cast<void*>(base));
}

}  // namespace cudacache
