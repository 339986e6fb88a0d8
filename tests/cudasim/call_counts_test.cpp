// cudasim_get_call_counts: device calls by kind, failed ones included, each on its device.
// Runs with CUDASIM_DEVICES=2 (CMakeLists.txt).
#include <cuda.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sim_test.h"
#include "vmm_driver.h"

// Expected counts are written as designated initializers naming only the nonzero kinds.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace {

constexpr size_t kGranularity = size_t{2} << 20;

// Whole structs compare as text, so a failure shows every field.
std::string str(const cudasim_call_counts& c) {
  std::ostringstream out;
  out << "malloc=" << c.malloc << " free=" << c.free << " create=" << c.create
      << " release=" << c.release << " map=" << c.map << " unmap=" << c.unmap
      << " set_access=" << c.set_access << " synchronize=" << c.synchronize
      << " reserve=" << c.reserve << " address_free=" << c.address_free
      << " event_create=" << c.event_create << " event_record=" << c.event_record
      << " event_query=" << c.event_query << " mem_get_info=" << c.mem_get_info;
  return out.str();
}

class CallCounts : public SimTest {
 protected:
  void SetUp() override {
    SimTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    int count = 0;
    ASSERT_CUDA(cudaGetDeviceCount(&count));
    ASSERT_EQ(count, 2) << "run with CUDASIM_DEVICES=2";
  }

  static std::string counted(int device) { return str(calls(device)); }

  static CUmemAllocationProp prop(int device) { return device_memory(device); }
  static CUmemAccessDesc access(int device) {
    return device_access(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, device);
  }
};

TEST_F(CallCounts, StartAtZero) {
  EXPECT_EQ(counted(0), str({}));
  EXPECT_EQ(counted(1), str({}));
}

TEST_F(CallCounts, MallocAndFreeSucceededOrFailed) {
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_CUDA(cudaMalloc(&a, 1000));
  EXPECT_EQ(cudaMalloc(nullptr, 1000), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaMalloc(&b, 0));                                          // no memory, but a call
  EXPECT_EQ(cudaMalloc(&b, size_t{64} << 30), cudaErrorMemoryAllocation);  // over capacity
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 1), 0);
  EXPECT_EQ(cudaMalloc(&b, 256), cudaErrorMemoryAllocation);
  EXPECT_EQ(counted(0), str({.malloc = 5}));

  ASSERT_CUDA(cudaFree(nullptr));  // not a call to the device
  ASSERT_CUDA(cudaFree(a));
  EXPECT_EQ(cudaFree(a), cudaErrorInvalidValue);  // double free
  int host = 0;
  EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
  EXPECT_EQ(counted(0), str({.malloc = 5, .free = 3}));

  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  void* c = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&c, 256, s));
  EXPECT_EQ(cudaMallocAsync(nullptr, 256, s), cudaErrorInvalidValue);
  ASSERT_CUDA(cudaFreeAsync(nullptr, s));  // not counted
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_CUDA(cudaFreeAsync(c, s));
  EXPECT_EQ(cudaFreeAsync(c, s), cudaErrorInvalidValue);  // already being freed
  ASSERT_EQ(cudasim_release_stream(s), 0);
  ASSERT_CUDA(cudaStreamDestroy(s));
  EXPECT_EQ(cudaMallocAsync(&c, 256, s), cudaErrorInvalidResourceHandle);  // destroyed stream
  EXPECT_EQ(counted(0), str({.malloc = 8, .free = 5}));

  // The allocation counters count only what succeeded.
  const cudasim_counters k = counters();
  EXPECT_EQ(k.mallocs, 2u);
  EXPECT_EQ(k.frees, 2u);
  EXPECT_EQ(counted(1), str({}));
  (void)cudaGetLastError();
}

TEST_F(CallCounts, Synchronize) {
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  cudaEvent_t e = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e));
  ASSERT_CUDA(cudaDeviceSynchronize());
  ASSERT_CUDA(cudaStreamSynchronize(s));
  ASSERT_CUDA(cudaStreamSynchronize(nullptr));
  ASSERT_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
  ASSERT_CUDA(cudaEventSynchronize(e));  // never recorded: returns at once, still a call
  ASSERT_CUDA(cudaEventRecord(e, s));
  ASSERT_CUDA(cudaEventSynchronize(e));
  decltype(&cuCtxSynchronize) ctx_synchronize = nullptr;
  ASSERT_NO_FATAL_FAILURE(load_driver_function("cuCtxSynchronize", &ctx_synchronize));
  EXPECT_EQ(ctx_synchronize(), CUDA_SUCCESS);  // counted once, not twice
  EXPECT_EQ(counted(0), str({.synchronize = 7, .event_create = 1, .event_record = 1}));
  ASSERT_CUDA(cudaEventDestroy(e));
  ASSERT_CUDA(cudaStreamDestroy(s));
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventSynchronize(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(counted(0), str({.synchronize = 9, .event_create = 1, .event_record = 1}));
  EXPECT_EQ(counted(1), str({}));
  (void)cudaGetLastError();
}

// The event calls a stream-aware allocator makes, counted and failed like the others: an
// injected failure is cudaErrorUnknown, recorded as the last error, and changes nothing.
TEST_F(CallCounts, EventCallsSucceededOrFailed) {
  cudaStream_t s = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s));
  cudaEvent_t e = nullptr;
  ASSERT_EQ(cudasim_fail_nth_call(0, "event_create", 1), 0);
  EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaErrorUnknown);
  EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
  EXPECT_EQ(e, nullptr);
  ASSERT_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  ASSERT_EQ(cudasim_hold_stream(s), 0);
  ASSERT_EQ(cudasim_fail_nth_call(0, "event_record", 2), 0);
  ASSERT_CUDA(cudaEventRecord(e, s));
  EXPECT_EQ(cudaEventRecord(e, s), cudaErrorUnknown);
  EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);  // the first record still stands
  (void)cudaGetLastError();
  ASSERT_EQ(cudasim_fail_nth_call(0, "event_query", 1), 0);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorUnknown);
  EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
  ASSERT_EQ(cudasim_release_stream(s), 0);
  ASSERT_CUDA(cudaEventQuery(e));
  EXPECT_EQ(counted(0), str({.event_create = 2, .event_record = 2, .event_query = 3}));
  EXPECT_EQ(cudasim_fail_nth_call(0, "event_destroy", 1), -1);  // not a kind
  ASSERT_CUDA(cudaEventDestroy(e));
  ASSERT_CUDA(cudaStreamDestroy(s));
  EXPECT_EQ(counted(1), str({}));
}

// cudaMemGetInfo is a driver round trip an allocator may make to decide how to grow: counted
// on the current device, failed ones too, and a failure can be injected like any other kind's.
TEST_F(CallCounts, MemGetInfoIsCountedOnTheCurrentDeviceAndCanFail) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT_EQ(cudaMemGetInfo(nullptr, &total_bytes), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_EQ(counted(0), str({.mem_get_info = 2}));
  ASSERT_CUDA(cudaSetDevice(1));
  ASSERT_EQ(cudasim_fail_nth_call(1, "mem_get_info", 2), 0);
  ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  free_bytes = 7;
  EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaErrorUnknown);
  EXPECT_EQ(free_bytes, 7u);  // a failed call writes nothing
  EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
  ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT_EQ(counted(1), str({.mem_get_info = 3}));
  EXPECT_EQ(counted(0), str({.mem_get_info = 2}));
  ASSERT_CUDA(cudaSetDevice(0));
}

TEST_F(CallCounts, VmmSucceededOrFailed) {
  VmmDriver d;
  ASSERT_NO_FATAL_FAILURE(load_vmm_driver(&d));
  [[maybe_unused]] const auto& [reserve, address_free, create, release, map, unmap, set_access,
                                granularity, attribute] = d;
  const CUmemAllocationProp p = prop(0);
  size_t g = 0;
  ASSERT_EQ(granularity(&g, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM), CUDA_SUCCESS);  // not counted

  CUdeviceptr base = 0;
  ASSERT_EQ(reserve(&base, 2 * kGranularity, 0, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(reserve(&base, 4096, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemGenericAllocationHandle h = 0;
  CUmemGenericAllocationHandle unused = 0;
  ASSERT_EQ(create(&h, kGranularity, &p, 0), CUDA_SUCCESS);
  EXPECT_EQ(create(&unused, 4096, &p, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(&unused, kGranularity, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 1), 0);
  EXPECT_EQ(create(&unused, kGranularity, &p, 0), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(map(base, kGranularity, 0, h, 0), CUDA_SUCCESS);
  EXPECT_EQ(map(base, kGranularity, 0, h, 0), CUDA_ERROR_ALREADY_MAPPED);
  EXPECT_EQ(map(base + kGranularity, kGranularity, 0, 4242, 0), CUDA_ERROR_INVALID_VALUE);
  const CUmemAccessDesc rw = access(0);
  ASSERT_EQ(set_access(base, kGranularity, &rw, 1), CUDA_SUCCESS);
  EXPECT_EQ(set_access(base, 2 * kGranularity, &rw, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(address_free(base, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);  // still mapped
  EXPECT_EQ(unmap(base + kGranularity, kGranularity), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(unmap(base, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(release(h), CUDA_SUCCESS);
  EXPECT_EQ(release(h), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(address_free(base, 2 * kGranularity), CUDA_SUCCESS);
  EXPECT_EQ(counted(0), str({.create = 4,
                             .release = 2,
                             .map = 3,
                             .unmap = 2,
                             .set_access = 2,
                             .reserve = 2,
                             .address_free = 2}));
  EXPECT_EQ(counted(1), str({}));
  const cudasim_counters k = counters();
  EXPECT_EQ(k.mallocs, 1u);
  EXPECT_EQ(k.maps, 1u);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// Each call counts on the device of what it names, whatever the current device; on the
// current device when it names none or nothing valid.
TEST_F(CallCounts, EachCallCountsOnItsDevice) {
  ASSERT_CUDA(cudaSetDevice(1));
  cudaStream_t s1 = nullptr;
  ASSERT_CUDA(cudaStreamCreate(&s1));
  cudaEvent_t e1 = nullptr;
  ASSERT_CUDA(cudaEventCreate(&e1));
  void* p1 = nullptr;
  ASSERT_CUDA(cudaMalloc(&p1, 4096));    // 1: current device
  ASSERT_CUDA(cudaDeviceSynchronize());  // 1
  ASSERT_CUDA(cudaSetDevice(0));
  void* p0 = nullptr;
  ASSERT_CUDA(cudaMalloc(&p0, 4096));  // 0
  void* q1 = nullptr;
  ASSERT_CUDA(cudaMallocAsync(&q1, 4096, s1));  // 1: the stream's
  ASSERT_CUDA(cudaStreamSynchronize(s1));       // 1
  ASSERT_CUDA(cudaEventRecord(e1, s1));
  ASSERT_CUDA(cudaEventSynchronize(e1));    // 1: the event's
  ASSERT_CUDA(cudaFree(p1));                // 1: the pointer's
  ASSERT_CUDA(cudaFreeAsync(q1, nullptr));  // 1: the pointer's, not the stream's
  ASSERT_CUDA(cudaFreeAsync(p0, s1));       // 0: the pointer's
  ASSERT_CUDA(cudaDeviceSynchronize());     // 0
  EXPECT_EQ(counted(0), str({.malloc = 1, .free = 1, .synchronize = 1}));
  EXPECT_EQ(counted(1),
            str({.malloc = 2, .free = 2, .synchronize = 3, .event_create = 1, .event_record = 1}));

  ASSERT_EQ(cudasim_reset_counters(0), 0);
  ASSERT_EQ(cudasim_reset_counters(1), 0);
  VmmDriver d;
  ASSERT_NO_FATAL_FAILURE(load_vmm_driver(&d));
  [[maybe_unused]] const auto& [reserve, address_free, create, release, map, unmap, set_access,
                                granularity, attribute] = d;
  CUdeviceptr base = 0;
  ASSERT_EQ(reserve(&base, 2 * kGranularity, 0, 0, 0), CUDA_SUCCESS);  // 0: current device
  const CUmemAllocationProp on1 = prop(1);
  CUmemGenericAllocationHandle h1 = 0;
  ASSERT_EQ(create(&h1, kGranularity, &on1, 0), CUDA_SUCCESS);                // 1: prop's location
  ASSERT_EQ(map(base + kGranularity, kGranularity, 0, h1, 0), CUDA_SUCCESS);  // 1: the handle's
  const CUmemAccessDesc by0 = access(0);
  ASSERT_EQ(set_access(base + kGranularity, kGranularity, &by0, 1), CUDA_SUCCESS);  // 1: mapping
  ASSERT_EQ(unmap(base + kGranularity, kGranularity), CUDA_SUCCESS);  // 1: the mapping's
  ASSERT_EQ(release(h1), CUDA_SUCCESS);                               // 1: the handle's
  ASSERT_EQ(address_free(base, 2 * kGranularity), CUDA_SUCCESS);      // 0: current device
  EXPECT_EQ(counted(0), str({.reserve = 1, .address_free = 1}));
  EXPECT_EQ(counted(1), str({.create = 1, .release = 1, .map = 1, .unmap = 1, .set_access = 1}));

  // Invalid arguments name no device: the current one (1 now) counts them.
  ASSERT_EQ(cudasim_reset_counters(0), 0);
  ASSERT_EQ(cudasim_reset_counters(1), 0);
  ASSERT_CUDA(cudaSetDevice(1));
  int host = 0;
  EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
  EXPECT_EQ(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(&host)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(&host)),
            cudaErrorInvalidResourceHandle);
  EXPECT_EQ(release(h1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(map(base, kGranularity, 0, h1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(unmap(base, kGranularity), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(set_access(base, kGranularity, &by0, 1), CUDA_ERROR_INVALID_VALUE);
  const CUmemAllocationProp on9 = prop(9);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(create(&h, kGranularity, &on9, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(address_free(base, 2 * kGranularity), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(counted(0), str({}));
  EXPECT_EQ(counted(1), str({.free = 1,
                             .create = 1,
                             .release = 1,
                             .map = 1,
                             .unmap = 1,
                             .set_access = 1,
                             .synchronize = 2,
                             .address_free = 1}));
  ASSERT_CUDA(cudaEventDestroy(e1));
  ASSERT_CUDA(cudaStreamDestroy(s1));
  ASSERT_CUDA(cudaSetDevice(0));
  (void)cudaGetLastError();
}

TEST_F(CallCounts, ResetZeroesOneDevice) {
  for (int device : {0, 1}) {
    ASSERT_CUDA(cudaSetDevice(device));
    void* p = nullptr;
    ASSERT_CUDA(cudaMalloc(&p, 256));
    ASSERT_CUDA(cudaFree(p));
    ASSERT_CUDA(cudaDeviceSynchronize());
  }
  ASSERT_CUDA(cudaSetDevice(0));
  ASSERT_EQ(cudasim_reset_counters(0), 0);
  EXPECT_EQ(counted(0), str({}));
  EXPECT_EQ(counted(1), str({.malloc = 1, .free = 1, .synchronize = 1}));
  ASSERT_EQ(cudasim_reset_counters(1), 0);
  EXPECT_EQ(counted(1), str({}));

  cudasim_call_counts c{};
  EXPECT_EQ(cudasim_get_call_counts(2, &c), -1);
  EXPECT_EQ(cudasim_get_call_counts(-1, &c), -1);
  EXPECT_EQ(cudasim_get_call_counts(0, nullptr), -1);
}

// cudasim_thread_call_ns: the calling thread's time inside the calls cudasim counts, grown by
// each of them, not by calls it does not count nor by other threads' calls.
TEST_F(CallCounts, ThreadCallTimeGrowsWithCountedCallsOnly) {
  VmmDriver d;
  ASSERT_NO_FATAL_FAILURE(load_vmm_driver(&d));
  const CUmemAllocationProp p = prop(0);
  const CUmemAccessDesc rw = access(0);
  CUdeviceptr base = 0;
  ASSERT_EQ(d.reserve(&base, kGranularity, 0, 0, 0), CUDA_SUCCESS);

  size_t free_bytes = 0;
  size_t total_bytes = 0;
  uint64_t before = cudasim_thread_call_ns();
  for (int i = 0; i < 10; ++i) {
    int device = -1;
    ASSERT_CUDA(cudaGetDevice(&device));
    ASSERT_CUDA(cudaDeviceGetAttribute(&device, cudaDevAttrMultiProcessorCount, 0));
    ASSERT_CUDA(cudaFree(nullptr));  // a free of NULL does nothing and is not counted
  }
  EXPECT_EQ(cudasim_thread_call_ns(), before);

  std::thread other([] {
    for (int i = 0; i < 100; ++i) {
      void* q = nullptr;
      if (cudaMalloc(&q, 4096) != cudaSuccess) return;
      (void)cudaFree(q);
    }
  });
  other.join();
  EXPECT_EQ(cudasim_thread_call_ns(), before);

  void* q = nullptr;
  ASSERT_CUDA(cudaMalloc(&q, 4096));
  ASSERT_CUDA(cudaFree(q));
  EXPECT_GT(cudasim_thread_call_ns(), before);
  before = cudasim_thread_call_ns();
  ASSERT_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  EXPECT_GT(cudasim_thread_call_ns(), before);
  before = cudasim_thread_call_ns();
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(d.create(&h, kGranularity, &p, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.map(base, kGranularity, 0, h, 0), CUDA_SUCCESS);
  ASSERT_EQ(d.set_access(base, kGranularity, &rw, 1), CUDA_SUCCESS);
  ASSERT_EQ(d.unmap(base, kGranularity), CUDA_SUCCESS);
  ASSERT_EQ(d.release(h), CUDA_SUCCESS);
  EXPECT_GT(cudasim_thread_call_ns(), before);
  ASSERT_EQ(d.address_free(base, kGranularity), CUDA_SUCCESS);
}

TEST_F(CallCounts, ConcurrentCallsAreAllCounted) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      if (cudaSetDevice(t % 2) != cudaSuccess) return;
      for (int i = 0; i < kRounds; ++i) {
        void* p = nullptr;
        if (cudaMalloc(&p, 512) != cudaSuccess) return;
        (void)cudaFree(p);
        (void)cudaStreamSynchronize(cudaStreamPerThread);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  constexpr uint64_t kPerDevice = kThreads / 2 * kRounds;
  for (int device : {0, 1}) {
    EXPECT_EQ(counted(device),
              str({.malloc = kPerDevice, .free = kPerDevice, .synchronize = kPerDevice}));
    EXPECT_EQ(counters(device).in_use_bytes, 0u);
  }
}

}  // namespace
