// cudasim's libnvidia-ml.so.1: the few NVML functions that PyTorch's c10::cuda::DriverAPI
// loads (it dlopens libnvidia-ml.so.1 and asserts that each is present, and with expandable
// segments it asks NVML whether the device has fabric memory before its first cuMemCreate;
// without an NVML library it calls a null pointer). The answers are those of a single-node
// H100 PCIe: devices are found by PCI bus id, there is no NVLink fabric, and per-process
// accounting is not supported (PyTorch then leaves the per-process line out of its
// out-of-memory message). Devices come from cudasim's runtime, which this library links.
//
// NVML's header is not part of the CUDA toolkit, so its ABI is declared here: nvmlReturn_t is
// an int-sized enum, nvmlDevice_t an opaque pointer, as in NVML's public nvml.h.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kInvalidArgument = 2;
constexpr nvmlReturn_t kNotSupported = 3;
constexpr nvmlReturn_t kNotFound = 6;
constexpr int kCudaVersion = 13000;

struct DeviceTag {
  char unused;
};
DeviceTag device_tags[64];  // CUDASIM_DEVICES is at most 64

}  // namespace

struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

extern "C" {

nvmlReturn_t nvmlInit_v2(void) { return kSuccess; }

nvmlReturn_t nvmlShutdown(void) { return kSuccess; }

const char* nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case kSuccess: return "Success";
    case kInvalidArgument: return "Invalid Argument";
    case kNotSupported: return "Not Supported";
    case kNotFound: return "Not Found";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion) {
  if (cudaDriverVersion == nullptr) return kInvalidArgument;
  *cudaDriverVersion = kCudaVersion;
  return kSuccess;
}

// pciBusId as "domain:bus:device.function" in hex, e.g. "0000:01:00.0" (cudasim's device d
// sits on bus d + 1, see cudaDeviceGetAttribute(cudaDevAttrPciBusId)).
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device) {
  if (pciBusId == nullptr || device == nullptr) return kInvalidArgument;
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (std::sscanf(pciBusId, "%x:%x:%x.%x", &domain, &bus, &slot, &function) != 4) {
    return kInvalidArgument;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return kNotFound;
  for (int d = 0; d < count && d < 64; ++d) {
    int device_bus = -1, device_domain = -1, device_slot = -1;
    cudaDeviceGetAttribute(&device_bus, cudaDevAttrPciBusId, d);
    cudaDeviceGetAttribute(&device_domain, cudaDevAttrPciDomainId, d);
    cudaDeviceGetAttribute(&device_slot, cudaDevAttrPciDeviceId, d);
    if (static_cast<int>(bus) == device_bus && static_cast<int>(domain) == device_domain &&
        static_cast<int>(slot) == device_slot) {
      *device = reinterpret_cast<nvmlDevice_t>(&device_tags[d]);
      return kSuccess;
    }
  }
  return kNotFound;
}

// nvmlGpuFabricInfoV_t begins {unsigned version; unsigned char clusterUuid[16];
// nvmlReturn_t status; unsigned cliqueId; unsigned char state; ...} in every version: the
// answer of a GPU outside any NVLink fabric is status NOT_SUPPORTED, state NOT_SUPPORTED (0).
nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void* info) {
  if (device == nullptr || info == nullptr) return kInvalidArgument;
  auto* bytes = static_cast<unsigned char*>(info);
  std::memset(bytes + 4, 0, 16);  // clusterUuid
  std::memcpy(bytes + 20, &kNotSupported, sizeof(kNotSupported));
  std::memset(bytes + 24, 0, 5);  // cliqueId, state
  return kSuccess;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t, unsigned int, void*) {
  return kNotSupported;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t, unsigned int, void*) {
  return kNotSupported;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned int*, void*) {
  return kNotSupported;
}

}  // extern "C"
