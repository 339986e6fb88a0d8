// Host memory running out inside the C API (include/cudacache/cudacache.h): every failing
// operator new that a call makes, in turn, must end as a status (CUDACACHE_INTERNAL, "host
// memory exhausted", or the call's own outcome when the allocator got by without that memory),
// never as an exception through the C functions or an abort. Found in review: the handler that
// turned a std::bad_alloc into a status copied its message into a std::string, which needed
// host memory in turn; that second std::bad_alloc left a noexcept function and the process
// aborted.
//
// This binary replaces the global operator new to make its Nth call from now fail, counting the
// calls made by every library but cudasim (which stands in for the driver: a driver returns an
// error code when host memory runs out, it does not throw through its C API).
#include <cudacache/cudacache.h>

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include "require_cudasim.h"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

// GCC sees free() of what its operator new returned: the pair below is malloc and free, so it
// matches (GCC only: clang has no such warning).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {

// From the t_fail_from-th operator new on (counted from 1; 0: never), every one fails until the
// test resets it: host memory that has run out stays out while the call reports it.
thread_local long t_fail_from = 0;
thread_local long t_news = 0;  // operator new calls counted since t_fail_from was set

// Whether `caller` is cudasim's code (the library that defines cudaMalloc).
bool from_cudasim(const void* caller) {
  static const void* const cudasim = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&cudaMalloc), &info);
    return info.dli_fbase;
  }();
  Dl_info info{};
  return dladdr(caller, &info) != 0 && info.dli_fbase == cudasim;
}

}  // namespace

void* operator new(std::size_t bytes) {
  if (t_fail_from > 0 && !from_cudasim(__builtin_return_address(0)) && ++t_news >= t_fail_from) {
    throw std::bad_alloc();
  }
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

// Tests only, not in the public header (allocator/c_api.cpp).
extern "C" void cudacache_testing_reset(void);

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr const char* kExhausted = "cudacache: host memory exhausted";

// Calls `call` with host memory running out at its `n`th operator new; *reached when it did.
template <typename Call>
auto with_memory_out_from(long n, Call call, bool* reached) {
  t_news = 0;
  t_fail_from = n;
  const auto result = call();
  t_fail_from = 0;
  *reached = t_news >= n;
  return result;
}

// The status of a call that ran out of host memory: its own outcome, or CUDACACHE_INTERNAL
// with the message saying so.
void expect_status(cudacache_status status, cudacache_status expected, bool reached, long n) {
  if (reached && status == CUDACACHE_INTERNAL) {
    EXPECT_STREQ(cudacache_last_error(), kExhausted) << "from operator new number " << n;
  } else {
    EXPECT_EQ(status, expected) << "from operator new number " << n << ": "
                                << cudacache_last_error();
  }
}

class CApiHostOom : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    cudacache_testing_reset();
  }
  void TearDown() override { cudacache_testing_reset(); }
};

TEST_F(CApiHostOom, TheFirstUseEndsAsAStatusAndALaterOneWorks) {
  // The first call makes the allocator (about 10,000 operator new calls): memory runs out at a
  // few points of it, each in a process-wide allocator made afresh.
  for (const long n : {1L, 2L, 3L, 10L, 100L, 1000L, 3000L, 6000L, 9000L}) {
    cudacache_testing_reset();
    bool reached = false;
    void* ptr = nullptr;
    const cudacache_status status = with_memory_out_from(
        n, [&] { return cudacache_allocate(&ptr, 64 * kMiB, 0, nullptr); }, &reached);
    expect_status(status, CUDACACHE_OK, reached, n);
    if (ptr != nullptr) {
      EXPECT_EQ(cudacache_deallocate(ptr), CUDACACHE_OK);
    }
    ptr = nullptr;  // with memory back, the allocator serves
    EXPECT_EQ(cudacache_allocate(&ptr, 64 * kMiB, 0, nullptr), CUDACACHE_OK)
        << cudacache_last_error();
    EXPECT_EQ(cudacache_deallocate(ptr), CUDACACHE_OK);
  }
}

TEST_F(CApiHostOom, AnOutOfMemoryErrorEndsAsAStatus) {
  void* ptr = nullptr;
  ASSERT_EQ(cudacache_allocate(&ptr, kMiB, 0, nullptr), CUDACACHE_OK);  // the allocator made
  // Larger than the device: its message (about 600 characters) is made as memory runs out, at
  // each of its operator new calls in turn.
  bool reached = true;
  long n = 0;
  while (reached) {
    ++n;
    void* refused = nullptr;
    const cudacache_status status = with_memory_out_from(
        n, [&] { return cudacache_allocate(&refused, std::size_t{1} << 42, 0, nullptr); },
        &reached);
    expect_status(status, CUDACACHE_OUT_OF_MEMORY, reached, n);
    EXPECT_EQ(refused, nullptr);
    ASSERT_LT(n, 10000) << "the call never got through";
  }
  EXPECT_GT(n, 1) << "no operator new was made: the sweep tested nothing";
  EXPECT_EQ(cudacache_deallocate(ptr), CUDACACHE_OK);
}

TEST_F(CApiHostOom, BadArgumentsEndAsAStatus) {
  // Messages that name the bad value (built as std::string) and snprintf-style copies.
  for (long n = 1; n < 8; ++n) {
    bool reached = false;
    const cudacache_status status = with_memory_out_from(
        n, [] { return cudacache_unregister_retry_hook(123456); }, &reached);
    expect_status(status, CUDACACHE_INVALID_ARGUMENT, reached, n);
    const int length = with_memory_out_from(
        n, [] { return cudacache_memory_stats_json(0, nullptr, 8); }, &reached);
    EXPECT_EQ(length, -1) << n;  // buf NULL with len 8
    void* ptr = nullptr;
    const void* refused = with_memory_out_from(
        n, [&] { return cudacache_malloc(-1, 0, nullptr); }, &reached);
    EXPECT_EQ(refused, nullptr);
    (void)ptr;
  }
}

}  // namespace
