#include "device_api.h"

namespace cudacache::device_api {
namespace {

// Makes `device` current and restores the previous device at scope exit. Costs one
// cudaGetDevice when the device is already current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ != device &&
        cudaSetDevice(device) == cudaSuccess) {
      switched_ = true;
    }
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
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

cudaError_t current_device(int* device) { return cudaGetDevice(device); }

cudaError_t stream_device(cudaStream_t stream, int* device) {
  const cudaError_t error = cudaStreamGetDevice(stream, device);
  if (error != cudaSuccess) cudaGetLastError();
  return error;
}

cudaError_t malloc_memory(int device, void** ptr, std::size_t bytes) {
  DeviceGuard guard(device);
  const cudaError_t error = cudaMalloc(ptr, bytes);
  if (error != cudaSuccess) {
    cudaGetLastError();  // callers retry; a stale error must not leak to the application
    *ptr = nullptr;
  }
  return error;
}

cudaError_t free_memory(int device, void* ptr) {
  DeviceGuard guard(device);
  return cudaFree(ptr);
}

cudaError_t memory_info(int device, std::size_t* free_bytes, std::size_t* total_bytes) {
  DeviceGuard guard(device);
  return cudaMemGetInfo(free_bytes, total_bytes);
}

cudaError_t synchronize(int device) {
  DeviceGuard guard(device);
  return cudaDeviceSynchronize();
}

cudaError_t synchronize_stream(int device, cudaStream_t stream) {
  DeviceGuard guard(device);
  cudaError_t error = cudaStreamSynchronize(stream);
  if (error != cudaSuccess) {
    // The stream may be gone (destroyed by the application after its last free): waiting for
    // the whole device is then the safe equivalent.
    cudaGetLastError();
    error = cudaDeviceSynchronize();
  }
  return error;
}

cudaError_t create_event(int device, cudaEvent_t* event) {
  DeviceGuard guard(device);
  return cudaEventCreateWithFlags(event, cudaEventDisableTiming);
}

cudaError_t record_event(int device, cudaEvent_t event, cudaStream_t stream) {
  DeviceGuard guard(device);
  return cudaEventRecord(event, stream);
}

cudaError_t query_event(cudaEvent_t event) {
  const cudaError_t error = cudaEventQuery(event);
  if (error == cudaErrorNotReady) cudaGetLastError();
  return error;
}

cudaError_t synchronize_event(cudaEvent_t event) { return cudaEventSynchronize(event); }

cudaError_t destroy_event(cudaEvent_t event) { return cudaEventDestroy(event); }

const char* error_string(cudaError_t error) { return cudaGetErrorString(error); }

}  // namespace cudacache::device_api
