// The DeviceAllocator allocates through the CUDA runtime (cudaMalloc), also for requests that
// arrive here. In a program on the static runtime no libcudart.so is loaded, so the preload
// opens libcudart.so.13 privately (real_runtime.h); its cudaMalloc works in the device's
// primary context, the one the static runtime uses too, which is why only requests made in a
// primary context are served (driver::primary_context_device). The private runtime reaches the
// driver through our hooks again; the reentrancy guard sends those calls straight to the driver.
#include "driver_hooks.h"

#include <cstring>

#include "cached_memory.h"
#include "device_caches.h"
#include "export.h"
#include "log.h"
#include "real_driver.h"
#include "reentrancy.h"
#include "segment_table.h"

namespace cudacache::preload {
namespace {

using driver::Function;

template <typename Signature>
Signature* real_function(Function function) {
  return reinterpret_cast<Signature*>(driver::find(function));
}

template <typename Signature, typename... Args>
CUresult forward(Function function, Args... args) {
  Signature* real = real_function<Signature>(function);
  return real != nullptr ? real(args...) : CUDA_ERROR_NOT_FOUND;
}

bool serving() { return !inside_cudacache() && driver::hooks_enabled(); }

// The capture status of the stream of `stream_key` (a handle, or CU_STREAM_LEGACY /
// CU_STREAM_PER_THREAD): Note [Stream capture] in runtime_hooks.cpp. CUDA_SUCCESS with
// *capturing set, or the query's own error; a driver without the query (before CUDA 10)
// captures nothing.
CUresult capture_status(cudaStream_t stream_key, bool* capturing) {
  using IsCapturing = CUresult(CUstream, CUstreamCaptureStatus*);
  *capturing = false;
  IsCapturing* query = real_function<IsCapturing>(driver::kStreamIsCapturing);
  if (query == nullptr) return CUDA_SUCCESS;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (const CUresult error = query(reinterpret_cast<CUstream>(stream_key), &status);
      error != CUDA_SUCCESS) {
    return error;
  }
  *capturing = status != CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

CUresult allocate(Function real, CUdeviceptr* dptr, size_t bytesize, cudaStream_t stream_key,
                  CUstream stream) {
  using Alloc = CUresult(CUdeviceptr*, size_t);
  using AllocAsync = CUresult(CUdeviceptr*, size_t, CUstream);
  const bool async = real != driver::kMemAlloc;
  auto pass = [&] {
    return async ? forward<AllocAsync>(real, dptr, bytesize, stream)
                 : forward<Alloc>(real, dptr, bytesize);
  };
  if (!serving() || dptr == nullptr || bytesize == 0) return pass();
  const InsideCudacache inside;
  if (async) {  // on a stream being captured, or one the query refuses: the driver's to answer
    bool capturing = false;
    if (capture_status(stream_key, &capturing) != CUDA_SUCCESS || capturing) return pass();
  }
  const int device = driver::primary_context_device();
  void* cached = device >= 0 ? allocate_cached(device, bytesize, stream_key) : nullptr;
  if (cached == nullptr) return pass();
  *dptr = reinterpret_cast<CUdeviceptr>(cached);
  return CUDA_SUCCESS;
}

// A runtime error of a free as the driver's: the codes a free can meet share their numbers in
// the two APIs (2, out of memory; 400, an invalid handle; 700-719, errors of the device's
// work; 900, capture), where a fixed code hid what went wrong (found in review). Runtime-only
// codes are CUDA_ERROR_UNKNOWN.
CUresult as_driver_error(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return CUDA_SUCCESS;
    case cudaErrorMemoryAllocation: return CUDA_ERROR_OUT_OF_MEMORY;
    case cudaErrorInvalidValue: return CUDA_ERROR_INVALID_VALUE;
    case cudaErrorInvalidResourceHandle: return CUDA_ERROR_INVALID_HANDLE;
    case cudaErrorStreamCaptureUnsupported: return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    case cudaErrorStreamCaptureImplicit: return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    default: break;
  }
  const int code = static_cast<int>(error);
  return code >= 700 && code <= 719 ? static_cast<CUresult>(code) : CUDA_ERROR_UNKNOWN;
}

template <typename Pass>
CUresult finish_free(FreeResult result, Pass pass) {
  switch (result.outcome) {
    case FreeOutcome::kNotOurs: return pass();
    case FreeOutcome::kInvalidPointer:
      return CUDA_ERROR_INVALID_VALUE;  // Note [Never pass our memory on]
    case FreeOutcome::kFailed:
    case FreeOutcome::kFreed: break;
  }
  return as_driver_error(result.error);
}

CUresult free_memory(Function real, CUdeviceptr dptr, CUstream stream, bool per_thread) {
  using Free = CUresult(CUdeviceptr);
  using FreeAsync = CUresult(CUdeviceptr, CUstream);
  const bool async = real != driver::kMemFree;
  auto pass = [&] {
    return async ? forward<FreeAsync>(real, dptr, stream) : forward<Free>(real, dptr);
  };
  if (!serving() || dptr == 0) return pass();
  const InsideCudacache inside;
  void* ptr = reinterpret_cast<void*>(dptr);
  const cudaStream_t stream_key = async_stream_key(stream, per_thread);
  if (async && segment_device(ptr) >= 0) {  // Note [Stream capture] in runtime_hooks.cpp
    bool capturing = false;
    if (const CUresult error = capture_status(stream_key, &capturing); error != CUDA_SUCCESS) {
      return error;
    }
    if (capturing) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return finish_free(async ? free_stream_ordered(ptr, stream_key) : free_synchronized(ptr), pass);
}

void* hook_of(Function function);

// Our hook in place of `found` when `function` is one we interpose; the real one is kept.
void* use_hook(Function function, void* found) {
  if (found == nullptr || !driver::hooks_enabled()) return found;
  driver::seed(function, found);
  logger().debug("preload: the driver's {} is served by cudacache",
                 driver::exported_name(function));
  return hook_of(function);
}

// cuGetProcAddress answers by base name; which variant it returned depends on the version
// and flags asked for, as in the driver: cuMemAlloc below 3.2 is the 32-bit original.
void* substitute_by_base_name(const char* symbol, void* found, int version, cuuint64_t flags) {
  if (symbol == nullptr || found == nullptr) return found;
  const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  if (std::strcmp(symbol, "cuGetProcAddress") == 0) {
    return use_hook(version >= 12000 ? driver::kGetProcAddressV2 : driver::kGetProcAddress, found);
  }
  if (std::strcmp(symbol, "cuMemAlloc") == 0 && version >= 3020) {
    return use_hook(driver::kMemAlloc, found);
  }
  if (std::strcmp(symbol, "cuMemFree") == 0 && version >= 3020) {
    return use_hook(driver::kMemFree, found);
  }
  if (std::strcmp(symbol, "cuMemAllocAsync") == 0) {
    return use_hook(per_thread ? driver::kMemAllocAsyncPtsz : driver::kMemAllocAsync, found);
  }
  if (std::strcmp(symbol, "cuMemFreeAsync") == 0) {
    return use_hook(per_thread ? driver::kMemFreeAsyncPtsz : driver::kMemFreeAsync, found);
  }
  return found;
}

}  // namespace

void* substitute_driver_export(const char* name, void* found) {
  for (int i = driver::kGetProcAddress; i <= driver::kMemFreeAsyncPtsz; ++i) {
    const auto function = static_cast<Function>(i);
    if (std::strcmp(name, driver::exported_name(function)) == 0) return use_hook(function, found);
  }
  return found;
}

}  // namespace cudacache::preload

namespace preload = cudacache::preload;
namespace driver = cudacache::preload::driver;

CUDACACHE_PRELOAD_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                   cuuint64_t flags) {
  using Get = CUresult(const char*, void**, int, cuuint64_t);
  const CUresult result =
      preload::forward<Get>(driver::kGetProcAddress, symbol, pfn, cudaVersion, flags);
  if (result == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = preload::substitute_by_base_name(symbol, *pfn, cudaVersion, flags);
  }
  return result;
}

CUDACACHE_PRELOAD_EXPORT CUresult
cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                    CUdriverProcAddressQueryResult* symbolStatus) {
  using Get = CUresult(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  const CUresult result = preload::forward<Get>(driver::kGetProcAddressV2, symbol, pfn, cudaVersion,
                                                flags, symbolStatus);
  if (result == CUDA_SUCCESS && pfn != nullptr) {
    *pfn = preload::substitute_by_base_name(symbol, *pfn, cudaVersion, flags);
  }
  return result;
}

CUDACACHE_PRELOAD_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return preload::allocate(driver::kMemAlloc, dptr, bytesize, nullptr, nullptr);
}

CUDACACHE_PRELOAD_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  return preload::free_memory(driver::kMemFree, dptr, nullptr, false);
}

CUDACACHE_PRELOAD_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                  CUstream hStream) {
  return preload::allocate(driver::kMemAllocAsync, dptr, bytesize,
                           preload::async_stream_key(hStream, false), hStream);
}

CUDACACHE_PRELOAD_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize,
                                                       CUstream hStream) {
  return preload::allocate(driver::kMemAllocAsyncPtsz, dptr, bytesize,
                           preload::async_stream_key(hStream, true), hStream);
}

CUDACACHE_PRELOAD_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return preload::free_memory(driver::kMemFreeAsync, dptr, hStream, false);
}

CUDACACHE_PRELOAD_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return preload::free_memory(driver::kMemFreeAsyncPtsz, dptr, hStream, true);
}

namespace cudacache::preload {
namespace {

void* hook_of(Function function) {
  switch (function) {
    case driver::kGetProcAddress: return reinterpret_cast<void*>(&::cuGetProcAddress);
    case driver::kGetProcAddressV2: return reinterpret_cast<void*>(&::cuGetProcAddress_v2);
    case driver::kMemAlloc: return reinterpret_cast<void*>(&::cuMemAlloc_v2);
    case driver::kMemFree: return reinterpret_cast<void*>(&::cuMemFree_v2);
    case driver::kMemAllocAsync: return reinterpret_cast<void*>(&::cuMemAllocAsync);
    case driver::kMemAllocAsyncPtsz: return reinterpret_cast<void*>(&::cuMemAllocAsync_ptsz);
    case driver::kMemFreeAsync: return reinterpret_cast<void*>(&::cuMemFreeAsync);
    case driver::kMemFreeAsyncPtsz: return reinterpret_cast<void*>(&::cuMemFreeAsync_ptsz);
    default: return nullptr;
  }
}

}  // namespace
}  // namespace cudacache::preload
