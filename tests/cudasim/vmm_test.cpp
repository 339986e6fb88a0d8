// The driver VMM API, reached through cudaGetDriverEntryPointByVersion as real programs do.
#include <cuda.h>
#include <sys/mman.h>

#include <csignal>
#include <cstring>

#include "sim_test.h"

// Under ASan or TSan, let a SIGSEGV kill the process so that the death tests can see it.
extern "C" const char* __asan_default_options() { return "handle_segv=0"; }
extern "C" const char* __tsan_default_options() { return "handle_segv=0"; }

namespace {

constexpr size_t kGranularity = size_t{2} << 20;

struct Driver {
  decltype(&cuMemAddressReserve) reserve;
  decltype(&cuMemAddressFree) address_free;
  decltype(&cuMemCreate) create;
  decltype(&cuMemRelease) release;
  decltype(&cuMemMap) map;
  decltype(&cuMemUnmap) unmap;
  decltype(&cuMemSetAccess) set_access;
  decltype(&cuMemGetAllocationGranularity) granularity;
};

template <typename F>
void load(const char* name, F* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  ASSERT_EQ(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &status),
            cudaSuccess);
  ASSERT_EQ(status, cudaDriverEntryPointSuccess) << name;
  ASSERT_NE(fn, nullptr) << name;
  *out = reinterpret_cast<F>(fn);
}

class Vmm : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    load("cuMemAddressReserve", &d.reserve);
    load("cuMemAddressFree", &d.address_free);
    load("cuMemCreate", &d.create);
    load("cuMemRelease", &d.release);
    load("cuMemMap", &d.map);
    load("cuMemUnmap", &d.unmap);
    load("cuMemSetAccess", &d.set_access);
    load("cuMemGetAllocationGranularity", &d.granularity);
  }

  static CUmemAllocationProp prop(int device = 0) {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
  }

  static CUmemAccessDesc access(CUmemAccess_flags flags, int device = 0) {
    CUmemAccessDesc a{};
    a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    a.location.id = device;
    a.flags = flags;
    return a;
  }

  Driver d{};
};

TEST_F(Vmm, Granularity) {
  size_t g = 0;
  const CUmemAllocationProp p = prop();
  ASSERT_EQ(d.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  EXPECT_EQ(g, kGranularity);
  ASSERT_EQ(d.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_SUCCESS);
  EXPECT_EQ(g, kGranularity);
  const CUmemAllocationProp bad = prop(9);
  EXPECT_EQ(d.granularity(&g, &bad, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.granularity(nullptr, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Vmm, FullLifecycleWithData) {
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, 4 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(base % kGranularity, 0u);
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle h1 = 0;
  CUmemGenericAllocationHandle h2 = 0;
  ASSERT_EQ(d.create(&h1, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&h2, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 3 * kGranularity);
  EXPECT_EQ(counters().mallocs, 2u);
  // Map h2 then h1 contiguously, in that order.
  ASSERT_EQ(d.map(base, 2 * kGranularity, 0, h2, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base + 2 * kGranularity, kGranularity, 0, h1, 0), CUDA_SUCCESS);
  const CUmemAccessDesc rw = access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(d.set_access(base, 3 * kGranularity, &rw, 1), CUDA_SUCCESS);
  auto* bytes = reinterpret_cast<unsigned char*>(base);
  std::memset(bytes, 0x3c, 3 * kGranularity);
  EXPECT_EQ(bytes[3 * kGranularity - 1], 0x3c);
  // Runtime copies accept mapped ranges spanning several mappings.
  unsigned char host[64] = {};
  ASSERT_CUDA(cudaMemcpy(host, bytes + 2 * kGranularity - 32, 64, cudaMemcpyDeviceToHost));
  EXPECT_EQ(host[63], 0x3c);
  cudaPointerAttributes attr{};
  ASSERT_CUDA(cudaPointerGetAttributes(&attr, bytes + kGranularity));
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  // Release while mapped: memory stays until the unmap.
  ASSERT_EQ(d.release(h1), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 3 * kGranularity);
  EXPECT_EQ(bytes[2 * kGranularity], 0x3c);
  ASSERT_EQ(d.unmap(base, 3 * kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 2 * kGranularity);
  // Remapping h2 shows the same physical memory.
  ASSERT_EQ(d.map(base + kGranularity, 2 * kGranularity, 0, h2, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.set_access(base + kGranularity, 2 * kGranularity, &rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(bytes[kGranularity + 5], 0x3c);
  ASSERT_EQ(d.unmap(base + kGranularity, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h2), CUDA_SUCCESS);
  ASSERT_EQ(d.address_free(base, 4 * kGranularity), CUDA_SUCCESS);
  const cudasim_counters c = counters();
  EXPECT_EQ(c.in_use_bytes, 0u);
  EXPECT_EQ(c.peak_bytes, 3 * kGranularity);
  EXPECT_EQ(c.maps, 3u);
  EXPECT_EQ(c.unmaps, 2u);
  EXPECT_EQ(c.frees, 2u);
}

TEST_F(Vmm, Validation) {
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr base = 0;
  EXPECT_EQ(d.reserve(&base, kGranularity + 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.reserve(&base, kGranularity, 3, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.create(&h, 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.create(&h, 0, &p, 0), CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp other = prop(5);
  EXPECT_EQ(d.create(&h, kGranularity, &other, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(d.release(12345), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.reserve(&base, 4 * kGranularity, 4 * kGranularity, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(base % (4 * kGranularity), 0u);
  ASSERT_EQ(d.create(&h, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.map(base, 2 * kGranularity, 0, 999, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.map(base, 3 * kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // > handle
  EXPECT_EQ(d.map(base + 4096, kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.map(base + 3 * kGranularity, 2 * kGranularity, 0, h, 0),
            CUDA_ERROR_INVALID_VALUE);  // runs past the reservation
  ASSERT_EQ(d.map(base, 2 * kGranularity, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.map(base + kGranularity, kGranularity, kGranularity, h, 0),
            CUDA_ERROR_ALREADY_MAPPED);
  EXPECT_EQ(d.unmap(base, kGranularity), CUDA_ERROR_INVALID_VALUE);  // part of a mapping
  EXPECT_EQ(d.unmap(base + 2 * kGranularity, kGranularity), CUDA_ERROR_INVALID_VALUE);
  const CUmemAccessDesc rw = access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  const CUmemAccessDesc bad_device = access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, 7);
  EXPECT_EQ(d.set_access(base, 4 * kGranularity, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.set_access(base, 2 * kGranularity, &bad_device, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.set_access(base, 2 * kGranularity, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.address_free(base, 4 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // still mapped
  ASSERT_EQ(d.unmap(base, 2 * kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(d.address_free(base, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // wrong size
  ASSERT_EQ(d.address_free(base, 4 * kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(d.address_free(base, 4 * kGranularity), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.release(h), CUDA_SUCCESS);
  EXPECT_EQ(d.release(h), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Vmm, CreateCountsAgainstCapacity) {
  ASSERT_EQ(cudasim_set_capacity(0, 3 * kGranularity), 0);
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle h1 = 0;
  CUmemGenericAllocationHandle h2 = 0;
  ASSERT_EQ(d.create(&h1, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.create(&h2, 2 * kGranularity, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  void* ptr = nullptr;
  EXPECT_EQ(cudaMalloc(&ptr, 2 * kGranularity), cudaErrorMemoryAllocation);
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 1), 0);
  EXPECT_EQ(d.create(&h2, kGranularity, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(d.create(&h2, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h1), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h2), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 0u);
}

TEST_F(Vmm, DeviceResetReleasesPhysicalMemory) {
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp p = prop();
  ASSERT_EQ(d.reserve(&base, kGranularity, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&h, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base, kGranularity, 0, h, 0), CUDA_SUCCESS);
  ASSERT_CUDA(cudaDeviceReset());
  EXPECT_EQ(counters().in_use_bytes, 0u);
  EXPECT_EQ(d.release(h), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.unmap(base, kGranularity), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.address_free(base, kGranularity), CUDA_SUCCESS);  // reservations survive
}

class VmmDeath : public Vmm {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Vmm::SetUp();
  }
};

TEST_F(VmmDeath, WriteToReservedButUnmappedPageFaults) {
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, kGranularity, 0, 0, 0), CUDA_SUCCESS);
  auto* p = reinterpret_cast<volatile char*>(base);
  EXPECT_EXIT(*p = 1, ::testing::KilledBySignal(SIGSEGV), "");
  ASSERT_EQ(d.address_free(base, kGranularity), CUDA_SUCCESS);
}

TEST_F(VmmDeath, WriteToMappedPageWithoutAccessFaults) {
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle h = 0;
  const CUmemAllocationProp p = prop();
  ASSERT_EQ(d.reserve(&base, kGranularity, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&h, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base, kGranularity, 0, h, 0), CUDA_SUCCESS);
  auto* ptr = reinterpret_cast<volatile char*>(base);
  EXPECT_EXIT(*ptr = 1, ::testing::KilledBySignal(SIGSEGV), "");
  const CUmemAccessDesc ro = access(CU_MEM_ACCESS_FLAGS_PROT_READ);
  ASSERT_EQ(d.set_access(base, kGranularity, &ro, 1), CUDA_SUCCESS);
  EXPECT_EQ(ptr[100], 0);  // readable now, still not writable
  EXPECT_EXIT(ptr[100] = 1, ::testing::KilledBySignal(SIGSEGV), "");
  ASSERT_EQ(d.unmap(base, kGranularity), CUDA_SUCCESS);
  EXPECT_EXIT(static_cast<void>(ptr[100]), ::testing::KilledBySignal(SIGSEGV), "");
  ASSERT_EQ(d.release(h), CUDA_SUCCESS);
  ASSERT_EQ(d.address_free(base, kGranularity), CUDA_SUCCESS);
}

}  // namespace
