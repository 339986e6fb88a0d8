// Device memory: cudaMalloc and friends, copies and sets, pointer attributes (and the driver's
// cuMemGetAddressRange).
// Every allocation is its own anonymous MAP_NORESERVE mapping: pages cost nothing until
// touched, so an 80 GiB simulated device is free until used, and the kernel never hands the
// same live address to two devices.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <iterator>

#include "api.h"

namespace cudasim {

void* map_aligned(size_t bytes, size_t alignment, int protection, void* hint) {
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  const auto host_page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (alignment <= host_page || alignment % host_page != 0) {
    return mmap(hint, bytes, protection, flags, -1, 0);
  }
  if (bytes > SIZE_MAX - alignment) return MAP_FAILED;
  void* wide = mmap(hint, bytes + alignment, protection, flags, -1, 0);
  if (wide == MAP_FAILED) return MAP_FAILED;
  const auto start = reinterpret_cast<uintptr_t>(wide);
  const uintptr_t aligned = round_up(start, alignment);
  if (aligned > start) munmap(wide, aligned - start);
  const uintptr_t end = start + bytes + alignment;
  if (end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  return reinterpret_cast<void*>(aligned);
}

namespace {

cudaError_t allocate(State& s, int device, size_t size, void** ptr) {
  // CUDASIM_MALLOC_PAGE: an allocation of more than half a page is mapped in whole pages.
  const size_t unit =
      s.malloc_page != 0 && size > s.malloc_page / 2 ? s.malloc_page : kAllocationAlignment;
  if (size > SIZE_MAX - unit) return cudaErrorMemoryAllocation;
  const size_t bytes = round_up(size, unit);
  // The peaks as they were: a request the host cannot map was never in use (it showed as a
  // device peak of 8 EiB after a failed cudaMalloc of 2^63 - 1 bytes).
  const uint64_t device_peak = s.devices[static_cast<size_t>(device)].counters.peak_bytes;
  const uint64_t total_peak = s.total_peak;
  Allocation allocation{device, bytes, false};
  if (const cudaError_t e = take_malloc_memory(s, device, size, &allocation); e != cudaSuccess) {
    return e;
  }
  // With CUDASIM_MALLOC_PAGE a large allocation starts a page, as on the driver it models.
  void* p = map_aligned(bytes, unit, PROT_READ | PROT_WRITE);
  if (p == MAP_FAILED) {
    give_back_malloc_memory(s, allocation);
    s.devices[static_cast<size_t>(device)].counters.peak_bytes = device_peak;
    s.total_peak = total_peak;
    return cudaErrorMemoryAllocation;
  }
  s.allocations[reinterpret_cast<uintptr_t>(p)] = allocation;
  ++s.devices[static_cast<size_t>(device)].counters.mallocs;
  *ptr = p;
  return cudaSuccess;
}

// `counted`: a cudaFree/cudaFreeAsync, not a cudaDeviceReset.
void release(State& s, std::map<uintptr_t, Allocation>::iterator it, bool counted = true) {
  munmap(reinterpret_cast<void*>(it->first), it->second.bytes);
  give_back_malloc_memory(s, it->second);
  if (counted) ++s.devices[static_cast<size_t>(it->second.device)].counters.frees;
  s.allocations.erase(it);
}

// The live allocation containing [ptr, ptr + bytes), if any.
const Allocation* find_allocation(const State& s, uintptr_t ptr, size_t bytes, uintptr_t* base) {
  auto it = s.allocations.upper_bound(ptr);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  const uintptr_t offset = ptr - it->first;
  if (it->second.free_pending || offset >= it->second.bytes || bytes > it->second.bytes - offset) {
    return nullptr;
  }
  *base = it->first;
  return &it->second;
}

// The device of the allocation containing ptr (freed asynchronously or not), or -1: where a
// free of ptr is counted.
int allocation_device(const State& s, uintptr_t ptr) {
  auto it = s.allocations.upper_bound(ptr);
  if (it == s.allocations.begin()) return -1;
  --it;
  return ptr - it->first < it->second.bytes ? it->second.device : -1;
}

// The device whose VMM mapping(s) cover [ptr, ptr + bytes) contiguously, or -1.
int find_mapped_device(const State& s, uintptr_t ptr, size_t bytes) {
  auto it = s.mappings.upper_bound(ptr);
  if (it == s.mappings.begin()) return -1;
  --it;
  const int device = it->second.device;
  uintptr_t covered = ptr;
  const uintptr_t end = ptr + bytes;
  while (it != s.mappings.end() && it->first <= covered) {
    covered = std::max(covered, it->first + it->second.bytes);
    if (covered >= end) return device;
    ++it;
  }
  return -1;
}

bool valid_kind(cudaMemcpyKind kind) {
  return kind == cudaMemcpyHostToHost || kind == cudaMemcpyHostToDevice ||
         kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
         kind == cudaMemcpyDefault;
}

// Enqueues `action` on the stream and, for the synchronous calls, waits until it has run.
cudaError_t submit(cudaStream_t stream, DefaultStream mode, bool wait,
                   std::function<bool(const State&)> valid, std::function<void()> action) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  StreamId id = 0;
  if (const cudaError_t e = resolve_stream(s, stream, mode, &id); e != cudaSuccess) {
    return finish(e);
  }
  if (!valid(s)) return finish(cudaErrorInvalidValue);
  const Ticket t = enqueue(s, id, {}, std::move(action));
  if (wait) wait_for(lock, s, t);
  return cudaSuccess;
}

}  // namespace

bool is_device_range(const State& s, const void* ptr, size_t bytes) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t base = 0;
  return find_allocation(s, p, bytes, &base) != nullptr || find_mapped_device(s, p, bytes) >= 0;
}

void free_device_allocations(State& s, int device) {
  for (auto it = s.allocations.begin(); it != s.allocations.end();) {
    const auto next = std::next(it);
    if (it->second.device == device) release(s, it, false);
    it = next;
  }
}

cudaError_t memcpy_async(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                         cudaStream_t stream, DefaultStream mode, bool wait) {
  if (!valid_kind(kind)) return finish(cudaErrorInvalidMemcpyDirection);
  if (count == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return finish(cudaErrorInvalidValue);
  // The device side(s) must lie in device memory; cudaMemcpyDefault infers, so anything goes.
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  return submit(
      stream, mode, wait,
      [=](const State& s) {
        return (!dst_device || is_device_range(s, dst, count)) &&
               (!src_device || is_device_range(s, src, count));
      },
      [=] { std::memmove(dst, src, count); });
}

cudaError_t memset_async(void* dst, int value, size_t count, cudaStream_t stream,
                         DefaultStream mode, bool wait) {
  if (count == 0) return cudaSuccess;
  return submit(
      stream, mode, wait, [=](const State& s) { return is_device_range(s, dst, count); },
      [=] { std::memset(dst, value, count); });
}

cudaError_t malloc_async(void** ptr, size_t size, cudaStream_t stream, DefaultStream mode) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamId id = 0;
  const cudaError_t stream_error = resolve_stream(s, stream, mode, &id);
  if (count_call(s, stream_error == cudaSuccess ? s.streams.at(id).device : -1,
                 &cudasim_call_counts::malloc)) {
    return finish(injected_error(&cudasim_call_counts::malloc));
  }
  if (ptr == nullptr) return finish(cudaErrorInvalidValue);
  if (stream_error != cudaSuccess) return finish(stream_error);
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  return finish(allocate(s, s.streams.at(id).device, size, ptr));
}

cudaError_t free_async(void* ptr, cudaStream_t stream, DefaultStream mode) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamId id = 0;
  const cudaError_t stream_error = resolve_stream(s, stream, mode, &id);
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (ptr != nullptr) {
    const int device = allocation_device(s, address);
    if (count_call(s, device >= 0 || stream_error != cudaSuccess ? device : s.streams.at(id).device,
                   &cudasim_call_counts::free)) {
      const auto it = s.allocations.find(address);
      if (it != s.allocations.end())
        s.devices[static_cast<size_t>(it->second.device)].kept_allocations.push_back(address);
      return finish(injected_error(&cudasim_call_counts::free));
    }
  }
  if (stream_error != cudaSuccess) return finish(stream_error);
  if (ptr == nullptr) return cudaSuccess;
  const auto it = s.allocations.find(address);
  if (it == s.allocations.end() || it->second.free_pending) return finish(cudaErrorInvalidValue);
  // The memory goes back when the stream's work reaches the free, as with CUDA's pools.
  it->second.free_pending = true;
  enqueue(s, id, {}, [&s, address] {
    const auto found = s.allocations.find(address);
    if (found != s.allocations.end()) release(s, found);
  });
  return cudaSuccess;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaMalloc(void** devPtr, size_t size) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, current_device(), &cudasim_call_counts::malloc)) {
    return finish(injected_error(&cudasim_call_counts::malloc));
  }
  if (devPtr == nullptr) return finish(cudaErrorInvalidValue);
  if (size == 0) {
    *devPtr = nullptr;
    return cudaSuccess;
  }
  return finish(allocate(s, current_device(), size, devPtr));
}

// Unlike CUDA, cudaFree does not synchronize the device: a test holding a stream must still be
// able to free memory without deadlocking.
cudaError_t cudaFree(void* devPtr) {
  if (devPtr == nullptr) return cudaSuccess;
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto address = reinterpret_cast<uintptr_t>(devPtr);
  if (count_call(s, allocation_device(s, address), &cudasim_call_counts::free)) {
    const auto it = s.allocations.find(address);
    if (it != s.allocations.end())
      s.devices[static_cast<size_t>(it->second.device)].kept_allocations.push_back(address);
    return finish(injected_error(&cudasim_call_counts::free));
  }
  const auto it = s.allocations.find(address);
  if (it == s.allocations.end() || it->second.free_pending) return finish(cudaErrorInvalidValue);
  release(s, it);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t hStream) {
  return malloc_async(devPtr, size, hStream, DefaultStream::Legacy);
}

cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, DefaultStream::Legacy);
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return memcpy_async(dst, src, count, kind, nullptr, DefaultStream::Legacy, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return memcpy_async(dst, src, count, kind, stream, DefaultStream::Legacy, false);
}

cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  return memset_async(devPtr, value, count, nullptr, DefaultStream::Legacy, true);
}

cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return memset_async(devPtr, value, count, stream, DefaultStream::Legacy, false);
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return finish(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  uintptr_t base = 0;
  int device = -1;
  if (const Allocation* a = find_allocation(s, p, 1, &base)) {
    device = a->device;
  } else {
    device = find_mapped_device(s, p, 1);
  }
  *attributes = cudaPointerAttributes{};
  if (device < 0) {
    if (const HostAllocation* h = find_host_allocation(s, ptr)) {  // page-locked host memory
      attributes->type = cudaMemoryTypeHost;
      attributes->device = h->device;
      attributes->hostPointer = const_cast<void*>(ptr);
      attributes->devicePointer = const_cast<void*>(ptr);  // unified addressing
      return cudaSuccess;
    }
    // What CUDA reports for memory it does not know: unregistered host memory, no device.
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->device = -2;
    return cudaSuccess;
  }
  attributes->type = cudaMemoryTypeDevice;
  attributes->device = device;
  attributes->devicePointer = const_cast<void*>(ptr);
  return cudaSuccess;
}

// The cudaMalloc allocation, or else the cuMemMap mapping, that contains dptr. A driver call:
// it returns CUresult and leaves the runtime's last error alone.
CUresult cuMemGetAddressRange(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const auto p = static_cast<uintptr_t>(dptr);
  uintptr_t base = 0;
  size_t bytes = 0;
  if (const Allocation* a = find_allocation(s, p, 1, &base)) {
    bytes = a->bytes;
  } else if (find_mapped_device(s, p, 1) >= 0) {
    auto it = std::prev(s.mappings.upper_bound(p));
    base = it->first;
    bytes = it->second.bytes;
  } else {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (pbase != nullptr) *pbase = base;
  if (psize != nullptr) *psize = bytes;
  return CUDA_SUCCESS;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const CallClock clock;
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (count_call(s, -1, &cudasim_call_counts::mem_get_info)) {
    return finish(injected_error(&cudasim_call_counts::mem_get_info));
  }
  if (free == nullptr || total == nullptr) return finish(cudaErrorInvalidValue);
  const Device& d = s.devices[static_cast<size_t>(current_device())];
  *total = d.capacity;
  *free = d.counters.in_use_bytes >= d.capacity ? 0 : d.capacity - d.counters.in_use_bytes;
  return cudaSuccess;
}

}  // extern "C"
