// Devices: count, selection, attributes and properties (H100-like numbers), flags, versions,
// synchronization and reset.
#include <cstring>
#include <optional>
#include <string>

#include "state.h"

namespace cudasim {

std::optional<int> device_attribute(cudaDeviceAttr attr, int device) {
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: return 1024;
    case cudaDevAttrMaxBlockDimX: return 1024;
    case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return 2147483647;
    case cudaDevAttrMaxGridDimY: return 65535;
    case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrMaxSharedMemoryPerBlock: return 49152;
    case cudaDevAttrTotalConstantMemory: return 65536;
    case cudaDevAttrWarpSize: return 32;
    case cudaDevAttrMaxPitch: return 2147483647;
    case cudaDevAttrMaxRegistersPerBlock: return 65536;
    case cudaDevAttrClockRate: return 1980000;
    case cudaDevAttrTextureAlignment: return 512;
    case cudaDevAttrGpuOverlap: return 1;
    case cudaDevAttrMultiProcessorCount: return 132;
    case cudaDevAttrKernelExecTimeout: return 0;
    case cudaDevAttrIntegrated: return 0;
    case cudaDevAttrCanMapHostMemory: return 1;
    case cudaDevAttrComputeMode: return cudaComputeModeDefault;
    case cudaDevAttrSurfaceAlignment: return 512;
    case cudaDevAttrConcurrentKernels: return 1;
    case cudaDevAttrEccEnabled: return 1;
    case cudaDevAttrPciBusId: return device + 1;
    case cudaDevAttrPciDeviceId: return 0;
    case cudaDevAttrPciDomainId: return 0;
    case cudaDevAttrTccDriver: return 0;
    case cudaDevAttrMemoryClockRate: return 2619000;
    case cudaDevAttrGlobalMemoryBusWidth: return 5120;
    case cudaDevAttrL2CacheSize: return 52428800;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return 2048;
    case cudaDevAttrAsyncEngineCount: return 3;
    case cudaDevAttrUnifiedAddressing: return 1;
    case cudaDevAttrTexturePitchAlignment: return 32;
    case cudaDevAttrComputeCapabilityMajor: return 9;
    case cudaDevAttrComputeCapabilityMinor: return 0;
    case cudaDevAttrStreamPrioritiesSupported: return 1;
    case cudaDevAttrGlobalL1CacheSupported: return 1;
    case cudaDevAttrLocalL1CacheSupported: return 1;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: return 233472;
    case cudaDevAttrMaxRegistersPerMultiprocessor: return 65536;
    case cudaDevAttrManagedMemory: return 1;
    case cudaDevAttrIsMultiGpuBoard: return 0;
    case cudaDevAttrMultiGpuBoardGroupID: return device;
    case cudaDevAttrHostNativeAtomicSupported: return 0;
    case cudaDevAttrSingleToDoublePrecisionPerfRatio: return 2;
    case cudaDevAttrPageableMemoryAccess: return 0;
    case cudaDevAttrConcurrentManagedAccess: return 1;
    case cudaDevAttrComputePreemptionSupported: return 1;
    case cudaDevAttrCanUseHostPointerForRegisteredMem: return 1;
    case cudaDevAttrCooperativeLaunch: return 1;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: return 232448;
    case cudaDevAttrMaxBlocksPerMultiprocessor: return 32;
    case cudaDevAttrMaxPersistingL2CacheSize: return 82837504;
    case cudaDevAttrMaxAccessPolicyWindowSize: return 134213632;
    case cudaDevAttrReservedSharedMemoryPerBlock: return 1024;
    case cudaDevAttrHostRegisterSupported: return 1;
    case cudaDevAttrMemoryPoolsSupported: return 1;
    case cudaDevAttrGPUDirectRDMASupported: return 1;
    case cudaDevAttrClusterLaunch: return 1;
    case cudaDevAttrIpcEventSupport: return 1;
    default: return std::nullopt;
  }
}

namespace {

cudaError_t check_device(int device) {
  return valid_device(state(), device) ? cudaSuccess : cudaErrorInvalidDevice;
}

}  // namespace

}  // namespace cudasim

using namespace cudasim;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return finish(cudaErrorInvalidValue);
  *count = static_cast<int>(state().devices.size());
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return finish(cudaErrorInvalidValue);
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return finish(e);
  current_device() = device;
  follow_runtime_device();  // the device's primary context replaces a context made current
  return cudaSuccess;
}

cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags) {
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return finish(e);
  if ((flags & ~static_cast<unsigned>(cudaInitDeviceFlagsAreValid)) != 0) {
    return finish(cudaErrorInvalidValue);
  }
  if ((flags & cudaInitDeviceFlagsAreValid) == 0) return cudaSuccess;
  const int previous = current_device();
  current_device() = device;
  const cudaError_t e = cudaSetDeviceFlags(deviceFlags);
  current_device() = previous;
  return e;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return finish(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return finish(e);
  const std::optional<int> v = device_attribute(attr, device);
  if (!v) return finish(cudaErrorInvalidValue);
  *value = *v;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return finish(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return finish(e);
  State& s = state();
  std::lock_guard lock(s.mutex);
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "cudasim", sizeof(prop->name) - 1);
  // A stable, distinct UUID per device.
  for (size_t i = 0; i < sizeof(prop->uuid.bytes); ++i) {
    prop->uuid.bytes[i] = static_cast<char>(i == 0 ? device : 0x5a);
  }
  const auto get = [device](cudaDeviceAttr attr) { return *device_attribute(attr, device); };
  prop->totalGlobalMem = s.devices[static_cast<size_t>(device)].capacity;
  prop->sharedMemPerBlock = static_cast<size_t>(get(cudaDevAttrMaxSharedMemoryPerBlock));
  prop->regsPerBlock = get(cudaDevAttrMaxRegistersPerBlock);
  prop->warpSize = get(cudaDevAttrWarpSize);
  prop->memPitch = static_cast<size_t>(get(cudaDevAttrMaxPitch));
  prop->maxThreadsPerBlock = get(cudaDevAttrMaxThreadsPerBlock);
  prop->maxThreadsDim[0] = get(cudaDevAttrMaxBlockDimX);
  prop->maxThreadsDim[1] = get(cudaDevAttrMaxBlockDimY);
  prop->maxThreadsDim[2] = get(cudaDevAttrMaxBlockDimZ);
  prop->maxGridSize[0] = get(cudaDevAttrMaxGridDimX);
  prop->maxGridSize[1] = get(cudaDevAttrMaxGridDimY);
  prop->maxGridSize[2] = get(cudaDevAttrMaxGridDimZ);
  prop->totalConstMem = static_cast<size_t>(get(cudaDevAttrTotalConstantMemory));
  prop->major = get(cudaDevAttrComputeCapabilityMajor);
  prop->minor = get(cudaDevAttrComputeCapabilityMinor);
  prop->textureAlignment = static_cast<size_t>(get(cudaDevAttrTextureAlignment));
  prop->texturePitchAlignment = static_cast<size_t>(get(cudaDevAttrTexturePitchAlignment));
  prop->multiProcessorCount = get(cudaDevAttrMultiProcessorCount);
  prop->canMapHostMemory = get(cudaDevAttrCanMapHostMemory);
  prop->surfaceAlignment = static_cast<size_t>(get(cudaDevAttrSurfaceAlignment));
  prop->concurrentKernels = get(cudaDevAttrConcurrentKernels);
  prop->ECCEnabled = get(cudaDevAttrEccEnabled);
  prop->pciBusID = get(cudaDevAttrPciBusId);
  prop->asyncEngineCount = get(cudaDevAttrAsyncEngineCount);
  prop->unifiedAddressing = get(cudaDevAttrUnifiedAddressing);
  prop->memoryBusWidth = get(cudaDevAttrGlobalMemoryBusWidth);
  prop->l2CacheSize = get(cudaDevAttrL2CacheSize);
  prop->persistingL2CacheMaxSize = get(cudaDevAttrMaxPersistingL2CacheSize);
  prop->maxThreadsPerMultiProcessor = get(cudaDevAttrMaxThreadsPerMultiProcessor);
  prop->streamPrioritiesSupported = get(cudaDevAttrStreamPrioritiesSupported);
  prop->globalL1CacheSupported = get(cudaDevAttrGlobalL1CacheSupported);
  prop->localL1CacheSupported = get(cudaDevAttrLocalL1CacheSupported);
  prop->sharedMemPerMultiprocessor =
      static_cast<size_t>(get(cudaDevAttrMaxSharedMemoryPerMultiprocessor));
  prop->regsPerMultiprocessor = get(cudaDevAttrMaxRegistersPerMultiprocessor);
  prop->managedMemory = get(cudaDevAttrManagedMemory);
  prop->multiGpuBoardGroupID = get(cudaDevAttrMultiGpuBoardGroupID);
  prop->concurrentManagedAccess = get(cudaDevAttrConcurrentManagedAccess);
  prop->computePreemptionSupported = get(cudaDevAttrComputePreemptionSupported);
  prop->canUseHostPointerForRegisteredMem = get(cudaDevAttrCanUseHostPointerForRegisteredMem);
  prop->cooperativeLaunch = get(cudaDevAttrCooperativeLaunch);
  prop->sharedMemPerBlockOptin = static_cast<size_t>(get(cudaDevAttrMaxSharedMemoryPerBlockOptin));
  prop->maxBlocksPerMultiProcessor = get(cudaDevAttrMaxBlocksPerMultiprocessor);
  prop->accessPolicyMaxWindowSize = get(cudaDevAttrMaxAccessPolicyWindowSize);
  prop->reservedSharedMemPerBlock =
      static_cast<size_t>(get(cudaDevAttrReservedSharedMemoryPerBlock));
  prop->hostRegisterSupported = get(cudaDevAttrHostRegisterSupported);
  prop->memoryPoolsSupported = get(cudaDevAttrMemoryPoolsSupported);
  prop->gpuDirectRDMASupported = get(cudaDevAttrGPUDirectRDMASupported);
  prop->clusterLaunch = get(cudaDevAttrClusterLaunch);
  prop->ipcEventSupported = get(cudaDevAttrIpcEventSupport);
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* canAccessPeer, int device, int peerDevice) {
  if (canAccessPeer == nullptr) return finish(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(device); e != cudaSuccess) return finish(e);
  if (const cudaError_t e = check_device(peerDevice); e != cudaSuccess) return finish(e);
  // All simulated devices share host memory; a device is not its own peer.
  *canAccessPeer = device != peerDevice ? 1 : 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceFlags(unsigned int* flags) {
  if (flags == nullptr) return finish(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  // CUDA always reports cudaDeviceMapHost.
  *flags = s.devices[static_cast<size_t>(current_device())].flags | cudaDeviceMapHost;
  return cudaSuccess;
}

cudaError_t cudaSetDeviceFlags(unsigned int flags) {
  const unsigned schedule = flags & cudaDeviceScheduleMask;
  if ((flags & ~static_cast<unsigned>(cudaDeviceMask)) != 0 ||
      (schedule != cudaDeviceScheduleAuto && schedule != cudaDeviceScheduleSpin &&
       schedule != cudaDeviceScheduleYield && schedule != cudaDeviceScheduleBlockingSync)) {
    return finish(cudaErrorInvalidValue);
  }
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.devices[static_cast<size_t>(current_device())].flags = flags;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  const CallClock clock;
  State& s = state();
  std::unique_lock lock(s.mutex);
  const int device = current_device();
  if (count_call(s, device, &cudasim_call_counts::synchronize)) {
    return finish(injected_error(&cudasim_call_counts::synchronize));
  }
  std::vector<Ticket> tickets;
  for (const auto& [id, st] : s.streams) {
    if (st.device == device) tickets.push_back({id, st.enqueued});
  }
  for (const Ticket t : tickets) wait_for(lock, s, t);
  return cudaSuccess;
}

cudaError_t cudaDeviceReset(void) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const int device = current_device();
  reset_device_streams(s, device);
  reset_device_events(s, device);
  free_device_allocations(s, device);
  release_device_vmm(s, device);
  s.devices[static_cast<size_t>(device)].flags = 0;
  s.devices[static_cast<size_t>(device)].peer_access = 0;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* runtimeVersion) {
  if (runtimeVersion == nullptr) return finish(cudaErrorInvalidValue);
  *runtimeVersion = kRuntimeVersion;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* driverVersion) {
  if (driverVersion == nullptr) return finish(cudaErrorInvalidValue);
  *driverVersion = kRuntimeVersion;
  return cudaSuccess;
}

}  // extern "C"
