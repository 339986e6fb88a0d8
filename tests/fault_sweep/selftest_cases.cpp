// Cases that pass as they are and misbehave in a known way when a device call fails: the
// fault sweep must call each misbehaviour by its name (selftest.py runs the sweep on them).
// Not swept with the allocator's tests (the binary's name does not end in _test).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <cudacache/cudacache.hpp>

#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace {

constexpr std::size_t kBytes = std::size_t{1} << 20;

// leak: the first buffer is forgotten when the second allocation fails.
TEST(SweepSelfTest, LeaksWhenTheSecondMallocFails) {
  void* first = nullptr;
  void* second = nullptr;
  if (cudaMalloc(&first, kBytes) != cudaSuccess) return;
  if (cudaMalloc(&second, kBytes) != cudaSuccess) return;
  cudaFree(second);
  cudaFree(first);
}

// untyped: a std::runtime_error escapes.
TEST(SweepSelfTest, ThrowsAnUntypedError) {
  void* p = nullptr;
  if (cudaMalloc(&p, kBytes) != cudaSuccess) throw std::runtime_error("malloc failed");
  cudaFree(p);
}

// crash: an abort.
TEST(SweepSelfTest, AbortsWhenAFreeFails) {
  void* p = nullptr;
  if (cudaMalloc(&p, kBytes) != cudaSuccess) return;
  if (cudaFree(p) != cudaSuccess) std::abort();
}

// hang: waits for ever (the sweep's --timeout ends it).
TEST(SweepSelfTest, HangsWhenAMallocFails) {
  void* p = nullptr;
  while (cudaMalloc(&p, kBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    std::this_thread::sleep_for(std::chrono::hours(1));
  }
  cudaFree(p);
}

// Allowed: a typed cudacache error escapes.
TEST(SweepSelfTest, ThrowsATypedError) {
  void* p = nullptr;
  if (cudaMalloc(&p, kBytes) != cudaSuccess) {
    throw cudacache::Error(CUDACACHE_OUT_OF_MEMORY, "cudacache: malloc failed");
  }
  cudaFree(p);
}

// Allowed: the case's own expectation fails; and a failed free that keeps its memory (the
// memory cudasim reports as kept is not a leak).
TEST(SweepSelfTest, ExpectsEveryCallToSucceed) {
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, kBytes), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

// Allowed: the fault is absorbed by trying again.
TEST(SweepSelfTest, RetriesAFailedMalloc) {
  void* p = nullptr;
  if (cudaMalloc(&p, kBytes) != cudaSuccess) {
    (void)cudaGetLastError();
    ASSERT_EQ(cudaMalloc(&p, kBytes), cudaSuccess);
  }
  cudaFree(p);
}

}  // namespace
