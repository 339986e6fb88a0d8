#include "vmm_api.h"

#include <cudaTypedefs.h>

#include <mutex>

namespace cudacache::vmm_api {
namespace {

// The ABI version asked of cudaGetDriverEntryPointByVersion: these functions have not
// changed since CUDA 10.2, and 12.0 is the oldest runtime that has the ByVersion query.
constexpr unsigned int kEntryPointVersion = 12000;

struct DriverFunctions {
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_attribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  std::string missing;  // the first function not found, empty when all were
};

template <typename Function>
void find(const char* name, Function* out, std::string* missing) {
  void* function = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t error = cudaGetDriverEntryPointByVersion(name, &function, kEntryPointVersion,
                                                             cudaEnableDefault, &status);
  if (error != cudaSuccess) cudaGetLastError();  // a query, not the application's error
  if (error != cudaSuccess || status != cudaDriverEntryPointSuccess || function == nullptr) {
    if (missing->empty()) *missing = name;
    return;
  }
  *out = reinterpret_cast<Function>(function);
}

const DriverFunctions& driver() {
  static const DriverFunctions functions = [] {
    DriverFunctions f;
    find("cuDeviceGet", &f.device_get, &f.missing);
    find("cuDeviceGetAttribute", &f.device_attribute, &f.missing);
    find("cuMemGetAllocationGranularity", &f.granularity, &f.missing);
    find("cuMemAddressReserve", &f.reserve, &f.missing);
    find("cuMemAddressFree", &f.address_free, &f.missing);
    find("cuMemCreate", &f.create, &f.missing);
    find("cuMemRelease", &f.release, &f.missing);
    find("cuMemMap", &f.map, &f.missing);
    find("cuMemUnmap", &f.unmap, &f.missing);
    find("cuMemSetAccess", &f.set_access, &f.missing);
    return f;
  }();
  return functions;
}

// The context pair, found apart from the VMM functions (whose absence means no VMM).
struct ContextFunctions {
  PFN_cuCtxGetCurrent_v4000 get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 set_current = nullptr;
};

const ContextFunctions& context_functions() {
  static const ContextFunctions functions = [] {
    ContextFunctions f;
    std::string missing;
    find("cuCtxGetCurrent", &f.get_current, &missing);
    find("cuCtxSetCurrent", &f.set_current, &missing);
    if (!missing.empty()) f = {};  // both or neither
    return f;
  }();
  return functions;
}

cudaError_t as_runtime_error(CUresult result) { return static_cast<cudaError_t>(result); }

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

bool supported(int device, std::string* why) {
  const DriverFunctions& f = driver();
  if (!f.missing.empty()) {
    *why = "the driver does not provide " + f.missing;
    return false;
  }
  CUdevice handle = 0;
  int attribute = 0;
  if (f.device_get(&handle, device) != CUDA_SUCCESS ||
      f.device_attribute(&attribute, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                         handle) != CUDA_SUCCESS) {
    *why = "the driver cannot query device " + std::to_string(device);
    return false;
  }
  if (attribute == 0) {
    *why = "device " + std::to_string(device) + " does not support virtual memory management";
    return false;
  }
  return true;
}

cudaError_t granularity(int device, std::size_t* bytes) {
  const CUmemAllocationProp prop = device_memory(device);
  return as_runtime_error(driver().granularity(bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
}

cudaError_t reserve(std::size_t bytes, std::size_t alignment, std::uintptr_t* base) {
  CUdeviceptr address = 0;
  const CUresult result = driver().reserve(&address, bytes, alignment, 0, 0);
  *base = result == CUDA_SUCCESS ? static_cast<std::uintptr_t>(address) : 0;
  return as_runtime_error(result);
}

cudaError_t address_free(std::uintptr_t base, std::size_t bytes) {
  return as_runtime_error(driver().address_free(base, bytes));
}

cudaError_t create(int device, std::size_t bytes, PageHandle* handle) {
  const CUmemAllocationProp prop = device_memory(device);
  CUmemGenericAllocationHandle created = 0;
  const CUresult result = driver().create(&created, bytes, &prop, 0);
  *handle = result == CUDA_SUCCESS ? created : 0;
  return as_runtime_error(result);
}

cudaError_t release(PageHandle handle) { return as_runtime_error(driver().release(handle)); }

cudaError_t map(std::uintptr_t address, std::size_t bytes, PageHandle handle) {
  return as_runtime_error(driver().map(address, bytes, 0, handle, 0));
}

cudaError_t unmap(std::uintptr_t address, std::size_t bytes) {
  return as_runtime_error(driver().unmap(address, bytes));
}

cudaError_t set_access(int device, std::uintptr_t address, std::size_t bytes) {
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return as_runtime_error(driver().set_access(address, bytes, &access, 1));
}

void* current_context() {
  const ContextFunctions& f = context_functions();
  CUcontext context = nullptr;
  if (f.get_current == nullptr || f.get_current(&context) != CUDA_SUCCESS) return nullptr;
  return context;
}

bool make_context_current(void* context) {
  const ContextFunctions& f = context_functions();
  return f.set_current != nullptr && f.set_current(static_cast<CUcontext>(context)) == CUDA_SUCCESS;
}

}  // namespace cudacache::vmm_api
