// The *_ptsz / *_ptds names that CUDA_API_PER_THREAD_DEFAULT_STREAM (nvcc --default-stream
// per-thread) makes programs call instead of the plain ones. In them a NULL stream means the
// calling thread's default stream. This file is compiled with that macro defined, so
// cuda_runtime_api.h declares exactly these names and the compiler checks every signature.
#ifndef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error "per_thread.cpp must be compiled with CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include "api.h"

using namespace cudasim;

namespace {
constexpr DefaultStream kMode = DefaultStream::PerThread;
}  // namespace

extern "C" {

cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  return memcpy_async(dst, src, count, kind, nullptr, kMode, true);
}

cudaError_t cudaMemset_ptds(void* devPtr, int value, size_t count) {
  return memset_async(devPtr, value, count, nullptr, kMode, true);
}

cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                 cudaStream_t stream) {
  return memcpy_async(dst, src, count, kind, stream, kMode, false);
}

cudaError_t cudaMemsetAsync_ptsz(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return memset_async(devPtr, value, count, stream, kMode, false);
}

cudaError_t cudaMallocAsync_ptsz(void** devPtr, size_t size, cudaStream_t hStream) {
  return malloc_async(devPtr, size, hStream, kMode);
}

cudaError_t cudaFreeAsync_ptsz(void* devPtr, cudaStream_t hStream) {
  return free_async(devPtr, hStream, kMode);
}

cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream) { return stream_query(stream, kMode); }

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream) {
  return stream_synchronize(stream, kMode);
}

cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int* flags) {
  return stream_get_flags(hStream, flags, kMode);
}

cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int* priority) {
  return stream_get_priority(hStream, priority, kMode);
}

cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int* device) {
  return stream_get_device(hStream, device, kMode);
}

cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  return stream_wait_event(stream, event, flags, kMode);
}

cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream) {
  return event_record(event, stream, 0, kMode);
}

cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream,
                                          unsigned int flags) {
  return event_record(event, stream, flags, kMode);
}

cudaError_t cudaGetDriverEntryPoint_ptsz(const char* symbol, void** funcPtr,
                                         unsigned long long flags,
                                         cudaDriverEntryPointQueryResult* driverStatus) {
  return driver_entry_point(symbol, funcPtr, kRuntimeVersion, flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char* symbol, void** funcPtr,
                                                  unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  cudaDriverEntryPointQueryResult* driverStatus) {
  return driver_entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}

cudaError_t cudaLaunchKernel_ptsz(const void*, dim3, dim3, void**, size_t, cudaStream_t) {
  return launch_not_supported();
}

}  // extern "C"
