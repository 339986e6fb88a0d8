// The real CUDA driver functions the preload interposes or needs, one slot per exported name.
//
// A slot is filled by whoever sees the real function first: the dlsym hook (the runtime
// looked libcuda's function up by name), the cuGetProcAddress hooks (it asked the driver), or
// on first use dlsym(RTLD_NEXT) and then libcuda.so.1 if it is loaded. Pointers into this
// library are never taken as real.
#pragma once

#include <cuda.h>

namespace cudacache::preload::driver {

enum Function : int {
  kGetProcAddress,    // cuGetProcAddress (CUDA 11.3 signature, no status)
  kGetProcAddressV2,  // cuGetProcAddress_v2
  kMemAlloc,          // cuMemAlloc_v2
  kMemFree,           // cuMemFree_v2
  kMemAllocAsync,
  kMemAllocAsyncPtsz,
  kMemFreeAsync,
  kMemFreeAsyncPtsz,
  kCtxGetCurrent,
  kCtxGetDevice,
  kDevicePrimaryCtxRetain,
  kDevicePrimaryCtxRelease,  // _v2
  kDevicePrimaryCtxGetState,
  kStreamIsCapturing,
  kFunctionCount
};

const char* exported_name(Function function);
void* find(Function function);  // nullptr when the driver does not have it
void seed(Function function, void* address);

// The device whose primary context is current on this thread, or -1. cudacache allocates
// through the runtime, that is in primary contexts; memory for another context is left to the
// driver.
int primary_context_device();

// True unless CUDACACHE_PRELOAD_DRIVER=0 (a way out if a driver-level hook misbehaves).
bool hooks_enabled();

}  // namespace cudacache::preload::driver
