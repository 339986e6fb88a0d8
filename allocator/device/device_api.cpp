#include "device_api.h"

#include "vmm_api.h"

namespace cudacache::device_api {
namespace {

// A failed runtime call also sets the runtime's last error, which the application would find
// at its next cudaGetLastError. Every call made here hands its error to the caller instead and
// leaves nothing behind.
cudaError_t cleared(cudaError_t error) {
  if (error != cudaSuccess) cudaGetLastError();
  return error;
}

// Makes `device` current and restores the previous device at scope exit. Costs one
// cudaGetDevice when the device is already current.
//
// cudaSetDevice makes a device's primary context current, in place of any context the thread
// had made current itself (cuCtxCreate, cuCtxSetCurrent, as driver-API programs and libraries
// do). So a switch notes the thread's context first and switches back by making that context
// current again (what cudaSetDevice does with the primary one): a free of another device's
// block must not leave the caller in another context than its own, nor initialize a primary
// context the thread never used. cudaSetDevice back only when no context was current, or it
// cannot be made current again (destroyed meanwhile).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cleared(cudaGetDevice(&previous_)) != cudaSuccess || previous_ == device) return;
    context_ = vmm_api::current_context();
    if (cleared(cudaSetDevice(device)) == cudaSuccess) switched_ = true;
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (!switched_) return;
    if (context_ != nullptr && vmm_api::make_context_current(context_)) return;
    cleared(cudaSetDevice(previous_));
  }

 private:
  int previous_ = 0;
  void* context_ = nullptr;  // the thread's context before the switch, if any
  bool switched_ = false;
};

}  // namespace

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;  // 34, 35 and 100 all mean "no GPU"
  }
  return count;
}

cudaError_t device_count(int* count) {
  *count = 0;
  const cudaError_t error = cudaGetDeviceCount(count);
  if (error == cudaSuccess) return cudaSuccess;
  cudaGetLastError();
  *count = 0;
  const bool no_gpu = error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver ||
                      error == cudaErrorStubLibrary;
  return no_gpu ? cudaSuccess : error;
}

cudaError_t current_device(int* device) { return cleared(cudaGetDevice(device)); }

cudaError_t stream_device(cudaStream_t stream, int* device) {
  return cleared(cudaStreamGetDevice(stream, device));
}

cudaError_t malloc_memory(int device, void** ptr, std::size_t bytes) {
  DeviceGuard guard(device);
  const cudaError_t error = cleared(cudaMalloc(ptr, bytes));
  if (error != cudaSuccess) *ptr = nullptr;
  return error;
}

cudaError_t free_memory(int device, void* ptr) {
  DeviceGuard guard(device);
  return cleared(cudaFree(ptr));
}

cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  DeviceGuard guard(device);
  return cleared(cudaMemGetInfo(free_bytes, total_bytes));
}

cudaError_t total_memory(int device, std::size_t* total_bytes) {
  cudaDeviceProp properties{};
  const cudaError_t error = cleared(cudaGetDeviceProperties(&properties, device));
  if (error == cudaSuccess) *total_bytes = properties.totalGlobalMem;
  return error;
}

cudaError_t synchronize(int device) {
  DeviceGuard guard(device);
  return cleared(cudaDeviceSynchronize());
}

cudaError_t synchronize_stream(int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  cudaError_t error = cleared(cudaStreamSynchronize(stream));
  if (error != cudaSuccess) {
    // The stream may be gone (destroyed by the application after its last free): waiting for
    // the whole device is then the safe equivalent.
    error = cleared(cudaDeviceSynchronize());
  }
  return error;
}

cudaError_t create_event(int device, cudaEvent_t* event) {
  DeviceGuard guard(device);
  return cleared(cudaEventCreateWithFlags(event, cudaEventDisableTiming));
}

cudaError_t record_event(int device, cudaEvent_t event, cudaStream_t stream) {
  DeviceGuard guard(device);
  return cleared(cudaEventRecord(event, stream));
}

cudaError_t query_event(cudaEvent_t event) {
  return cleared(cudaEventQuery(event));  // cudaErrorNotReady included
}

cudaError_t synchronize_event(cudaEvent_t event) { return cleared(cudaEventSynchronize(event)); }

cudaError_t destroy_event(cudaEvent_t event) { return cleared(cudaEventDestroy(event)); }

const char* error_string(cudaError_t error) { return cudaGetErrorString(error); }

}  // namespace cudacache::device_api
