// The driver API beyond VMM: cuGetProcAddress, initialization, devices, primary contexts,
// cuMemGetAddressRange, log callbacks, the not-supported driver functions, and the two
// libraries that forward to cudasim's runtime: libcuda.so.1 and libnvidia-ml.so.1.
#include <cuda.h>
#include <dlfcn.h>

#include <cstring>
#include <string>

#include "sim_test.h"

namespace {

// Every driver function here is reached by name, as PyTorch reaches them.
void* driver_function(const char* name) {
  void* get_proc = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion("cuGetProcAddress", &get_proc, 13000, 0, &status) !=
      cudaSuccess) {
    return nullptr;
  }
  void* fn = nullptr;
  CUdriverProcAddressQueryResult result{};
  reinterpret_cast<decltype(&cuGetProcAddress)>(get_proc)(name, &fn, 13000, 0, &result);
  return fn;
}

#define DRIVER(name) reinterpret_cast<decltype(&name)>(driver_function(#name))

class Driver : public SimTest {};

TEST_F(Driver, GetProcAddress) {
  auto get_proc = DRIVER(cuGetProcAddress);
  ASSERT_NE(get_proc, nullptr);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult result{};
  ASSERT_EQ(get_proc("cuMemCreate", &fn, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &result),
            CUDA_SUCCESS);
  EXPECT_EQ(result, CU_GET_PROC_ADDRESS_SUCCESS);
  void* via_runtime = nullptr;
  cudaDriverEntryPointQueryResult status{};
  ASSERT_CUDA(cudaGetDriverEntryPointByVersion("cuMemCreate", &via_runtime, 13000, 0, &status));
  EXPECT_EQ(fn, via_runtime);

  fn = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(get_proc("cuLaunchKernel", &fn, 13000, 0, &result), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(result, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(fn, nullptr);
  EXPECT_EQ(get_proc("cuMemMap", &fn, 10000, 0, &result), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(result, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(get_proc("cuMemMap", &fn, 13000, 0x100, &result), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(get_proc(nullptr, &fn, 13000, 0, &result), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // driver calls leave the runtime's error alone
}

TEST_F(Driver, InitVersionAndDevices) {
  EXPECT_EQ(DRIVER(cuInit)(0), CUDA_SUCCESS);
  EXPECT_EQ(DRIVER(cuInit)(1), CUDA_ERROR_INVALID_VALUE);
  int version = 0;
  ASSERT_EQ(DRIVER(cuDriverGetVersion)(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, 13000);
  int count = 0, runtime_count = 0;
  ASSERT_EQ(DRIVER(cuDeviceGetCount)(&count), CUDA_SUCCESS);
  ASSERT_CUDA(cudaGetDeviceCount(&runtime_count));
  EXPECT_EQ(count, runtime_count);
  CUdevice device = -1;
  ASSERT_EQ(DRIVER(cuDeviceGet)(&device, count - 1), CUDA_SUCCESS);
  EXPECT_EQ(device, count - 1);
  EXPECT_EQ(DRIVER(cuDeviceGet)(&device, count), CUDA_ERROR_INVALID_DEVICE);
  char name[64] = {};
  ASSERT_EQ(DRIVER(cuDeviceGetName)(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "cudasim");
  char tiny[4] = {'x', 'x', 'x', 'x'};
  ASSERT_EQ(DRIVER(cuDeviceGetName)(tiny, sizeof(tiny), 0), CUDA_SUCCESS);
  EXPECT_STREQ(tiny, "cud");
  size_t total = 0;
  ASSERT_EQ(DRIVER(cuDeviceTotalMem)(&total, 0), CUDA_SUCCESS);
  EXPECT_EQ(total, cudasim_get_capacity(0));
  CUuuid uuid{};
  cudaDeviceProp prop{};
  ASSERT_EQ(DRIVER(cuDeviceGetUuid)(&uuid, 0), CUDA_SUCCESS);
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, 0));
  EXPECT_EQ(std::memcmp(uuid.bytes, prop.uuid.bytes, sizeof(uuid.bytes)), 0);
}

TEST_F(Driver, AttributesMatchTheRuntimeAndVmmIsSupported) {
  auto get = DRIVER(cuDeviceGetAttribute);
  int value = -1, runtime = -2;
  ASSERT_EQ(get(&value, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  ASSERT_CUDA(cudaDeviceGetAttribute(&runtime, cudaDevAttrMultiProcessorCount, 0));
  EXPECT_EQ(value, runtime);
  ASSERT_EQ(get(&value, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0), CUDA_SUCCESS);
  EXPECT_EQ(value, 1);
  ASSERT_EQ(get(&value, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 0);
  ASSERT_EQ(get(&value, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(value, 0);
  EXPECT_EQ(get(&value, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(get(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 99), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Driver, PrimaryContexts) {
  CUcontext primary = nullptr;
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxRetain)(&primary, 0), CUDA_SUCCESS);
  ASSERT_NE(primary, nullptr);
  CUcontext again = nullptr;
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxRetain)(&again, 0), CUDA_SUCCESS);
  EXPECT_EQ(again, primary);
  unsigned flags = 99;
  int active = 0;
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxGetState)(0, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(DRIVER(cuDevicePrimaryCtxRelease)(0), CUDA_SUCCESS);
  EXPECT_EQ(DRIVER(cuDevicePrimaryCtxRelease)(0), CUDA_SUCCESS);
  EXPECT_EQ(DRIVER(cuDevicePrimaryCtxRelease)(0), CUDA_ERROR_INVALID_CONTEXT);  // not retained

  // The current context follows the runtime's device until a context is set.
  CUcontext current = nullptr;
  ASSERT_EQ(DRIVER(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  CUdevice device = -1;
  ASSERT_EQ(DRIVER(cuCtxGetDevice)(&device), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(DRIVER(cuCtxSetCurrent)(reinterpret_cast<CUcontext>(&device)),
            CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(DRIVER(cuCtxSetCurrent)(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);
  EXPECT_EQ(DRIVER(cuCtxGetDevice)(&device), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(DRIVER(cuCtxPushCurrent)(primary), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  CUcontext popped = nullptr;
  ASSERT_EQ(DRIVER(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, primary);
  ASSERT_EQ(DRIVER(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, nullptr);  // what was current before the push
  EXPECT_EQ(DRIVER(cuCtxPopCurrent)(&popped), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(DRIVER(cuCtxSetCurrent)(primary), CUDA_SUCCESS);
  EXPECT_EQ(DRIVER(cuCtxSynchronize)(), CUDA_SUCCESS);
}

// A private context (cuCtxCreate) is pushed over the current one and current until popped or
// destroyed; runtime calls follow its device; cudaSetDevice replaces it with the device's
// primary context (CUDA's rule, which an allocator that switches devices must not break).
TEST_F(Driver, PrivateContextsArePushedPoppedAndReplacedByCudaSetDevice) {
  auto create = DRIVER(cuCtxCreate);
  auto destroy = DRIVER(cuCtxDestroy);
  auto get_current = DRIVER(cuCtxGetCurrent);
  ASSERT_NE(create, nullptr);
  ASSERT_NE(destroy, nullptr);
  CUcontext primary = nullptr;
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxRetain)(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxRelease)(0), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuCtxSetCurrent)(primary), CUDA_SUCCESS);

  CUcontext mine = nullptr;
  EXPECT_EQ(create(nullptr, nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(&mine, nullptr, 0x100, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(&mine, nullptr, 0, 7), CUDA_ERROR_INVALID_DEVICE);
  ASSERT_EQ(create(&mine, nullptr, CU_CTX_SCHED_AUTO, 0), CUDA_SUCCESS);
  ASSERT_NE(mine, nullptr);
  EXPECT_NE(mine, primary);
  CUcontext current = nullptr;
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, mine);
  CUdevice device = -1;
  ASSERT_EQ(DRIVER(cuCtxGetDevice)(&device), CUDA_SUCCESS);
  EXPECT_EQ(device, 0);
  int runtime_device = -1;
  ASSERT_CUDA(cudaGetDevice(&runtime_device));
  EXPECT_EQ(runtime_device, 0);

  // Popped: the primary context pushed under it is current again; pushed back, it is current.
  CUcontext popped = nullptr;
  ASSERT_EQ(DRIVER(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, mine);
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  ASSERT_EQ(DRIVER(cuCtxSetCurrent)(mine), CUDA_SUCCESS);

  // cudaSetDevice (the same device) makes its primary context current in place of `mine`.
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  ASSERT_EQ(DRIVER(cuCtxSetCurrent)(mine), CUDA_SUCCESS);

  // Destroyed while current: popped, as by cuCtxPopCurrent; its handle is invalid from then on.
  ASSERT_EQ(DRIVER(cuCtxSetCurrent)(primary), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuCtxPushCurrent)(mine), CUDA_SUCCESS);
  ASSERT_EQ(destroy(mine), CUDA_SUCCESS);
  ASSERT_EQ(get_current(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, primary);
  EXPECT_EQ(destroy(mine), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(destroy(primary), CUDA_ERROR_INVALID_CONTEXT);  // cuDevicePrimaryCtxRelease's
  EXPECT_EQ(destroy(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(DRIVER(cuCtxSetCurrent)(mine), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(DRIVER(cuCtxPushCurrent)(mine), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_CUDA(cudaSetDevice(0));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // driver calls leave the runtime's error alone
}

// A context destroyed while lower on a thread's stack stays there, as on CUDA: popped back to, it
// is current but destroyed, and the thread's runtime device stays what it was (it was set to -1,
// and cudaMemGetInfo then read device -1's state: found in review).
TEST_F(Driver, ADestroyedContextPoppedBackToIsReportedDestroyed) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs CUDASIM_DEVICES=2";
  CUcontext lower = nullptr;
  CUcontext upper = nullptr;
  ASSERT_EQ(DRIVER(cuCtxCreate)(&lower, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuCtxCreate)(&upper, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuCtxDestroy)(lower), CUDA_SUCCESS);  // not current: stays on the stack
  CUcontext popped = nullptr;
  ASSERT_EQ(DRIVER(cuCtxPopCurrent)(&popped), CUDA_SUCCESS);
  EXPECT_EQ(popped, upper);
  CUcontext current = nullptr;
  ASSERT_EQ(DRIVER(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, lower);
  CUdevice device = -1;
  EXPECT_EQ(DRIVER(cuCtxGetDevice)(&device), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  int runtime_device = -1;
  ASSERT_CUDA(cudaGetDevice(&runtime_device));
  EXPECT_EQ(runtime_device, 0);
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  EXPECT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT_GT(total_bytes, 0u);
  EXPECT_EQ(DRIVER(cuCtxSetCurrent)(lower), CUDA_ERROR_INVALID_CONTEXT);
  ASSERT_EQ(DRIVER(cuCtxDestroy)(upper), CUDA_SUCCESS);
  ASSERT_CUDA(cudaSetDevice(0));
}

// On two devices: a private context on device 1 makes device 1 the runtime's current device,
// and cudaSetDevice(0) replaces it with device 0's primary context.
TEST_F(Driver, APrivateContextCarriesItsDeviceUntilCudaSetDevice) {
  int count = 0;
  ASSERT_CUDA(cudaGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs CUDASIM_DEVICES=2";
  CUcontext mine = nullptr;
  ASSERT_EQ(DRIVER(cuCtxCreate)(&mine, nullptr, 0, 1), CUDA_SUCCESS);
  int runtime_device = -1;
  ASSERT_CUDA(cudaGetDevice(&runtime_device));
  EXPECT_EQ(runtime_device, 1);
  ASSERT_CUDA(cudaSetDevice(0));
  CUcontext current = nullptr;
  ASSERT_EQ(DRIVER(cuCtxGetCurrent)(&current), CUDA_SUCCESS);
  CUcontext primary0 = nullptr;
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxRetain)(&primary0, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuDevicePrimaryCtxRelease)(0), CUDA_SUCCESS);
  EXPECT_EQ(current, primary0);
  ASSERT_EQ(DRIVER(cuCtxDestroy)(mine), CUDA_SUCCESS);
}

TEST_F(Driver, GetAddressRange) {
  auto range = DRIVER(cuMemGetAddressRange);
  void* p = nullptr;
  ASSERT_CUDA(cudaMalloc(&p, 1000));
  CUdeviceptr base = 0;
  size_t size = 0;
  const auto inside = reinterpret_cast<CUdeviceptr>(p) + 999;
  ASSERT_EQ(range(&base, &size, inside), CUDA_SUCCESS);
  EXPECT_EQ(base, reinterpret_cast<CUdeviceptr>(p));
  EXPECT_EQ(size, 1024u);                                  // cudaMalloc sizes round up to 256
  ASSERT_EQ(range(nullptr, &size, inside), CUDA_SUCCESS);  // both outputs are optional
  ASSERT_EQ(range(&base, nullptr, inside), CUDA_SUCCESS);
  int host = 0;
  EXPECT_EQ(range(&base, &size, reinterpret_cast<CUdeviceptr>(&host)), CUDA_ERROR_NOT_FOUND);
  ASSERT_CUDA(cudaFree(p));
  EXPECT_EQ(range(&base, &size, reinterpret_cast<CUdeviceptr>(p)), CUDA_ERROR_NOT_FOUND);

  // A VMM address: the mapping that contains it.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  const size_t chunk = size_t{2} << 20;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(DRIVER(cuMemAddressReserve)(&va, 4 * chunk, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuMemCreate)(&handle, chunk, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuMemMap)(va + chunk, chunk, 0, handle, 0), CUDA_SUCCESS);
  ASSERT_EQ(range(&base, &size, va + chunk + 5), CUDA_SUCCESS);
  EXPECT_EQ(base, va + chunk);
  EXPECT_EQ(size, chunk);
  EXPECT_EQ(range(&base, &size, va), CUDA_ERROR_NOT_FOUND);  // reserved, not mapped
  ASSERT_EQ(DRIVER(cuMemUnmap)(va + chunk, chunk), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuMemRelease)(handle), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuMemAddressFree)(va, 4 * chunk), CUDA_SUCCESS);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

void log_callback(void*, CUlogLevel, char*, size_t) {}

TEST_F(Driver, LogCallbacksRegisterAndUnregister) {
  CUlogsCallbackHandle first = nullptr, second = nullptr;
  ASSERT_EQ(DRIVER(cuLogsRegisterCallback)(&log_callback, nullptr, &first), CUDA_SUCCESS);
  ASSERT_EQ(DRIVER(cuLogsRegisterCallback)(&log_callback, nullptr, &second), CUDA_SUCCESS);
  EXPECT_NE(first, second);
  EXPECT_EQ(DRIVER(cuLogsRegisterCallback)(nullptr, nullptr, &first), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRIVER(cuLogsUnregisterCallback)(first), CUDA_SUCCESS);
  EXPECT_EQ(DRIVER(cuLogsUnregisterCallback)(first), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(DRIVER(cuLogsUnregisterCallback)(second), CUDA_SUCCESS);
}

TEST_F(Driver, NotSupportedFunctionsAreFoundAndFailLoudly) {
  auto export_handle = DRIVER(cuMemExportToShareableHandle);
  ASSERT_NE(export_handle, nullptr);
  testing::internal::CaptureStderr();
  int fd = -1;
  EXPECT_EQ(export_handle(&fd, 1, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("cudasim: cuMemExportToShareableHandle is not supported"), std::string::npos)
      << log;
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// libcuda.so.1 exports the driver functions and forwards to the runtime's: one device.
TEST_F(Driver, LibcudaForwardsToTheRuntime) {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(libcuda, nullptr) << dlerror();
  auto init = reinterpret_cast<decltype(&cuInit)>(dlsym(libcuda, "cuInit"));
  auto get_proc =
      reinterpret_cast<decltype(&cuGetProcAddress)>(dlsym(libcuda, "cuGetProcAddress_v2"));
  auto create = reinterpret_cast<decltype(&cuMemCreate)>(dlsym(libcuda, "cuMemCreate"));
  auto release = reinterpret_cast<decltype(&cuMemRelease)>(dlsym(libcuda, "cuMemRelease"));
  ASSERT_TRUE(init && get_proc && create && release);
  EXPECT_EQ(dlsym(libcuda, "cudasim_get_counters"), dlsym(RTLD_DEFAULT, "cudasim_get_counters"));
  ASSERT_EQ(init(0), CUDA_SUCCESS);
  void* fn = nullptr;
  CUdriverProcAddressQueryResult result{};
  ASSERT_EQ(get_proc("cuMemMap", &fn, 13000, 0, &result), CUDA_SUCCESS);
  EXPECT_EQ(fn, driver_function("cuMemMap"));

  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(create(&handle, size_t{2} << 20, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, size_t{2} << 20);  // the runtime's own accounting
  EXPECT_EQ(counters().mallocs, 1u);
  ASSERT_EQ(release(handle), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 0u);
  dlclose(libcuda);
}

// libnvidia-ml.so.1: the NVML functions PyTorch's DriverAPI requires.
TEST_F(Driver, NvmlFindsDevicesByPciBusId) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(nvml, nullptr) << dlerror();
  using Init = int (*)();
  using ByBusId = int (*)(const char*, void**);
  using FabricInfo = int (*)(void*, void*);
  using DriverVersion = int (*)(int*);
  auto init = reinterpret_cast<Init>(dlsym(nvml, "nvmlInit_v2"));
  auto by_bus_id = reinterpret_cast<ByBusId>(dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2"));
  auto fabric = reinterpret_cast<FabricInfo>(dlsym(nvml, "nvmlDeviceGetGpuFabricInfoV"));
  auto version = reinterpret_cast<DriverVersion>(dlsym(nvml, "nvmlSystemGetCudaDriverVersion_v2"));
  ASSERT_TRUE(init && by_bus_id && fabric && version);
  for (const char* name :
       {"nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetNvLinkRemotePciInfo_v2",
        "nvmlDeviceGetComputeRunningProcesses", "nvmlShutdown", "nvmlErrorString"}) {
    EXPECT_NE(dlsym(nvml, name), nullptr) << name;
  }
  EXPECT_EQ(init(), 0);
  int cuda_version = 0;
  EXPECT_EQ(version(&cuda_version), 0);
  EXPECT_EQ(cuda_version, 13000);

  cudaDeviceProp prop{};
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, 0));
  char bus_id[32];
  std::snprintf(bus_id, sizeof(bus_id), "%04x:%02x:%02x.0", prop.pciDomainID, prop.pciBusID,
                prop.pciDeviceID);
  void* device = nullptr;
  ASSERT_EQ(by_bus_id(bus_id, &device), 0) << bus_id;
  EXPECT_NE(device, nullptr);
  EXPECT_EQ(by_bus_id("0000:7f:00.0", &device), 6);  // NVML_ERROR_NOT_FOUND
  EXPECT_EQ(by_bus_id("garbage", &device), 2);       // NVML_ERROR_INVALID_ARGUMENT

  unsigned char info[64];
  std::memset(info, 0xff, sizeof(info));
  ASSERT_EQ(by_bus_id(bus_id, &device), 0);
  ASSERT_EQ(fabric(device, info), 0);
  int status = 0;
  std::memcpy(&status, info + 20, sizeof(status));
  EXPECT_EQ(status, 3);     // NVML_ERROR_NOT_SUPPORTED: no NVLink fabric
  EXPECT_EQ(info[28], 0u);  // NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
  dlclose(nvml);
}

}  // namespace
