// What an interposed allocation or free does, shared by the runtime hooks (cudaMalloc ...)
// and the driver hooks (cuMemAlloc_v2 ...). Each hook maps the outcome to its own API.
//
// Note [Free synchronizes]: cudaFree and cuMemFree synchronize the device before they return,
// and programs rely on it: a kernel still running on any stream may use the memory until
// then. A cached block can be handed out again at once, so a synchronous free first
// synchronizes the block's device, exactly the guarantee the program had. This costs what
// the real free cost in waiting and saves the free and the next allocation.
//
// Note [Stream keys]: the allocator reuses a block only for requests on the block's stream.
// Plain cudaMalloc blocks are keyed by the null stream; cudaMallocAsync on the null stream by
// cudaStreamLegacy (or cudaStreamPerThread for the _ptsz variants), so that memory freed in
// stream order is never given to a plain cudaMalloc, whose memory must be idle.
//
// Note [Per-thread streams]: all threads' per-thread default streams share one key, but they
// are different streams. A block freed stream-ordered on a per-thread stream goes back once an
// event on the freeing thread's stream completes (the allocator records it there, Note
// [Per-thread default streams] in device_allocator.cpp), since another thread's stream may
// reuse it. Until 2026-12-07 such a free waited for the stream on the host instead (found in
// review: it stalled every such free, and could deadlock a program whose stream waited for
// the host). It still does for a block of another device than the current one, whose
// per-thread stream is not the one the program freed on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cudacache::preload {

cudaStream_t async_stream_key(cudaStream_t stream, bool per_thread);

// Pointer from the cache for `device`, or nullptr: the caller forwards the request to the real
// function (no cache for the device, a pending runtime error, or out of memory after the
// allocator's whole retry ladder; Note [Out of memory] in runtime_hooks.cpp).
void* allocate_cached(int device, std::size_t size, cudaStream_t stream_key);

enum class FreeOutcome {
  kNotOurs,         // forward to the real free
  kFreed,           // `error` is the synchronization's result
  kInvalidPointer,  // inside our memory but not a live allocation (double free)
  kFailed,          // waiting for the stream, or host memory, failed (`error`); nothing freed
};
struct FreeResult {
  FreeOutcome outcome;
  cudaError_t error;
};

FreeResult free_synchronized(void* ptr);  // Note [Free synchronizes]
FreeResult free_stream_ordered(void* ptr, cudaStream_t stream_key);

}  // namespace cudacache::preload
