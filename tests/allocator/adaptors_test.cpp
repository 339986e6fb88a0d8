// The C++ adaptors (include/cudacache/memory_resource.hpp), compiled as C++17 against CCCL's
// memory resource concepts: cudacache::memory_resource is a cuda::mr resource and async
// resource, usable through CCCL's type-erased resource_ref; cudacache::device_allocator<T>
// through std::allocator_traits.
#define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cudacache/memory_resource.hpp>

#include "require_cudasim.h"
#include "sim_streams.h"

#include <cudasim.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

static_assert(__cplusplus == 201703L, "the adaptors header is C++17");
static_assert(cuda::mr::resource<cudacache::memory_resource>);
static_assert(cuda::mr::async_resource<cudacache::memory_resource>);
static_assert(
    cuda::mr::async_resource_with<cudacache::memory_resource, cuda::mr::device_accessible>);
static_assert(!cuda::mr::resource_with<cudacache::memory_resource, cuda::mr::host_accessible>);

// Tests only, not in the public header (allocator/api/c_api.cpp).
extern "C" void cudacache_testing_reset(void);

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::int64_t allocated_now() {
  return cudacache::memory_stats(0).allocated_bytes[cudacache::kAllPools].current;
}

class Adaptors : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    cudacache_testing_reset();
  }
  void TearDown() override { cudacache_testing_reset(); }
};

TEST_F(Adaptors, ResourceThroughCcclsResourceRef) {
  cudacache::memory_resource resource(0);
  cuda::mr::resource_ref<cuda::mr::device_accessible> ref{resource};
  void* ptr = ref.allocate(3 * kMiB, 256);
  ASSERT_NE(ptr, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ptr) % cudacache::kBlockAlignment, 0u);
  EXPECT_EQ(allocated_now(), static_cast<std::int64_t>(3 * kMiB));
  ref.deallocate(ptr, 3 * kMiB, 256);
  EXPECT_EQ(allocated_now(), 0);
  EXPECT_EQ(resource, cudacache::memory_resource(0));
  EXPECT_NE(resource, cudacache::memory_resource(-1));
}

TEST_F(Adaptors, AlignmentBeyondTheBlocksIsAnError) {
  cudacache::memory_resource resource;
  for (std::size_t alignment : {std::size_t{0}, std::size_t{3}, std::size_t{1024}}) {
    try {
      resource.allocate(4096, alignment);
      ADD_FAILURE() << "alignment " << alignment << " accepted";
    } catch (const cudacache::Error& error) {
      EXPECT_EQ(error.status(), CUDACACHE_INVALID_ARGUMENT) << alignment;
    }
  }
  EXPECT_EQ(allocated_now(), 0);
}

// deallocate_async on another stream than the allocation's: the block is not reused until
// the work queued on that stream completes.
TEST_F(Adaptors, AsyncDeallocationWaitsForItsStream) {
  cudacache::testing::ScopedStream compute;
  cudacache::testing::ScopedStream copy;
  cudacache::memory_resource resource(0);
  void* first = resource.allocate_async(kMiB, 512, cuda::stream_ref(compute.get()));
  cudacache::testing::HeldStream held(copy.get());
  resource.deallocate_async(first, kMiB, 512, cuda::stream_ref(copy.get()));
  void* second = resource.allocate_async(kMiB, 512, compute.get());
  EXPECT_NE(second, first) << "reused while the copy stream may still use it";
  ASSERT_EQ(held.release(), 0);
  ASSERT_EQ(cudaStreamSynchronize(copy.get()), cudaSuccess);
  void* third = resource.allocate_async(kMiB, 512, compute.get());
  EXPECT_EQ(third, first) << "free again once the copy stream's work completed";
  resource.deallocate_async(second, kMiB, 512, compute.get());
  resource.deallocate_async(third, kMiB, 512, compute.get());
  EXPECT_EQ(allocated_now(), 0);
}

TEST_F(Adaptors, DeviceAllocatorThroughAllocatorTraits) {
  using Allocator = cudacache::device_allocator<double>;
  using Traits = std::allocator_traits<Allocator>;
  static_assert(std::is_same_v<Traits::pointer, double*>);
  static_assert(Traits::propagate_on_container_move_assignment::value);
  cudacache::testing::ScopedStream stream;
  Allocator allocator(stream.get(), 0);
  double* values = Traits::allocate(allocator, 1000);
  ASSERT_NE(values, nullptr);
  EXPECT_EQ(allocated_now(), 8192);  // 8000 bytes, rounded to 512
  using Rebound = Traits::rebind_alloc<int>;
  Rebound rebound(allocator);
  EXPECT_EQ(rebound.stream(), stream.get());
  EXPECT_TRUE(rebound == allocator);
  EXPECT_FALSE(Rebound() == allocator);  // another stream
  int* ints = std::allocator_traits<Rebound>::allocate(rebound, 10);
  EXPECT_EQ(allocated_now(), 8192 + 512);
  std::allocator_traits<Rebound>::deallocate(rebound, ints, 10);
  Traits::deallocate(allocator, values, 1000);
  EXPECT_EQ(allocated_now(), 0);
  EXPECT_THROW(static_cast<void>(Traits::allocate(allocator, SIZE_MAX / 4)),
               std::bad_array_new_length);
  // Requests stop at PTRDIFF_MAX bytes: the allocator says so (containers check max_size), and
  // one element more is bad_array_new_length, not cudacache's Error for a size out of range.
  EXPECT_EQ(Traits::max_size(allocator), static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(double));
  EXPECT_THROW(static_cast<void>(Traits::allocate(allocator, Traits::max_size(allocator) + 1)),
               std::bad_array_new_length);
  EXPECT_EQ(allocated_now(), 0);
}

// deallocate is noexcept (as std::allocator's and cuda::mr's): a pointer the adaptor never gave
// out, or one already freed, cannot throw. It is refused as the C API refuses it: nothing
// changes, and the reason is cudacache_last_error() on this thread, as the header says.
TEST_F(Adaptors, ADoubleFreeThroughANoexceptDeallocateIsLeftInTheLastError) {
  cudacache::memory_resource resource(0);
  void* kept = resource.allocate(kMiB);
  void* freed = resource.allocate(kMiB);
  resource.deallocate(freed, kMiB);
  EXPECT_EQ(allocated_now(), static_cast<std::int64_t>(kMiB));
  resource.deallocate(freed, kMiB);  // the second free
  EXPECT_NE(std::string(cudacache_last_error()).find("did not allocate (or already freed)"),
            std::string::npos)
      << cudacache_last_error();
  EXPECT_EQ(allocated_now(), static_cast<std::int64_t>(kMiB));  // the other block is intact
  cudacache::device_allocator<float> allocator(nullptr, 0);
  int local = 0;
  allocator.deallocate(reinterpret_cast<float*>(&local), 1);  // never allocated here
  EXPECT_NE(std::string(cudacache_last_error()).find("did not allocate (or already freed)"),
            std::string::npos)
      << cudacache_last_error();
  EXPECT_EQ(allocated_now(), static_cast<std::int64_t>(kMiB));
  resource.deallocate(kept, kMiB);
  EXPECT_EQ(allocated_now(), 0);
}

// A type aligned to 512 bytes gets a block (every block is aligned so); one aligned beyond is
// refused by name, as memory_resource refuses that alignment, instead of being given a block
// that breaks it (the allocator asked for 512 and got any 512-aligned block).
TEST_F(Adaptors, DeviceAllocatorRefusesTypesAlignedBeyondABlock) {
  struct alignas(512) Aligned512 {
    char bytes[512];
  };
  struct alignas(1024) Aligned1024 {
    char bytes[1024];
  };
  cudacache::device_allocator<Aligned512> fits;
  // A first block of 512 bytes, so that the next one starts 512 bytes into a segment.
  Aligned512* first = fits.allocate(1);
  Aligned512* second = fits.allocate(1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(second) % 512, 0u);
  cudacache::device_allocator<Aligned1024> beyond;
  try {
    static_cast<void>(beyond.allocate(1));
    FAIL() << "an alignment of 1024 was accepted";
  } catch (const cudacache::Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_INVALID_ARGUMENT);
    EXPECT_NE(std::string(error.what()).find("alignment 1024 is not a power of two up to 512"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(allocated_now(), 1024);  // nothing more was allocated
  fits.deallocate(second, 1);
  fits.deallocate(first, 1);
  EXPECT_EQ(allocated_now(), 0);
}

}  // namespace
