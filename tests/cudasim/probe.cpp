// A tiny program run by config_test under chosen environment variables.
//   probe devices        prints "devices=N capacity=BYTES"
//   probe alloc          a fixed sequence of allocations (see config_test's report check)
//   probe unimplemented  calls a runtime function cudasim does not implement
//   probe lookup         looks up a driver function cudasim lacks, and one it has
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

int fail(const char* what) {
  std::fprintf(stderr, "probe: %s failed\n", what);
  return 1;
}

template <typename F>
F driver(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status);
  return reinterpret_cast<F>(fn);
}

int alloc() {
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  if (cudaMalloc(&a, 1000) != cudaSuccess || cudaMalloc(&b, 2048) != cudaSuccess ||
      cudaMalloc(&c, 1 << 20) != cudaSuccess || cudaFree(a) != cudaSuccess ||
      cudaFree(b) != cudaSuccess) {
    return fail("cudaMalloc/cudaFree");
  }
  const auto create = driver<decltype(&cuMemCreate)>("cuMemCreate");
  const auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
  const auto reserve = driver<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  const auto address_free = driver<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  const auto map = driver<decltype(&cuMemMap)>("cuMemMap");
  const auto unmap = driver<decltype(&cuMemUnmap)>("cuMemUnmap");
  if (!create || !release || !reserve || !address_free || !map || !unmap) return fail("lookup");
  const size_t size = size_t{2} << 20;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  if (create(&h, size, &prop, 0) != CUDA_SUCCESS || reserve(&va, size, 0, 0, 0) != CUDA_SUCCESS ||
      map(va, size, 0, h, 0) != CUDA_SUCCESS || unmap(va, size) != CUDA_SUCCESS ||
      release(h) != CUDA_SUCCESS || address_free(va, size) != CUDA_SUCCESS) {
    return fail("VMM");
  }
  return 0;  // c stays allocated: the report shows it in use
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return fail("usage");
  if (std::strcmp(argv[1], "devices") == 0) {
    int count = 0;
    size_t free = 0;
    size_t total = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
      return fail("query");
    }
    std::printf("devices=%d capacity=%zu\n", count, total);
    return 0;
  }
  if (std::strcmp(argv[1], "alloc") == 0) return alloc();
  if (std::strcmp(argv[1], "lookup") == 0) {
    const bool missing = driver<void*>("cuNoSuchFunction") == nullptr;
    const bool present = driver<void*>("cuMemCreate") != nullptr;
    std::printf("missing=%d present=%d\n", missing ? 1 : 0, present ? 1 : 0);
    return 0;
  }
  if (std::strcmp(argv[1], "unimplemented") == 0) {
    // A function cudasim does not export at all (cudaMallocManaged, used here before, is now a
    // loud not-supported stub because PyTorch's libraries import it).
    void* p = nullptr;
    size_t pitch = 0;
    const cudaError_t e = cudaMallocPitch(&p, &pitch, 16, 16);
    std::printf("cudaMallocPitch returned %d\n", static_cast<int>(e));
    return 0;
  }
  return fail("mode");
}
