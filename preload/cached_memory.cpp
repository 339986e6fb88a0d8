#include "cached_memory.h"

#include "device_caches.h"
#include "real_runtime.h"
#include "segment_table.h"

#include <new>

namespace cudacache::preload {
namespace {

// Frees `ptr` if it is a live allocation of `allocator`: kFreed, or kInvalidPointer; kFailed
// with cudaErrorMemoryAllocation when host memory runs out first (the allocator reserves what
// the free needs before changing anything: the block stays allocated). Found in review: the
// std::bad_alloc went through the C functions of the hooks.
FreeResult deallocate(DeviceAllocator& allocator, void* ptr, int device) {
  try {
    if (!allocator.deallocate_if_owned(ptr)) return {FreeOutcome::kInvalidPointer, cudaSuccess};
  } catch (const std::bad_alloc&) {
    return {FreeOutcome::kFailed, cudaErrorMemoryAllocation};
  }
  counters(device).frees.fetch_add(1, std::memory_order_relaxed);
  return {FreeOutcome::kFreed, cudaSuccess};
}

}  // namespace

cudaStream_t async_stream_key(cudaStream_t stream, bool per_thread) {
  if (stream != nullptr) return stream;
  return per_thread ? cudaStreamPerThread : cudaStreamLegacy;
}

void* allocate_cached(int device, std::size_t size, cudaStream_t stream_key) {
  DeviceAllocator* allocator = allocator_for(device);
  if (allocator == nullptr) {  // no cache for the device: the real function serves it
    if (device >= 0 && device < kMaxDevices) {
      counters(device).passed_through.fetch_add(1, std::memory_order_relaxed);
    }
    return nullptr;
  }
  // Note [Pending errors]: the allocator clears the runtime errors of its own failed calls
  // (cudaGetLastError), and a failed call overwrites the thread's last error anyway, so a
  // cache miss under memory pressure would lose an error the program has not read yet. Such a
  // program gets the real function, which leaves that error alone, and the memory the cache
  // holds is given back first so that the real function finds what it would have found.
  if (real::cudaPeekAtLastError() != cudaSuccess) {
    counters(device).passed_through.fetch_add(1, std::memory_order_relaxed);
    try {
      allocator->empty_cache();
    } catch (const std::exception&) {  // nothing to give back then
    }
    return nullptr;
  }
  try {
    void* ptr = allocator->allocate(size, stream_key);
    counters(device).requests.fetch_add(1, std::memory_order_relaxed);
    return ptr;
  } catch (const std::exception&) {  // OutOfMemoryError, cudacache::Error, std::bad_alloc
    counters(device).passed_through.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
}

FreeResult free_synchronized(void* ptr) {
  const int device = segment_device(ptr);
  if (device < 0) return {FreeOutcome::kNotOurs, cudaSuccess};
  DeviceAllocator* allocator = existing_allocator(device);
  if (allocator == nullptr) return {FreeOutcome::kInvalidPointer, cudaSuccess};
  const cudaError_t synchronized = synchronize_device(device);
  FreeResult result = deallocate(*allocator, ptr, device);
  if (result.outcome == FreeOutcome::kFreed) result.error = synchronized;
  return result;
}

FreeResult free_stream_ordered(void* ptr, cudaStream_t stream_key) {
  const int device = segment_device(ptr);
  if (device < 0) return {FreeOutcome::kNotOurs, cudaSuccess};
  DeviceAllocator* allocator = existing_allocator(device);
  if (allocator == nullptr) return {FreeOutcome::kInvalidPointer, cudaSuccess};
  // The default streams named by their handles are the current device's: a block of another
  // device cannot wait for one by an event (the allocator records its events on the block's
  // device, on that device's stream of the handle), so the free waits for it on the host
  // (found in review: a per-thread free from another device went back to the pool at once).
  bool wait_for_stream = false;
  if (stream_key == cudaStreamPerThread || stream_key == cudaStreamLegacy) {
    int current = -1;
    wait_for_stream = real::cudaGetDevice(&current) != cudaSuccess || current != device;
  }
  if (!wait_for_stream) {
    try {
      // The block stays out of the pool until an event on the freeing stream completes: on a
      // per-thread default stream, the freeing thread's own (Note [Per-thread streams]).
      if (!allocator->record_stream_if_owned(ptr, stream_key)) {
        return {FreeOutcome::kInvalidPointer, cudaSuccess};
      }
    } catch (const std::exception&) {  // a stream it cannot record on (another device)
      wait_for_stream = true;
    }
  }
  if (wait_for_stream) {
    const cudaError_t error = real::cudaStreamSynchronize(stream_key);
    if (error != cudaSuccess) return {FreeOutcome::kFailed, error};
  }
  return deallocate(*allocator, ptr, device);
}

}  // namespace cudacache::preload
