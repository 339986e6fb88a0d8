// A tiny program run by config_test under chosen environment variables.
//   probe devices        prints "devices=N capacity=BYTES"
//   probe alloc          a fixed sequence of allocations (see config_test's report check)
//   probe unimplemented  calls a runtime function cudasim does not implement
//   probe lookup         looks up a driver function cudasim lacks, and one it has
//   probe vmm            per device: the VMM attribute and what cuMemCreate and
//                        cuMemGetAllocationGranularity return; then what cudaMalloc returns
//   probe footprint      per size, "SIZE:TAKEN": what one cudaMalloc of SIZE took from
//                        cudaMemGetInfo's free memory (CUDASIM_MALLOC_PAGE); then "async
//                        SIZE:TAKEN" for one cudaMallocAsync
//   probe shared_pages   a 3 MiB cudaMalloc, small ones beside it, then the frees: "STEP:HELD"
//                        after each, HELD what cudaMemGetInfo shows taken
//   probe aligned_2mib, aligned_64kib   20 cudaMallocs of 1-9 MiB, each written at both ends:
//   "aligned=N"
//                        counts those starting on a multiple of CUDASIM_MALLOC_PAGE's page
//   probe best_fit       with CUDASIM_MALLOC_PAGE=2MiB, which of two pages with room a small
//                        allocation goes into: "STEP:HELD" as shared_pages prints
//   probe random_pages   random cudaMallocs and cudaFrees under CUDASIM_MALLOC_PAGE=2MiB,
//                        what cudaMemGetInfo shows checked against bounds after each step;
//                        prints "ok" or the first step out of bounds
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <random>
#include <utility>
#include <vector>

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
  const auto set_access = driver<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  if (!create || !release || !reserve || !address_free || !map || !unmap || !set_access) {
    return fail("lookup");
  }
  const size_t size = size_t{2} << 20;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  if (create(&h, size, &prop, 0) != CUDA_SUCCESS || reserve(&va, size, 0, 0, 0) != CUDA_SUCCESS ||
      map(va, size, 0, h, 0) != CUDA_SUCCESS || set_access(va, size, &access, 1) != CUDA_SUCCESS ||
      unmap(va, size) != CUDA_SUCCESS || release(h) != CUDA_SUCCESS ||
      address_free(va, size) != CUDA_SUCCESS) {
    return fail("VMM");
  }
  // Failed calls are calls too: one more malloc in the report's call counts.
  void* too_big = nullptr;
  if (cudaMalloc(&too_big, ~size_t{0}) != cudaErrorMemoryAllocation) return fail("huge cudaMalloc");
  (void)cudaGetLastError();
  if (cudaDeviceSynchronize() != cudaSuccess) return fail("cudaDeviceSynchronize");
  return 0;  // c stays allocated: the report shows it in use
}

int vmm() {
  const auto attribute = driver<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
  const auto create = driver<decltype(&cuMemCreate)>("cuMemCreate");
  const auto release = driver<decltype(&cuMemRelease)>("cuMemRelease");
  const auto granularity =
      driver<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
  if (!attribute || !create || !release || !granularity) return fail("lookup");
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return fail("cudaGetDeviceCount");
  for (int device = 0; device < count; ++device) {
    int supported = -1;
    if (attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) !=
        CUDA_SUCCESS) {
      return fail("cuDeviceGetAttribute");
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    CUmemGenericAllocationHandle h = 0;
    const CUresult created = create(&h, size_t{2} << 20, &prop, 0);
    if (created == CUDA_SUCCESS && release(h) != CUDA_SUCCESS) return fail("cuMemRelease");
    size_t g = 0;
    const CUresult granular = granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
    std::printf("device %d: vmm=%d create=%d granularity=%d\n", device, supported,
                static_cast<int>(created), static_cast<int>(granular));
  }
  void* p = nullptr;
  const cudaError_t malloced = cudaMalloc(&p, 1 << 20);
  std::printf("malloc=%d\n", static_cast<int>(malloced));
  std::fflush(stdout);  // before the CUDASIM_REPORT line, written at exit
  return malloced == cudaSuccess && cudaFree(p) == cudaSuccess ? 0 : 1;
}

int footprint() {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  for (const std::size_t size :
       {std::size_t{1}, std::size_t{512}, kMiB, kMiB + 1, 3 * kMiB, 4 * kMiB, 5 * kMiB + 300}) {
    std::size_t before = 0;
    std::size_t after = 0;
    std::size_t total = 0;
    void* p = nullptr;
    if (cudaMemGetInfo(&before, &total) != cudaSuccess || cudaMalloc(&p, size) != cudaSuccess ||
        cudaMemGetInfo(&after, &total) != cudaSuccess || cudaFree(p) != cudaSuccess) {
      return fail("footprint");
    }
    std::printf("%zu:%zu\n", size, before - after);
  }
  // cudaMallocAsync takes memory as cudaMalloc does.
  std::size_t before = 0;
  std::size_t after = 0;
  std::size_t total = 0;
  void* p = nullptr;
  if (cudaMemGetInfo(&before, &total) != cudaSuccess ||
      cudaMallocAsync(&p, 3 * kMiB, nullptr) != cudaSuccess ||
      cudaStreamSynchronize(nullptr) != cudaSuccess ||
      cudaMemGetInfo(&after, &total) != cudaSuccess || cudaFreeAsync(p, nullptr) != cudaSuccess ||
      cudaStreamSynchronize(nullptr) != cudaSuccess) {
    return fail("footprint of cudaMallocAsync");
  }
  std::printf("async %zu:%zu\n", 3 * kMiB, before - after);
  return 0;
}

// Prints "STEP:HELD", HELD what cudaMemGetInfo shows taken; false if it cannot be read.
bool held(const char* step) {
  std::size_t free = 0;
  std::size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return false;
  std::printf("%s:%zu\n", step, total - free);
  return true;
}

// What small allocations share (CUDASIM_MALLOC_PAGE=2MiB): the rest of a large allocation's
// last page, then a page of their own, each page given back when nothing is left in it.
int shared_pages() {
  constexpr std::size_t kKiB = 1024;
  void* large = nullptr;
  void* small[4] = {};
  const bool ok = cudaMalloc(&large, 3 * 1024 * kKiB) == cudaSuccess && held("large") &&
                  cudaMalloc(&small[0], 512 * kKiB) == cudaSuccess && held("small") &&
                  cudaMalloc(&small[1], 512 * kKiB) == cudaSuccess && held("small") &&
                  cudaMalloc(&small[2], 1) == cudaSuccess && held("small") &&
                  cudaMalloc(&small[3], 1024 * kKiB) == cudaSuccess && held("small") &&
                  cudaFree(large) == cudaSuccess && held("free large") &&
                  cudaFree(small[0]) == cudaSuccess && held("free small") &&
                  cudaFree(small[1]) == cudaSuccess && held("free small") &&
                  cudaFree(small[2]) == cudaSuccess && held("free small") &&
                  cudaFree(small[3]) == cudaSuccess && held("free small");
  return ok ? 0 : fail("shared_pages");
}

// Two large allocations leave 1 MiB and 1.5 MiB free at the ends of their last pages; a small
// one of 0.75 MiB fits both and goes into the fuller page, the first one's: freeing the first
// then gives back only its own page, freeing the second both of its pages.
int best_fit() {
  constexpr std::size_t kKiB = 1024;
  void* first = nullptr;
  void* second = nullptr;
  void* small = nullptr;
  const bool ok = cudaMalloc(&first, 3072 * kKiB) == cudaSuccess &&
                  cudaMalloc(&second, 2560 * kKiB) == cudaSuccess &&
                  cudaMalloc(&small, 768 * kKiB) == cudaSuccess && held("small") &&
                  cudaFree(first) == cudaSuccess && held("free first") &&
                  cudaFree(second) == cudaSuccess && held("free second") &&
                  cudaFree(small) == cudaSuccess && held("free small");
  return ok ? 0 : fail("best_fit");
}

// How many of 20 allocations of more than 1 MiB start on a multiple of `page`; each one's first
// and last bytes are written, so its whole range is mapped.
int aligned(std::size_t page) {
  std::mt19937_64 random(5);
  int count = 0;
  for (int i = 0; i < 20; ++i) {
    const std::size_t size = (std::size_t{1} << 20) + 1 + random() % (std::size_t{8} << 20);
    void* p = nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess) return fail("cudaMalloc");
    char* bytes = static_cast<char*>(p);
    if (cudaMemset(bytes, 1, 1) != cudaSuccess ||
        cudaMemset(bytes + size - 1, 2, 1) != cudaSuccess) {
      return fail("cudaMemset");
    }
    count += reinterpret_cast<std::uintptr_t>(p) % page == 0;
    if (cudaFree(p) != cudaSuccess) return fail("cudaFree");
  }
  std::printf("aligned=%d\n", count);
  return 0;
}

// Whatever the order of mallocs and frees, what is held stays whole pages, no less than the
// live allocations' bytes, no more than each of them alone on its pages, and nothing once all
// are freed.
int random_pages() {
  constexpr std::size_t kPage = std::size_t{2} << 20;
  std::mt19937_64 random(17);
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t free = 0;
  std::size_t total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return fail("cudaMemGetInfo");
  const std::size_t start = total - free;
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || random() % 100 < 55) {
      // Mostly small (under half a page), some large, some exact pages.
      const std::uint64_t kind = random() % 10;
      const std::size_t size = kind < 6   ? 1 + random() % (kPage / 2)
                               : kind < 9 ? kPage / 2 + 1 + random() % (6 * kPage)
                                          : kPage * (1 + random() % 3);
      void* p = nullptr;
      if (cudaMalloc(&p, size) != cudaSuccess) return fail("cudaMalloc");
      live.emplace_back(p, size);
    } else {
      const std::size_t at = random() % live.size();
      if (cudaFree(live[at].first) != cudaSuccess) return fail("cudaFree");
      live[at] = live.back();
      live.pop_back();
    }
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return fail("cudaMemGetInfo");
    const std::size_t held = total - free - start;
    std::size_t bytes = 0;
    std::size_t alone = 0;
    for (const auto& [p, size] : live) {
      bytes += size;
      alone += (size + kPage - 1) / kPage * kPage;
    }
    if (held % kPage != 0 || held < bytes || held > alone) {
      std::printf("step %d: %zu held for %zu live bytes (at most %zu)\n", step, held, bytes, alone);
      return 1;
    }
  }
  for (const auto& [p, size] : live) cudaFree(p);
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return fail("cudaMemGetInfo");
  if (total - free != start) {
    std::printf("%zu held after every free\n", total - free - start);
    return 1;
  }
  std::printf("ok\n");
  return 0;
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
  if (std::strcmp(argv[1], "vmm") == 0) return vmm();
  if (std::strcmp(argv[1], "footprint") == 0) return footprint();
  if (std::strcmp(argv[1], "shared_pages") == 0) return shared_pages();
  if (std::strcmp(argv[1], "random_pages") == 0) return random_pages();
  if (std::strcmp(argv[1], "best_fit") == 0) return best_fit();
  if (std::strcmp(argv[1], "aligned_2mib") == 0) return aligned(std::size_t{2} << 20);
  if (std::strcmp(argv[1], "aligned_64kib") == 0) return aligned(std::size_t{64} << 10);
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
