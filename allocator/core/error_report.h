// How cudacache reports an error, in one place (scudo's report.h and RMM's error.hpp are the
// models): one function per kind, each logs the message once at error level and throws the
// typed Error (cudacache.hpp) carrying it. Out of memory is not here: it is an expected outcome
// (logged at warn, OutOfMemoryError with its report; DeviceAllocator::allocate).
//
// Messages start with "cudacache: " (configuration errors with "cudacache config: ").
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace cudacache::report {

// Bad input from the caller: sizes, NULL pointers, handles (CUDACACHE_INVALID_ARGUMENT).
[[noreturn]] void invalid_argument(const std::string& message);
// A device ordinal outside [0, device_count) (CUDACACHE_INVALID_DEVICE).
[[noreturn]] void invalid_device(int device, int device_count);
// Any other device mismatch, e.g. a stream of another device (CUDACACHE_INVALID_DEVICE).
[[noreturn]] void wrong_device(const std::string& message);
// A pointer cudacache did not allocate, or already freed (CUDACACHE_UNKNOWN_POINTER).
[[noreturn]] void unknown_pointer(const std::string& message);
// A bad configuration string or a late configure (CUDACACHE_CONFIG); `message` says what is
// wrong, the valid keys are appended.
[[noreturn]] void config(const std::string& message);
// configure() after the options were fixed at first use (`options`: the options in force).
[[noreturn]] void config_after_first_use(const std::string& options);
// A configure() string that is valid alone but not after what was configured before it
// (CUDACACHE_CONFIG); `message` names both and ends with the error of the two together.
[[noreturn]] void config_conflict(const std::string& message);
// A CUDA call that failed other than by running out of memory (CUDACACHE_CUDA_ERROR):
// "cudacache: <call> on device <device> failed: <CUDA's text>" (no device part for device < 0).
[[noreturn]] void cuda_error(const std::string& call, int device, cudaError_t error);

// A pointer as error messages print it ("0x7f..."; "(nil)" for null).
std::string pointer_text(const void* ptr);

}  // namespace cudacache::report
