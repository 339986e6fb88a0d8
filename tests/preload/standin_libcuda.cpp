// TEST DOUBLE: a stand-in libcuda.so.1 for the driver-level hooks. It is not a driver: it
// exports cuGetProcAddress_v2 (and the handful of functions the preload and the test ask it
// for), serves "device memory" from malloc and counts every call, so a test can see which
// allocations reached the driver and which cudacache served. Built with -Bsymbolic, like the
// real driver, whose cuGetProcAddress returns its own functions whatever else is loaded.
#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#undef cuGetProcAddress

namespace {

std::atomic<unsigned long> g_allocs{0};
std::atomic<unsigned long> g_frees{0};
std::atomic<unsigned long> g_lookups{0};
std::atomic<bool> g_private_context{false};
std::atomic<unsigned long> g_primary_retains{0};
std::atomic<bool> g_capturing{false};

int g_primary_context_storage = 0;
int g_private_context_storage = 0;
CUcontext primary() { return reinterpret_cast<CUcontext>(&g_primary_context_storage); }

}  // namespace

extern "C" {

struct cudacache_standin_counters {
  unsigned long mem_allocs;  // cuMemAlloc_v2 + cuMemAllocAsync calls that reached the stand-in
  unsigned long mem_frees;
  unsigned long lookups;          // cuGetProcAddress_v2 calls
  unsigned long primary_retains;  // cuDevicePrimaryCtxRetain calls
};

__attribute__((visibility("default"))) void cudacache_standin_get_counters(
    cudacache_standin_counters* out) {
  out->mem_allocs = g_allocs;
  out->mem_frees = g_frees;
  out->lookups = g_lookups;
  out->primary_retains = g_primary_retains;
}

// From now on the current context is not the device's primary context, and the primary context
// is inactive (a driver-API program that made its own context and never used the runtime).
__attribute__((visibility("default"))) void cudacache_standin_use_private_context(int on) {
  g_private_context = on != 0;
}

// From now on every stream reports that it is being captured (cuStreamIsCapturing).
__attribute__((visibility("default"))) void cudacache_standin_set_capturing(int on) {
  g_capturing = on != 0;
}

__attribute__((visibility("default"))) CUresult cuStreamIsCapturing(CUstream,
                                                                    CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *status = g_capturing ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  if (dptr == nullptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
  void* p = std::malloc(bytesize);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  ++g_allocs;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuMemFree_v2(CUdeviceptr dptr) {
  if (dptr == 0) return CUDA_ERROR_INVALID_VALUE;
  ++g_frees;
  std::free(reinterpret_cast<void*>(dptr));
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize,
                                                                CUstream) {
  return cuMemAlloc_v2(dptr, bytesize);
}

__attribute__((visibility("default"))) CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream) {
  return cuMemFree_v2(dptr);
}

__attribute__((visibility("default"))) CUresult cuCtxGetCurrent(CUcontext* pctx) {
  *pctx = g_private_context ? reinterpret_cast<CUcontext>(&g_private_context_storage) : primary();
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuCtxGetDevice(CUdevice* device) {
  *device = 0;
  return CUDA_SUCCESS;
}

// On a real driver, retaining an inactive primary context creates it, and releasing the last
// reference destroys it: counted, so that a test sees whether the preload does so.
__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx,
                                                                         CUdevice) {
  ++g_primary_retains;
  *pctx = primary();
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxGetState(CUdevice,
                                                                           unsigned int* flags,
                                                                           int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = 0;
  *active = g_private_context ? 0 : 1;
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) {
  return CUDA_SUCCESS;
}

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(
    const char* symbol, void** pfn, int, cuuint64_t, CUdriverProcAddressQueryResult* status) {
  ++g_lookups;
  struct Entry {
    const char* name;
    void* function;
  };
  const Entry entries[] = {
      {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
      {"cuMemAlloc", reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuMemFree", reinterpret_cast<void*>(&cuMemFree_v2)},
      {"cuMemAllocAsync", reinterpret_cast<void*>(&cuMemAllocAsync)},
      {"cuMemFreeAsync", reinterpret_cast<void*>(&cuMemFreeAsync)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&cuCtxGetCurrent)},
      {"cuCtxGetDevice", reinterpret_cast<void*>(&cuCtxGetDevice)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", reinterpret_cast<void*>(&cuDevicePrimaryCtxRelease_v2)},
      {"cuDevicePrimaryCtxGetState", reinterpret_cast<void*>(&cuDevicePrimaryCtxGetState)},
      {"cuStreamIsCapturing", reinterpret_cast<void*>(&cuStreamIsCapturing)},
  };
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (const Entry& e : entries) {
    if (std::strcmp(e.name, symbol) == 0) {
      *pfn = e.function;
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  *pfn = nullptr;
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
