// The interposed runtime API: cudaMalloc, cudaFree, cudaMallocAsync, cudaFreeAsync (and their
// _ptsz names), cudaMemGetInfo, cudaDeviceReset.
//
// Whatever cudacache does not serve goes to the real function with the caller's arguments,
// so invalid arguments (a NULL devPtr, an unknown pointer, a bad stream) get the real
// runtime's error codes and last-error behaviour. cudaFree(NULL), which programs use to create
// the context, is forwarded too.
//
// Note [Out of memory]: when the allocator fails after its whole retry ladder (it has
// released every cached block it could), the request goes to the real runtime. Either it
// succeeds, because the program asked for less than the segment cudacache wanted, and the
// memory is passed through from then on; or it fails and the runtime itself records
// cudaErrorMemoryAllocation as the thread's last error: cudaGetLastError and
// cudaPeekAtLastError then behave exactly as they would without cudacache.
#include "runtime_hooks.h"

#include <algorithm>
#include <cstring>

#include "cached_memory.h"
#include "device_caches.h"
#include "export.h"
#include "real_runtime.h"
#include "reentrancy.h"
#include "segment_table.h"

namespace cudacache::preload {
namespace {

int current_device() {
  int device = -1;
  return real::cudaGetDevice(&device) == cudaSuccess ? device : -1;
}

// Whether an allocation on the stream of `stream_key` goes to the real runtime because the
// stream is being captured (Note [Stream capture]). False while the program leaves an error
// unread, which allocate_cached passes through anyway (Note [Pending errors]); a stream the
// query refuses goes to the real function too, which reports what is wrong with it.
bool capturing(cudaStream_t stream_key) {
  if (real::cudaPeekAtLastError() != cudaSuccess) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (real::cudaStreamIsCapturing(stream_key, &status) != cudaSuccess) {
    real::cudaGetLastError();  // the query's own error: none was pending before it
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

// What a stream-ordered free of a cached block on the stream of `stream_key` must return
// before anything is freed: cudaErrorStreamCaptureUnsupported while the stream is being
// captured (Note [Stream capture]), the query's own error when it fails (on the legacy stream
// while another stream captures in global mode, cudaErrorStreamCaptureImplicit, which the
// runtime records as the thread's last error, as the real free's would be), else cudaSuccess.
// Asked whatever error the program left unread: a query that succeeds leaves it alone (found
// in review: skipping the query then freed captured blocks into the cache again).
cudaError_t capture_refusal(cudaStream_t stream_key) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (const cudaError_t error = real::cudaStreamIsCapturing(stream_key, &status);
      error != cudaSuccess) {
    return error;
  }
  return status == cudaStreamCaptureStatusNone ? cudaSuccess : cudaErrorStreamCaptureUnsupported;
}

template <typename Forward>
cudaError_t allocate(void** ptr, std::size_t size, cudaStream_t stream_key, bool stream_ordered,
                     Forward forward) {
  if (inside_cudacache()) return forward();
  const InsideCudacache inside;
  if (ptr == nullptr || size == 0) return forward();
  if (stream_ordered && capturing(stream_key)) return forward();
  void* cached = allocate_cached(current_device(), size, stream_key);
  if (cached == nullptr) return forward();
  *ptr = cached;
  return cudaSuccess;
}

template <typename Forward>
cudaError_t finish_free(FreeResult result, Forward forward) {
  switch (result.outcome) {
    case FreeOutcome::kNotOurs: return forward();
    case FreeOutcome::kInvalidPointer:
      return real::record_invalid_free();  // Note [Never pass our memory on]
    case FreeOutcome::kFreed:
    case FreeOutcome::kFailed: break;
  }
  return result.error;
}

template <typename Forward>
cudaError_t free_async(void* ptr, cudaStream_t stream, bool per_thread, Forward forward) {
  if (inside_cudacache() || ptr == nullptr) return forward();
  const InsideCudacache inside;
  const cudaStream_t stream_key = async_stream_key(stream, per_thread);
  if (segment_device(ptr) >= 0) {
    if (const cudaError_t refused = capture_refusal(stream_key); refused != cudaSuccess) {
      return refused;  // nothing freed
    }
  }
  return finish_free(free_stream_ordered(ptr, stream_key), forward);
}

}  // namespace
}  // namespace cudacache::preload

namespace preload = cudacache::preload;
namespace real = cudacache::preload::real;

CUDACACHE_PRELOAD_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return preload::allocate(devPtr, size, nullptr, false,
                           [&] { return real::cudaMalloc(devPtr, size); });
}

CUDACACHE_PRELOAD_EXPORT cudaError_t cudaFree(void* devPtr) {
  if (preload::inside_cudacache() || devPtr == nullptr) return real::cudaFree(devPtr);
  const preload::InsideCudacache inside;
  return preload::finish_free(preload::free_synchronized(devPtr),
                              [&] { return real::cudaFree(devPtr); });
}

CUDACACHE_PRELOAD_EXPORT cudaError_t cudaMallocAsync(void** devPtr, size_t size,
                                                     cudaStream_t hStream) {
  return preload::allocate(devPtr, size, preload::async_stream_key(hStream, false), true,
                           [&] { return real::cudaMallocAsync(devPtr, size, hStream); });
}

CUDACACHE_PRELOAD_EXPORT cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size,
                                                          cudaStream_t hStream) {
  return preload::allocate(devPtr, size, preload::async_stream_key(hStream, true), true,
                           [&] { return real::cudaMallocAsync_ptsz(devPtr, size, hStream); });
}

CUDACACHE_PRELOAD_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t hStream) {
  return preload::free_async(devPtr, hStream, false,
                             [&] { return real::cudaFreeAsync(devPtr, hStream); });
}

CUDACACHE_PRELOAD_EXPORT cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return preload::free_async(devPtr, hStream, true,
                             [&] { return real::cudaFreeAsync_ptsz(devPtr, hStream); });
}

// Memory held in the cache that the cache can give back counts as free: programs that size
// themselves from cudaMemGetInfo would otherwise shrink, or fail, by the size of the cache.
// Not the free part of a segment or page that also holds a live block: counted until
// 2026-12-05, it made a program that asked for all the free memory it was told of fail.
CUDACACHE_PRELOAD_EXPORT cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const cudaError_t error = real::cudaMemGetInfo(free, total);
  if (error != cudaSuccess || preload::inside_cudacache()) return error;
  const preload::InsideCudacache inside;
  const cudacache::DeviceAllocator* allocator =
      preload::existing_allocator(preload::current_device());
  if (allocator == nullptr) return error;
  *free = std::min(*total, *free + allocator->releasable_bytes());
  return error;
}

// Everything cudacache holds for the device goes back first: the reset would free it under
// the cache otherwise.
CUDACACHE_PRELOAD_EXPORT cudaError_t cudaDeviceReset(void) {
  if (!preload::inside_cudacache()) {
    const preload::InsideCudacache inside;
    preload::release_device(preload::current_device());
  }
  return real::cudaDeviceReset();
}

namespace cudacache::preload {

// Here, next to the definitions: elsewhere `&::cudaMalloc` is an undefined reference, which
// --wrap would turn into __wrap_cudaMalloc.
void* runtime_hook(const char* name) {
  struct Hook {
    const char* name;
    void* function;
  };
  static const Hook kHooks[] = {
      {"cudaMalloc", reinterpret_cast<void*>(&::cudaMalloc)},
      {"cudaFree", reinterpret_cast<void*>(&::cudaFree)},
      {"cudaMallocAsync", reinterpret_cast<void*>(&::cudaMallocAsync)},
      {"cudaFreeAsync", reinterpret_cast<void*>(&::cudaFreeAsync)},
      {"cudaMallocAsync_ptsz", reinterpret_cast<void*>(&::cudaMallocAsync_ptsz)},
      {"cudaFreeAsync_ptsz", reinterpret_cast<void*>(&::cudaFreeAsync_ptsz)},
      {"cudaMemGetInfo", reinterpret_cast<void*>(&::cudaMemGetInfo)},
      {"cudaDeviceReset", reinterpret_cast<void*>(&::cudaDeviceReset)},
  };
  for (const Hook& hook : kHooks) {
    if (std::strcmp(name, hook.name) == 0) return hook.function;
  }
  return nullptr;
}

}  // namespace cudacache::preload
