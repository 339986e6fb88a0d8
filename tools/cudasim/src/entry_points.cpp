// cudaGetDriverEntryPoint[ByVersion]: hands out cudasim's driver functions by name, so that
// programs reach the VMM API without linking libcuda. Unknown names get CUDA's answer for a
// missing symbol (success, cudaDriverEntryPointSymbolNotFound, NULL), never a stand-in.
#include <cstring>

#include "api.h"

namespace cudasim {

namespace {

struct DriverSymbol {
  const char* name;
  void* function;
  int since;  // first CUDA version that has it
};

const DriverSymbol kDriverSymbols[] = {
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

}  // namespace

cudaError_t driver_entry_point(const char* symbol, void** function, int cuda_version,
                               unsigned long long flags,
                               cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || function == nullptr ||
      (flags & ~static_cast<unsigned long long>(cudaEnableLegacyStream |
                                                 cudaEnablePerThreadDefaultStream)) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  cudaDriverEntryPointQueryResult result = cudaDriverEntryPointSymbolNotFound;
  *function = nullptr;
  for (const DriverSymbol& s : kDriverSymbols) {
    if (std::strcmp(s.name, symbol) != 0) continue;
    if (cuda_version < s.since) {
      result = cudaDriverEntryPointVersionNotSufficent;
    } else {
      result = cudaDriverEntryPointSuccess;
      *function = s.function;
    }
  }
  if (status != nullptr) *status = result;
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
