// A program that reaches the driver the way the CUDA runtime does since 11.3 (and so every
// static-runtime binary): dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then
// cuGetProcAddress_v2("cuMemAlloc", ...). It links no CUDA library. Run on the stand-in
// libcuda.so.1 (standin_libcuda.cpp).
//
// Prints whose cuMemAlloc it received, a checksum of data written to and read back from every
// allocation, and the stand-in's counters: how many allocations reached the "driver".
// Argument "private-context": the current context is not the primary one. Argument "capture":
// then, with every stream reported as being captured, one stream-ordered allocation and the
// stream-ordered free of a block allocated before (Note [Stream capture] in
// preload/runtime_hooks.cpp).
#include <cuda.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#undef cuGetProcAddress

namespace {

struct StandinCounters {
  unsigned long mem_allocs;
  unsigned long mem_frees;
  unsigned long lookups;
  unsigned long primary_retains;
};

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);
using MemAlloc = CUresult (*)(CUdeviceptr*, size_t);
using MemFree = CUresult (*)(CUdeviceptr);
using MemAllocAsync = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using MemFreeAsync = CUresult (*)(CUdeviceptr, CUstream);

const char* owner(void* function) {
  Dl_info info;
  if (dladdr(function, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  return std::strstr(info.dli_fname, "cudacache_preload") != nullptr ? "cudacache" : "driver";
}

template <typename T>
T lookup(GetProcAddress get, const char* name) {
  void* function = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (get(name, &function, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS)
    return nullptr;
  return reinterpret_cast<T>(function);
}

}  // namespace

int main(int argc, char** argv) {
  const bool private_context = argc > 1 && std::strcmp(argv[1], "private-context") == 0;
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (driver == nullptr) {
    std::printf("FAIL: %s\n", dlerror());
    return 1;
  }
  auto get = reinterpret_cast<GetProcAddress>(dlsym(driver, "cuGetProcAddress_v2"));
  auto counters =
      reinterpret_cast<void (*)(StandinCounters*)>(dlsym(driver, "cudacache_standin_get_counters"));
  auto use_private =
      reinterpret_cast<void (*)(int)>(dlsym(driver, "cudacache_standin_use_private_context"));
  if (get == nullptr || counters == nullptr || use_private == nullptr) {
    std::printf("FAIL: stand-in driver symbols missing\n");
    return 1;
  }
  use_private(private_context ? 1 : 0);
  auto mem_alloc = lookup<MemAlloc>(get, "cuMemAlloc");
  auto mem_free = lookup<MemFree>(get, "cuMemFree");
  auto alloc_async = lookup<MemAllocAsync>(get, "cuMemAllocAsync");
  auto free_async = lookup<MemFreeAsync>(get, "cuMemFreeAsync");
  if (mem_alloc == nullptr || mem_free == nullptr || alloc_async == nullptr ||
      free_async == nullptr) {
    std::printf("FAIL: lookups\n");
    return 1;
  }
  std::printf("cuGetProcAddress_v2 from %s, cuMemAlloc from %s, cuMemFreeAsync from %s\n",
              owner(reinterpret_cast<void*>(get)), owner(reinterpret_cast<void*>(mem_alloc)),
              owner(reinterpret_cast<void*>(free_async)));

  // Memory the driver handed out before cudacache was involved is freed through the hook.
  CUdeviceptr early = 0;
  void* real_alloc = nullptr;
  CUdriverProcAddressQueryResult status{};
  // cuMemAlloc with a CUDA version before 3.2 is not interposed: the 32-bit original.
  get("cuMemAlloc", &real_alloc, 3010, CU_GET_PROC_ADDRESS_DEFAULT, &status);
  if (reinterpret_cast<MemAlloc>(real_alloc)(&early, 4096) != CUDA_SUCCESS) return 1;

  std::uint64_t checksum = 0;
  std::uint64_t state = 7;
  std::vector<unsigned char> pattern(512);
  for (int i = 0; i < 2000; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const size_t size = 512 + (state >> 40) % (3 << 20);
    const bool async = i % 2 == 1;
    CUdeviceptr p = 0;
    const CUresult r = async ? alloc_async(&p, size, nullptr) : mem_alloc(&p, size);
    if (r != CUDA_SUCCESS) {
      std::printf("FAIL: allocation %d: %d\n", i, static_cast<int>(r));
      return 1;
    }
    // The stand-in's memory and cudasim's are both host memory: write and read directly.
    auto* bytes = reinterpret_cast<unsigned char*>(p);
    for (size_t k = 0; k < pattern.size(); ++k) pattern[k] = static_cast<unsigned char>(state + k);
    std::memcpy(bytes + size - pattern.size(), pattern.data(), pattern.size());
    for (size_t k = 0; k < pattern.size(); ++k)
      checksum = checksum * 31 + bytes[size - pattern.size() + k];
    if ((async ? free_async(p, nullptr) : mem_free(p)) != CUDA_SUCCESS) {
      std::printf("FAIL: free %d\n", i);
      return 1;
    }
  }
  const CUresult early_free = mem_free(early);
  StandinCounters c{};
  counters(&c);
  std::printf("checksum=%llu early free=%d\n", static_cast<unsigned long long>(checksum),
              static_cast<int>(early_free));
  std::printf("driver allocations=%lu driver frees=%lu primary context retains=%lu\n", c.mem_allocs,
              c.mem_frees, c.primary_retains);
  if (argc > 1 && std::strcmp(argv[1], "capture") == 0) {
    auto set_capturing =
        reinterpret_cast<void (*)(int)>(dlsym(driver, "cudacache_standin_set_capturing"));
    if (set_capturing == nullptr) return 1;
    CUdeviceptr before = 0;
    if (alloc_async(&before, 1 << 20, nullptr) != CUDA_SUCCESS) return 1;
    set_capturing(1);
    counters(&c);
    const unsigned long driver_allocations = c.mem_allocs;
    CUdeviceptr captured = 0;
    const CUresult allocated = alloc_async(&captured, 1 << 20, nullptr);
    counters(&c);
    const CUresult refused = free_async(before, nullptr);
    const CUresult freed_captured = free_async(captured, nullptr);
    set_capturing(0);
    const CUresult freed_after = free_async(before, nullptr);
    std::printf(
        "capturing: allocation %d from the driver: %s, free of a block allocated before: "
        "%d, free of the captured allocation: %d, the first freed after: %d\n",
        static_cast<int>(allocated), c.mem_allocs > driver_allocations ? "yes" : "no",
        static_cast<int>(refused), static_cast<int>(freed_captured), static_cast<int>(freed_after));
  }
  std::fflush(stdout);  // before the runtime's exit report on stderr
  return 0;
}
