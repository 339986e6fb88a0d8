// cudasim's libcuda.so.1: the driver library that programs dlopen (PyTorch does, at CUDA
// initialization and for expandable segments). It holds no state and no implementation: every
// function forwards to the driver function of the same name inside cudasim's libcudart.so.13,
// found once through cudaGetDriverEntryPointByVersion, so the runtime and the driver share one
// simulated device (one capacity, one set of counters, one VMM table).
//
// It links cudasim's libcudart.so.13 and references a cudasim control, so loading it next to
// NVIDIA's runtime fails at once ("undefined symbol: cudasim_get_counters") rather than mixing
// the two.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "cudasim.h"

namespace {

constexpr int kCudaVersion = 13000;

void* driver_function(const char* name) {
  // Taking the address makes the link (and the load) require cudasim's runtime.
  if (cudasim_get_counters == nullptr) {
    std::fputs("cudasim libcuda.so.1: the loaded libcudart.so.13 is not cudasim's\n", stderr);
    std::abort();
  }
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(name, &function, kCudaVersion, cudaEnableDefault, &status) !=
          cudaSuccess ||
      function == nullptr) {
    std::fprintf(stderr, "cudasim libcuda.so.1: cudasim's runtime has no driver function %s\n",
                 name);
    std::abort();
  }
  return function;
}

template <typename Function>
Function resolve(const char* name) {
  return reinterpret_cast<Function>(driver_function(name));
}

}  // namespace

// Defines `name` (after cuda.h's renaming, e.g. cuCtxPushCurrent -> cuCtxPushCurrent_v2) to call
// the runtime's function registered under the unrenamed name.
#define CUDASIM_FORWARD(name, params, args)                     \
  CUresult name params {                                        \
    static const auto target = resolve<decltype(&name)>(#name); \
    return target args;                                         \
  }

extern "C" {

CUDASIM_FORWARD(cuInit, (unsigned int flags), (flags))
CUDASIM_FORWARD(cuDriverGetVersion, (int* version), (version))
CUDASIM_FORWARD(cuGetProcAddress,
                (const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* symbolStatus),
                (symbol, pfn, cudaVersion, flags, symbolStatus))
CUDASIM_FORWARD(cuGetErrorName, (CUresult error, const char** name), (error, name))
CUDASIM_FORWARD(cuGetErrorString, (CUresult error, const char** text), (error, text))
CUDASIM_FORWARD(cuDeviceGet, (CUdevice * device, int ordinal), (device, ordinal))
CUDASIM_FORWARD(cuDeviceGetCount, (int* count), (count))
CUDASIM_FORWARD(cuDeviceGetName, (char* name, int len, CUdevice dev), (name, len, dev))
CUDASIM_FORWARD(cuDeviceGetUuid, (CUuuid * uuid, CUdevice dev), (uuid, dev))
CUDASIM_FORWARD(cuDeviceTotalMem, (size_t * bytes, CUdevice dev), (bytes, dev))
CUDASIM_FORWARD(cuDeviceGetAttribute, (int* pi, CUdevice_attribute attrib, CUdevice dev),
                (pi, attrib, dev))
CUDASIM_FORWARD(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev), (pctx, dev))
CUDASIM_FORWARD(cuDevicePrimaryCtxRelease, (CUdevice dev), (dev))
CUDASIM_FORWARD(cuDevicePrimaryCtxGetState, (CUdevice dev, unsigned int* flags, int* active),
                (dev, flags, active))
CUDASIM_FORWARD(cuCtxGetCurrent, (CUcontext * pctx), (pctx))
CUDASIM_FORWARD(cuCtxSetCurrent, (CUcontext ctx), (ctx))
CUDASIM_FORWARD(cuCtxCreate,
                (CUcontext * pctx, CUctxCreateParams* params, unsigned int flags, CUdevice dev),
                (pctx, params, flags, dev))
CUDASIM_FORWARD(cuCtxDestroy, (CUcontext ctx), (ctx))
CUDASIM_FORWARD(cuCtxPushCurrent, (CUcontext ctx), (ctx))
CUDASIM_FORWARD(cuCtxPopCurrent, (CUcontext * pctx), (pctx))
CUDASIM_FORWARD(cuCtxGetDevice, (CUdevice * device), (device))
CUDASIM_FORWARD(cuCtxSynchronize, (void), ())
CUDASIM_FORWARD(cuLogsRegisterCallback,
                (CUlogsCallback callbackFunc, void* userData, CUlogsCallbackHandle* callback_out),
                (callbackFunc, userData, callback_out))
CUDASIM_FORWARD(cuLogsUnregisterCallback, (CUlogsCallbackHandle callback), (callback))
CUDASIM_FORWARD(cuMemGetAddressRange, (CUdeviceptr * pbase, size_t* psize, CUdeviceptr dptr),
                (pbase, psize, dptr))
CUDASIM_FORWARD(cuMemGetAllocationGranularity,
                (size_t * granularity, const CUmemAllocationProp* prop,
                 CUmemAllocationGranularity_flags option),
                (granularity, prop, option))
CUDASIM_FORWARD(cuMemAddressReserve,
                (CUdeviceptr * ptr, size_t size, size_t alignment, CUdeviceptr addr,
                 unsigned long long flags),
                (ptr, size, alignment, addr, flags))
CUDASIM_FORWARD(cuMemAddressFree, (CUdeviceptr ptr, size_t size), (ptr, size))
CUDASIM_FORWARD(cuMemCreate,
                (CUmemGenericAllocationHandle * handle, size_t size,
                 const CUmemAllocationProp* prop, unsigned long long flags),
                (handle, size, prop, flags))
CUDASIM_FORWARD(cuMemRelease, (CUmemGenericAllocationHandle handle), (handle))
CUDASIM_FORWARD(cuMemMap,
                (CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                 unsigned long long flags),
                (ptr, size, offset, handle, flags))
CUDASIM_FORWARD(cuMemUnmap, (CUdeviceptr ptr, size_t size), (ptr, size))
CUDASIM_FORWARD(cuMemSetAccess,
                (CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count),
                (ptr, size, desc, count))

}  // extern "C"
