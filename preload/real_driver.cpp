#include "real_driver.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "device_caches.h"
#include "dynamic_linker.h"

namespace cudacache::preload::driver {
namespace {

struct Entry {
  const char* exported;  // name in libcuda.so.1
  const char* base;      // name for cuGetProcAddress
  int version;           // cudaVersion to ask for
  cuuint64_t flags;
};

constexpr Entry kEntries[kFunctionCount] = {
    {"cuGetProcAddress", "cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuGetProcAddress_v2", "cuGetProcAddress", 12000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemAlloc_v2", "cuMemAlloc", 3020, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemFree_v2", "cuMemFree", 3020, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuMemAllocAsync", "cuMemAllocAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM},
    {"cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020,
     CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
    {"cuMemFreeAsync", "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_LEGACY_STREAM},
    {"cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM},
    {"cuCtxGetCurrent", "cuCtxGetCurrent", 4000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuCtxGetDevice", "cuCtxGetDevice", 2000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRetain", 7000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", 11000,
     CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxGetState", 7000, CU_GET_PROC_ADDRESS_DEFAULT},
    {"cuStreamIsCapturing", "cuStreamIsCapturing", 10000, CU_GET_PROC_ADDRESS_DEFAULT},
};

// One entry per Function: a missing one would be a null name, looked up at run time.
constexpr bool every_function_named() {
  for (const Entry& entry : kEntries) {
    if (entry.exported == nullptr || entry.base == nullptr) return false;
  }
  return true;
}
static_assert(every_function_named(), "kEntries must name every driver::Function");

std::atomic<void*> g_functions[kFunctionCount];
std::atomic<CUcontext> g_primary_contexts[kMaxDevices];

void* from_driver_library(const char* name) {
  if (void* found = real_dlsym(RTLD_NEXT, name)) return found;
  void* handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (handle == nullptr) return nullptr;
  void* found = real_dlsym(handle, name);
  dlclose(handle);  // drops the reference RTLD_NOLOAD took; the library stays loaded
  return found;
}

void* from_get_proc_address(const Entry& entry) {
  using GetProcAddressV2 =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto* get = reinterpret_cast<GetProcAddressV2>(g_functions[kGetProcAddressV2].load());
  void* found = nullptr;
  if (get == nullptr ||
      get(entry.base, &found, entry.version, entry.flags, nullptr) != CUDA_SUCCESS) {
    return nullptr;
  }
  return found;
}

}  // namespace

const char* exported_name(Function function) { return kEntries[function].exported; }

void seed(Function function, void* address) {
  if (address == nullptr || is_own_address(address)) return;
  void* expected = nullptr;
  g_functions[function].compare_exchange_strong(expected, address);
}

void* find(Function function) {
  if (void* known = g_functions[function].load(std::memory_order_acquire)) return known;
  void* found = from_get_proc_address(kEntries[function]);
  if (found == nullptr || is_own_address(found))
    found = from_driver_library(exported_name(function));
  if (found == nullptr || is_own_address(found)) return nullptr;
  seed(function, found);
  return g_functions[function].load(std::memory_order_acquire);
}

int primary_context_device() {
  auto* get_current = reinterpret_cast<CUresult (*)(CUcontext*)>(find(kCtxGetCurrent));
  auto* get_device = reinterpret_cast<CUresult (*)(CUdevice*)>(find(kCtxGetDevice));
  CUcontext current = nullptr;
  CUdevice device = -1;
  if (get_current == nullptr || get_device == nullptr || get_current(&current) != CUDA_SUCCESS ||
      current == nullptr || get_device(&device) != CUDA_SUCCESS || device < 0 ||
      device >= kMaxDevices) {
    return -1;
  }
  if (g_primary_contexts[device].load(std::memory_order_acquire) == current) return device;
  // Not known yet (or the primary context was recreated): ask. An inactive primary context is
  // not the current one, and retaining it would create it (and the release destroy it again,
  // on every allocation: found in review), so its state comes first. Retaining an active
  // primary context only counts a reference, which is dropped at once.
  auto* get_state = reinterpret_cast<CUresult (*)(CUdevice, unsigned int*, int*)>(
      find(kDevicePrimaryCtxGetState));
  unsigned int flags = 0;
  int active = 0;
  if (get_state == nullptr || get_state(device, &flags, &active) != CUDA_SUCCESS || active == 0) {
    return -1;
  }
  auto* retain =
      reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(find(kDevicePrimaryCtxRetain));
  auto* release = reinterpret_cast<CUresult (*)(CUdevice)>(find(kDevicePrimaryCtxRelease));
  CUcontext primary = nullptr;
  if (retain == nullptr || release == nullptr || retain(&primary, device) != CUDA_SUCCESS)
    return -1;
  release(device);
  g_primary_contexts[device].store(primary, std::memory_order_release);
  return primary == current ? device : -1;
}

bool hooks_enabled() {
  static const bool enabled = [] {
    const char* text = std::getenv("CUDACACHE_PRELOAD_DRIVER");
    return text == nullptr || std::strcmp(text, "0") != 0;
  }();
  return enabled;
}

}  // namespace cudacache::preload::driver
