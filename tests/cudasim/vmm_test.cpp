// The driver VMM API, reached through cudaGetDriverEntryPointByVersion as real programs do.
// cudasim holds programs to CUDA's documented rules (RulesOf* tests below, one per rule), so
// that what works here works on a GPU.
#include <cuda.h>
#include <sys/mman.h>

#include <csignal>
#include <cstring>

#include "sim_test.h"
#include "vmm_driver.h"

// Under ASan or TSan, let a SIGSEGV kill the process so that the death tests can see it.
extern "C" const char* __asan_default_options() { return "handle_segv=0"; }
extern "C" const char* __tsan_default_options() { return "handle_segv=0"; }

namespace {

constexpr size_t kGranularity = size_t{2} << 20;

class Vmm : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    load_vmm_driver(&d);
  }

  static CUmemAllocationProp prop(int device = 0) { return device_memory(device); }
  static CUmemAccessDesc access(CUmemAccess_flags flags, int device = 0) {
    return device_access(flags, device);
  }
  // One page reserved, created and mapped at *base, with no access set yet; and its undoing.
  void map_one_page(CUdeviceptr* base, CUmemGenericAllocationHandle* handle) {
    const CUmemAllocationProp p = prop();
    ASSERT_EQ(d.reserve(base, kGranularity, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(d.create(handle, kGranularity, &p, 0), CUDA_SUCCESS);
    ASSERT_EQ(d.map(*base, kGranularity, 0, *handle, 0), CUDA_SUCCESS);
  }
  void unmap_one_page(CUdeviceptr base, CUmemGenericAllocationHandle handle) {
    ASSERT_EQ(d.unmap(base, kGranularity), CUDA_SUCCESS);
    ASSERT_EQ(d.release(handle), CUDA_SUCCESS);
    ASSERT_EQ(d.address_free(base, kGranularity), CUDA_SUCCESS);
  }

  VmmDriver d{};
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
  EXPECT_EQ(d.granularity(nullptr, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_INVALID_VALUE);
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
  CUmemGenericAllocationHandle small = 0;
  ASSERT_EQ(d.create(&small, kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.map(base + kGranularity, kGranularity, 0, small, 0), CUDA_ERROR_ALREADY_MAPPED);
  ASSERT_EQ(d.release(small), CUDA_SUCCESS);
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

// Physical memory is backed by one sparse file per device; what a release gives back is handed
// out again, so a process that creates and releases pages out of order for hours (a benchmark)
// does not run out of it. Two 16 TiB pages alive, the older one released and a new one created,
// round after round: without reuse the third new page would find the file's 64 TiB used up.
TEST_F(Vmm, ReleasedMemoryIsHandedOutAgain) {
  constexpr size_t kHuge = size_t{16} << 40;  // nothing touched: only bookkeeping
  ASSERT_EQ(cudasim_set_capacity(0, 3 * kHuge), 0);
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle older = 0;
  CUmemGenericAllocationHandle newer = 0;
  ASSERT_EQ(d.create(&older, kHuge, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&newer, kHuge, &p, 0), CUDA_SUCCESS);
  for (int round = 0; round < 8; ++round) {
    ASSERT_EQ(d.release(older), CUDA_SUCCESS);
    older = newer;
    ASSERT_EQ(d.create(&newer, kHuge, &p, 0), CUDA_SUCCESS) << "round " << round;
  }
  ASSERT_EQ(d.release(older), CUDA_SUCCESS);
  ASSERT_EQ(d.release(newer), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 0u);
}

// Pages created in the space of released ones never share memory with each other or with the
// pages still alive beside them, and start zeroed like any new page.
TEST_F(Vmm, PagesInReleasedSpaceDoNotOverlap) {
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle wide = 0;
  CUmemGenericAllocationHandle kept = 0;
  ASSERT_EQ(d.create(&wide, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&kept, kGranularity, &p, 0), CUDA_SUCCESS);
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, 3 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  const CUmemAccessDesc rw = access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  auto* bytes = reinterpret_cast<unsigned char*>(base);
  ASSERT_EQ(d.map(base, 2 * kGranularity, 0, wide, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.set_access(base, 2 * kGranularity, &rw, 1), CUDA_SUCCESS);
  std::memset(bytes, 0x5a, 2 * kGranularity);  // the released memory held data
  ASSERT_EQ(d.unmap(base, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.release(wide), CUDA_SUCCESS);
  // Two pages in the released space, mapped with the live one: each keeps its own bytes.
  CUmemGenericAllocationHandle low = 0;
  CUmemGenericAllocationHandle high = 0;
  ASSERT_EQ(d.create(&low, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&high, kGranularity, &p, 0), CUDA_SUCCESS);
  const CUmemGenericAllocationHandle pages[] = {low, high, kept};
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(d.map(base + i * kGranularity, kGranularity, 0, pages[i], 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(d.set_access(base, 3 * kGranularity, &rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(bytes[0], 0);  // zeroed, not the released page's 0x5a
  EXPECT_EQ(bytes[2 * kGranularity - 1], 0);
  for (size_t i = 0; i < 3; ++i) std::memset(bytes + i * kGranularity, int(i + 1), kGranularity);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(bytes[i * kGranularity], i + 1) << "page " << i;
    EXPECT_EQ(bytes[(i + 1) * kGranularity - 1], i + 1) << "page " << i;
  }
  ASSERT_EQ(d.unmap(base, 3 * kGranularity), CUDA_SUCCESS);
  for (const CUmemGenericAllocationHandle page : pages) ASSERT_EQ(d.release(page), CUDA_SUCCESS);
  ASSERT_EQ(d.address_free(base, 3 * kGranularity), CUDA_SUCCESS);
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

// cuMemMap maps a whole handle: offset 0 (cuda.h: "currently must be zero") and the handle's
// size. CUDA has no partial mappings of a handle, so cudasim has none either.
TEST_F(Vmm, RulesOfMapWholeHandleAtOffsetZero) {
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, 4 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d.create(&h, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.map(base, kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);             // first half
  EXPECT_EQ(d.map(base, kGranularity, kGranularity, h, 0), CUDA_ERROR_INVALID_VALUE);  // second
  EXPECT_EQ(d.map(base, 2 * kGranularity, kGranularity, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.map(base, 2 * kGranularity, 4096, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.map(base, 4 * kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);  // beyond it
  EXPECT_EQ(counters().maps, 0u);
  // The same handle may be mapped whole at several addresses, as in CUDA.
  ASSERT_EQ(d.map(base, 2 * kGranularity, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base + 2 * kGranularity, 2 * kGranularity, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.unmap(base, 4 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h), CUDA_SUCCESS);
  ASSERT_EQ(d.address_free(base, 4 * kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(counters().in_use_bytes, 0u);
}

// cuMemUnmap takes whole mappings, one or several adjacent ones, starting at a mapping: "cannot
// unmap a sub-range of an address range mapped by cuMemCreate / cuMemMap".
TEST_F(Vmm, RulesOfUnmapWholeMappings) {
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, 6 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle a = 0, b = 0, c = 0;
  ASSERT_EQ(d.create(&a, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&b, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&c, kGranularity, &p, 0), CUDA_SUCCESS);
  // a at [0, 1), b at [1, 3), a gap at [3, 4), c at [4, 5) granules.
  ASSERT_EQ(d.map(base, kGranularity, 0, a, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base + kGranularity, 2 * kGranularity, 0, b, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base + 4 * kGranularity, kGranularity, 0, c, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.unmap(base + kGranularity, kGranularity), CUDA_ERROR_INVALID_VALUE);      // b's head
  EXPECT_EQ(d.unmap(base + 2 * kGranularity, kGranularity), CUDA_ERROR_INVALID_VALUE);  // tail
  EXPECT_EQ(d.unmap(base, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // a and half of b
  EXPECT_EQ(d.unmap(base, 5 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // across the gap
  EXPECT_EQ(d.unmap(base + 3 * kGranularity, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.unmap(base, kGranularity + 4096), CUDA_ERROR_INVALID_VALUE);  // not granular
  EXPECT_EQ(d.unmap(base + 4096, kGranularity), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.unmap(base, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(counters().unmaps, 0u);
  ASSERT_EQ(d.unmap(base, 3 * kGranularity), CUDA_SUCCESS);  // a and b, both whole
  ASSERT_EQ(d.unmap(base + 4 * kGranularity, kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(counters().unmaps, 2u);
  for (const CUmemGenericAllocationHandle h : {a, b, c}) ASSERT_EQ(d.release(h), CUDA_SUCCESS);
  ASSERT_EQ(d.address_free(base, 6 * kGranularity), CUDA_SUCCESS);
}

// Sizes and addresses (hints too) are multiples of the granularity everywhere; alignments are
// powers of two.
TEST_F(Vmm, RulesOfGranularity) {
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(d.create(&h, kGranularity + 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.create(&h, kGranularity / 2, &p, 0), CUDA_ERROR_INVALID_VALUE);
  CUdeviceptr base = 0;
  EXPECT_EQ(d.reserve(&base, kGranularity / 2, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.reserve(&base, kGranularity, 3 * kGranularity, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.reserve(&base, 4 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  CUdeviceptr other = 0;
  // The address hint too (CUDA asks only for the page size there; stricter is safe).
  EXPECT_EQ(d.reserve(&other, kGranularity, 0, base + 4 * kGranularity + 4096, 0),
            CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.create(&h, 2 * kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(d.map(base + 4096, 2 * kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.map(base + kGranularity / 2, 2 * kGranularity, 0, h, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.map(base, 2 * kGranularity, 0, h, 0), CUDA_SUCCESS);
  // cuMemSetAccess: a granular range, mapped throughout.
  const CUmemAccessDesc rw = access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  EXPECT_EQ(d.set_access(base + 4096, kGranularity, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.set_access(base, 4096, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.set_access(base, kGranularity + 4096, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.set_access(base + kGranularity / 2, kGranularity, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.set_access(base, 3 * kGranularity, &rw, 1), CUDA_ERROR_INVALID_VALUE);  // unmapped
  ASSERT_EQ(d.set_access(base, 2 * kGranularity, &rw, 1), CUDA_SUCCESS);
  ASSERT_EQ(d.unmap(base, 2 * kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h), CUDA_SUCCESS);
  // cuMemAddressFree: exactly a reservation, from its start.
  EXPECT_EQ(d.address_free(base + kGranularity, 3 * kGranularity), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.address_free(base + 4096, 4 * kGranularity - 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.address_free(base, 4 * kGranularity + 4096), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(d.address_free(base, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(d.address_free(base, 4 * kGranularity), CUDA_SUCCESS);
  // A granular hint is fine (and only a hint).
  ASSERT_EQ(d.reserve(&other, kGranularity, 0, base, 0), CUDA_SUCCESS);
  EXPECT_EQ(other % kGranularity, 0u);
  ASSERT_EQ(d.address_free(other, kGranularity), CUDA_SUCCESS);
}

TEST_F(Vmm, UnsupportedDevice) {
  int supported = -1;
  ASSERT_EQ(d.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 1);  // the default
  const CUmemAllocationProp p = prop();
  CUmemGenericAllocationHandle before = 0;
  ASSERT_EQ(d.create(&before, kGranularity, &p, 0), CUDA_SUCCESS);

  ASSERT_EQ(cudasim_set_vmm_supported(0, 0), 0);
  ASSERT_EQ(d.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(d.create(&h, kGranularity, &p, 0), CUDA_ERROR_NOT_SUPPORTED);
  size_t g = 0;
  EXPECT_EQ(d.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(d.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(d.create(&h, 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);  // bad arguments stay bad
  cudasim_counters c = counters();
  EXPECT_EQ(c.mallocs, 1u);
  EXPECT_EQ(c.in_use_bytes, kGranularity);
  // cudaMalloc, the allocator's fallback, is unaffected.
  void* ptr = nullptr;
  ASSERT_CUDA(cudaMalloc(&ptr, 4 << 20));
  ASSERT_CUDA(cudaFree(ptr));
  // A handle created before stays usable.
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, kGranularity, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base, kGranularity, 0, before, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.unmap(base, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.address_free(base, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.release(before), CUDA_SUCCESS);

  ASSERT_EQ(cudasim_set_vmm_supported(0, 1), 0);
  ASSERT_EQ(d.attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(supported, 1);
  ASSERT_EQ(d.granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);
  ASSERT_EQ(d.create(&h, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h), CUDA_SUCCESS);

  EXPECT_EQ(cudasim_set_vmm_supported(1, 0), -1);  // one device here
  EXPECT_EQ(cudasim_set_vmm_supported(-1, 0), -1);
  EXPECT_EQ(cudasim_set_vmm_supported(0, 2), -1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
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
  ASSERT_NO_FATAL_FAILURE(map_one_page(&base, &h));
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

// A new mapping has no access until cuMemSetAccess: reading it faults too.
TEST_F(VmmDeath, RulesOfAccessReadBeforeSetAccessFaults) {
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_NO_FATAL_FAILURE(map_one_page(&base, &h));
  auto* ptr = reinterpret_cast<volatile char*>(base);
  EXPECT_EXIT(static_cast<void>(ptr[kGranularity - 1]), ::testing::KilledBySignal(SIGSEGV), "");
  unmap_one_page(base, h);
}

// "all mappings start with no accessibility setup": access granted to a mapping does not
// survive its cuMemUnmap; mapping the same handle there again needs cuMemSetAccess again.
TEST_F(VmmDeath, RulesOfAccessRemapNeedsSetAccessAgain) {
  CUdeviceptr base = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_NO_FATAL_FAILURE(map_one_page(&base, &h));
  const CUmemAccessDesc rw = access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  ASSERT_EQ(d.set_access(base, kGranularity, &rw, 1), CUDA_SUCCESS);
  auto* ptr = reinterpret_cast<volatile char*>(base);
  ptr[7] = 42;
  ASSERT_EQ(d.unmap(base, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base, kGranularity, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EXIT(ptr[7] = 1, ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT(static_cast<void>(ptr[7]), ::testing::KilledBySignal(SIGSEGV), "");
  ASSERT_EQ(d.set_access(base, kGranularity, &rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(ptr[7], 42);  // same physical memory
  unmap_one_page(base, h);
}

}  // namespace
