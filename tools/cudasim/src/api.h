// Implementations behind the runtime functions that CUDA_API_PER_THREAD_DEFAULT_STREAM renames
// to *_ptsz / *_ptds. `mode` says what a NULL stream handle means: the legacy default stream
// for the plain names, the calling thread's default stream for the renamed ones.
#pragma once

#include "state.h"

namespace cudasim {

cudaError_t memcpy_async(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                         cudaStream_t stream, DefaultStream mode, bool wait);
cudaError_t memset_async(void* dst, int value, size_t count, cudaStream_t stream,
                         DefaultStream mode, bool wait);
cudaError_t malloc_async(void** ptr, size_t size, cudaStream_t stream, DefaultStream mode);
cudaError_t free_async(void* ptr, cudaStream_t stream, DefaultStream mode);

cudaError_t stream_query(cudaStream_t stream, DefaultStream mode);
cudaError_t stream_synchronize(cudaStream_t stream, DefaultStream mode);
cudaError_t stream_get_flags(cudaStream_t stream, unsigned int* flags, DefaultStream mode);
cudaError_t stream_get_priority(cudaStream_t stream, int* priority, DefaultStream mode);
cudaError_t stream_get_device(cudaStream_t stream, int* device, DefaultStream mode);

cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags,
                              DefaultStream mode);
cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned int flags,
                         DefaultStream mode);

// The driver functions cudasim provides, by name, as cuGetProcAddress finds them. Logs a miss
// to stderr under CUDASIM_VERBOSE=1.
enum class DriverLookup { Found, NotFound, VersionTooLow };
DriverLookup lookup_driver_symbol(const char* symbol, int cuda_version, void** function);

cudaError_t driver_entry_point(const char* symbol, void** function, int cuda_version,
                               unsigned long long flags, cudaDriverEntryPointQueryResult* status);

cudaError_t launch_not_supported();

}  // namespace cudasim
