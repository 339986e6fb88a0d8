// The device seam: the only code in cudacache that calls the CUDA runtime.
//
// Contract, for every function here:
// - `device` is a valid ordinal; the function makes it current for the duration of the call
//   and restores the caller's current device.
// - The return value is the runtime's cudaError_t. A failed allocation returns
//   cudaErrorMemoryAllocation and leaves no sticky "last error" behind (it is cleared).
// - No function throws and none allocates host memory.
// Nothing else in cudacache includes <cuda_runtime_api.h> for anything but types.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace cudacache::device_api {

int device_count();  // 0 when no driver or no GPU (any error)
// The device count, 0 when there is no driver or no GPU (cudaErrorNoDevice,
// cudaErrorInsufficientDriver, cudaErrorStubLibrary); any other failure is returned, not taken
// for "no GPU".
cudaError_t device_count(int* count);
cudaError_t current_device(int* device);
cudaError_t stream_device(cudaStream_t stream, int* device);

cudaError_t malloc_memory(int device, void** ptr, std::size_t bytes);
cudaError_t free_memory(int device, void* ptr);
cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes);
// The device's memory size from its properties (cudaGetDeviceProperties), as PyTorch sizes an
// expandable range: no cudaMemGetInfo round trip.
cudaError_t total_memory(int device, std::size_t* total_bytes);
cudaError_t synchronize(int device);
// Waits for `stream`; for the whole device when the stream cannot be synchronized (destroyed).
cudaError_t synchronize_stream(int device, cudaStream_t stream);

cudaError_t create_event(int device, cudaEvent_t* event);  // timing disabled
cudaError_t record_event(int device, cudaEvent_t event, cudaStream_t stream);
// cudaSuccess when complete, cudaErrorNotReady when pending (not an error: cleared).
cudaError_t query_event(cudaEvent_t event);
cudaError_t synchronize_event(cudaEvent_t event);
cudaError_t destroy_event(cudaEvent_t event);

const char* error_string(cudaError_t error);

}  // namespace cudacache::device_api
