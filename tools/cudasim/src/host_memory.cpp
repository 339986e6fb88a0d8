// Page-locked ("pinned") host memory: cudaHostAlloc / cudaMallocHost / cudaFreeHost and
// cudaHostRegister / cudaHostUnregister. On the simulator all memory is host memory, so
// pinning is bookkeeping: cudaHostAlloc maps fresh pages, registration records a user range.
// cudaPointerGetAttributes reports both as cudaMemoryTypeHost (memory.cpp), which is how
// PyTorch's Tensor.is_pinned() asks. Pinned memory is not device memory: it is not charged to
// a device's capacity or counters.
#include <sys/mman.h>

#include "state.h"

namespace cudasim {

namespace {

constexpr unsigned kHostAllocFlags =
    cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined;
constexpr unsigned kHostRegisterFlags = cudaHostRegisterPortable | cudaHostRegisterMapped |
                                        cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;

bool overlaps(const State& s, uintptr_t ptr, size_t bytes) {
  auto it = s.host_allocations.lower_bound(ptr);
  if (it != s.host_allocations.end() && it->first < ptr + bytes) return true;
  if (it == s.host_allocations.begin()) return false;
  --it;
  return it->first + it->second.bytes > ptr;
}

}  // namespace

const HostAllocation* find_host_allocation(const State& s, const void* ptr) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  auto it = s.host_allocations.upper_bound(p);
  if (it == s.host_allocations.begin()) return nullptr;
  --it;
  return p - it->first < it->second.bytes ? &it->second : nullptr;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (pHost == nullptr || (flags & ~kHostAllocFlags) != 0) return finish(cudaErrorInvalidValue);
  if (size == 0) {
    *pHost = nullptr;
    return cudaSuccess;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return finish(cudaErrorMemoryAllocation);
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.host_allocations[reinterpret_cast<uintptr_t>(p)] =
      HostAllocation{size, false, current_device()};
  *pHost = p;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) {
  return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.host_allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.host_allocations.end() || it->second.registered) {
    return finish(cudaErrorInvalidValue);
  }
  munmap(ptr, it->second.bytes);
  s.host_allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr || size == 0 || (flags & ~kHostRegisterFlags) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  if (overlaps(s, p, size)) return finish(cudaErrorHostMemoryAlreadyRegistered);
  s.host_allocations[p] = HostAllocation{size, true, current_device()};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto it = s.host_allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.host_allocations.end() || !it->second.registered) {
    return finish(cudaErrorHostMemoryNotRegistered);
  }
  s.host_allocations.erase(it);
  return cudaSuccess;
}

}  // extern "C"
