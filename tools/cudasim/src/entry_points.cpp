// cudaGetDriverEntryPoint[ByVersion]: hands out cudasim's driver functions by name, so that
// programs reach the VMM API without linking libcuda. Unknown names get CUDA's answer for a
// missing symbol (success, cudaDriverEntryPointSymbolNotFound, NULL), never a stand-in; under
// CUDASIM_VERBOSE=1 each miss is logged, so the functions a program wants are found, not
// guessed. cuGetProcAddress (driver.cpp) and libcuda.so.1 look names up in the same table.
#include <cstdio>
#include <cstring>

#include "api.h"

namespace cudasim {

namespace {

struct DriverSymbol {
  const char* name;
  void* function;
  int since;  // first CUDA version that has it
};

// #name is the name as looked up; &name may be cuda.h's renamed function (cuFoo_v2).
// clang-format off
#define CUDASIM_DRIVER_SYMBOL(name, since) {#name, reinterpret_cast<void*>(&name), since}
// clang-format on

const DriverSymbol kDriverSymbols[] = {
    CUDASIM_DRIVER_SYMBOL(cuInit, 2000),
    CUDASIM_DRIVER_SYMBOL(cuDriverGetVersion, 2020),
    CUDASIM_DRIVER_SYMBOL(cuGetProcAddress, 12000),
    CUDASIM_DRIVER_SYMBOL(cuDeviceGet, 2000),
    CUDASIM_DRIVER_SYMBOL(cuDeviceGetCount, 2000),
    CUDASIM_DRIVER_SYMBOL(cuDeviceGetName, 2000),
    CUDASIM_DRIVER_SYMBOL(cuDeviceGetUuid, 11040),
    CUDASIM_DRIVER_SYMBOL(cuDeviceTotalMem, 3020),
    CUDASIM_DRIVER_SYMBOL(cuDeviceGetAttribute, 2000),
    CUDASIM_DRIVER_SYMBOL(cuDevicePrimaryCtxRetain, 7000),
    CUDASIM_DRIVER_SYMBOL(cuDevicePrimaryCtxRelease, 11000),
    CUDASIM_DRIVER_SYMBOL(cuDevicePrimaryCtxGetState, 7000),
    CUDASIM_DRIVER_SYMBOL(cuCtxCreate, 12050),
    CUDASIM_DRIVER_SYMBOL(cuCtxDestroy, 4000),
    CUDASIM_DRIVER_SYMBOL(cuCtxGetCurrent, 4000),
    CUDASIM_DRIVER_SYMBOL(cuCtxSetCurrent, 4000),
    CUDASIM_DRIVER_SYMBOL(cuCtxPushCurrent, 4000),
    CUDASIM_DRIVER_SYMBOL(cuCtxPopCurrent, 4000),
    CUDASIM_DRIVER_SYMBOL(cuCtxGetDevice, 2000),
    CUDASIM_DRIVER_SYMBOL(cuCtxSynchronize, 2000),
    CUDASIM_DRIVER_SYMBOL(cuMemGetAddressRange, 3020),
    CUDASIM_DRIVER_SYMBOL(cuLogsRegisterCallback, 12080),
    CUDASIM_DRIVER_SYMBOL(cuLogsUnregisterCallback, 12080),
    // Not supported (unsupported.cpp): found, so that PyTorch's DriverAPI loads; fail if called.
    CUDASIM_DRIVER_SYMBOL(cuMemExportToShareableHandle, 10020),
    CUDASIM_DRIVER_SYMBOL(cuMemImportFromShareableHandle, 10020),
    CUDASIM_DRIVER_SYMBOL(cuMulticastCreate, 12010),
    CUDASIM_DRIVER_SYMBOL(cuMulticastAddDevice, 12040),
    CUDASIM_DRIVER_SYMBOL(cuMulticastBindMem, 12010),
    CUDASIM_DRIVER_SYMBOL(cuMulticastUnbind, 12010),
    CUDASIM_DRIVER_SYMBOL(cuDeviceGetDevResource, 12040),
    CUDASIM_DRIVER_SYMBOL(cuDevSmResourceSplitByCount, 12040),
    CUDASIM_DRIVER_SYMBOL(cuDevResourceGenerateDesc, 12040),
    CUDASIM_DRIVER_SYMBOL(cuGreenCtxCreate, 12040),
    CUDASIM_DRIVER_SYMBOL(cuGreenCtxDestroy, 12040),
    CUDASIM_DRIVER_SYMBOL(cuGreenCtxStreamCreate, 12040),
    CUDASIM_DRIVER_SYMBOL(cuCtxFromGreenCtx, 12040),
    CUDASIM_DRIVER_SYMBOL(cuMemRetainAllocationHandle, 11000),
    CUDASIM_DRIVER_SYMBOL(cuMemGetAllocationPropertiesFromHandle, 10020),
    CUDASIM_DRIVER_SYMBOL(cuMemsetD32Async, 3020),
    CUDASIM_DRIVER_SYMBOL(cuStreamWriteValue32, 12000),
    {"cuGetErrorName", reinterpret_cast<void*>(&cuGetErrorName), 6000},
    {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString), 6000},
    {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve), 10020},
    {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree), 10020},
    {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate), 10020},
    {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease), 10020},
    {"cuMemMap", reinterpret_cast<void*>(&cuMemMap), 10020},
    {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap), 10020},
    {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess), 10020},
    {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity),
     10020},
};

#undef CUDASIM_DRIVER_SYMBOL

}  // namespace

DriverLookup lookup_driver_symbol(const char* symbol, int cuda_version, void** function) {
  *function = nullptr;
  for (const DriverSymbol& s : kDriverSymbols) {
    if (std::strcmp(s.name, symbol) != 0) continue;
    if (cuda_version < s.since) return DriverLookup::VersionTooLow;
    *function = s.function;
    return DriverLookup::Found;
  }
  if (state().verbose) {
    std::fprintf(stderr, "cudasim: driver function %s looked up (CUDA %d): not provided\n", symbol,
                 cuda_version);
  }
  return DriverLookup::NotFound;
}

cudaError_t driver_entry_point(const char* symbol, void** function, int cuda_version,
                               unsigned long long flags, cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr ||
      (flags & ~static_cast<unsigned long long>(cudaEnableLegacyStream |
                                                cudaEnablePerThreadDefaultStream)) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  const DriverLookup found = lookup_driver_symbol(symbol, cuda_version, function);
  if (status != nullptr) {
    *status = found == DriverLookup::Found           ? cudaDriverEntryPointSuccess
              : found == DriverLookup::VersionTooLow ? cudaDriverEntryPointVersionNotSufficent
                                                     : cudaDriverEntryPointSymbolNotFound;
  }
  return cudaSuccess;
}

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr,
                                             unsigned int cudaVersion, unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* driverStatus) {
  return driver_entry_point(symbol, funcPtr, static_cast<int>(cudaVersion), flags, driverStatus);
}

cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** funcPtr, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* driverStatus) {
  return driver_entry_point(symbol, funcPtr, kRuntimeVersion, flags, driverStatus);
}

}  // extern "C"
