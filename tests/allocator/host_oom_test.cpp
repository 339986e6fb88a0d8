// Host memory running out inside the allocator: a std::bad_alloc from any operator new that an
// allocation or a free makes, in turn, under every policy. The call fails with bad_alloc and
// loses nothing: what was allocated stays allocated, the accounting matches the blocks, and
// after every block is freed and the cache emptied, neither the allocator nor the device holds
// a byte. (Before, a block taken from the pool and not yet recorded as allocated, or device
// memory allocated and not yet recorded in a segment, was lost for the life of the process.)
//
// This binary replaces the global operator new to make its Nth call from now fail, counting
// only the calls made by code of this program (the allocator is linked into it): cudasim, which
// stands in for the driver, allocates host memory too, and a driver returns an error code for
// that rather than throwing through its C API.
#include "log.h"
#include "test_support.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spdlog/logger.h>

#include <cstdlib>
#include <map>
#include <new>
#include <ostream>
#include <string>
#include <vector>

// GCC sees free() of what its operator new returned: the pair below is malloc and free, so it
// matches (GCC only: clang has no such warning).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {

thread_local long t_countdown = 0;  // the operator new that fails, counted from 1; 0: none
thread_local bool t_failed = false;

// Whether `caller` is code of this program, not of a shared library.
bool from_this_program(const void* caller) {
  static const void* const program = [] {
    Dl_info info{};
    dladdr(reinterpret_cast<const void*>(&from_this_program), &info);
    return info.dli_fbase;
  }();
  Dl_info info{};
  return dladdr(caller, &info) != 0 && info.dli_fbase == program;
}

}  // namespace

void* operator new(std::size_t bytes) {
  if (t_countdown > 0 && from_this_program(__builtin_return_address(0)) && --t_countdown == 0) {
    t_failed = true;
    throw std::bad_alloc();
  }
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

namespace cudacache {
namespace {

using testing::allocated;
using testing::expect_invariants;
using testing::reserved;
using testing::ScopedStream;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Runs `call` with the `n`th operator new in it failing; true when that one was reached. The
// call then threw bad_alloc, or with `may_absorb` got by without that memory (a free waits for
// the device instead of recording an event); it throws nothing else.
template <typename Call>
bool fail_new_number(long n, Call call, bool may_absorb = false) {
  t_failed = false;
  t_countdown = n;
  bool threw = false;
  try {
    call();
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  t_countdown = 0;
  EXPECT_TRUE(!threw || t_failed) << "operator new number " << n;
  EXPECT_TRUE(threw || !t_failed || may_absorb) << "operator new number " << n;
  return t_failed;
}

// The allocator holds what `live` says and the device what the allocator says; once every
// block is freed and the cache emptied, nothing at all.
void expect_nothing_lost(DeviceAllocator& allocator, std::map<std::uintptr_t, std::size_t> live) {
  ASSERT_NO_FATAL_FAILURE(expect_invariants(allocator, live));
  EXPECT_EQ(static_cast<std::size_t>(reserved(allocator.stats())), sim_counters().in_use_bytes);
  for (const auto& [address, size] : live) {
    allocator.deallocate(reinterpret_cast<void*>(address));
  }
  allocator.empty_cache();
  const MemoryStats stats = allocator.stats();
  EXPECT_EQ(allocated(stats), 0);
  EXPECT_EQ(reserved(stats), 0);
  EXPECT_EQ(stats.active_bytes[kAllPools].current, 0);
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

struct Case {
  const char* options;
  std::size_t size;
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.options << ", " << c.size << " B"; }

class HostOom : public testing::SimulatedDeviceTest, public ::testing::WithParamInterface<Case> {};

// An allocation that grows the cache (a new segment or new pages), and one that a cached block
// serves by a split, each with every one of its host allocations failing in turn (the latter
// has none: the spares reserved by the calls before it serve it).
TEST_P(HostOom, AnAllocationThatRunsOutOfHostMemoryLosesNothing) {
  const Case c = GetParam();
  for (const bool warm : {false, true}) {
    SCOPED_TRACE(warm ? "a cached block serves it" : "the cache grows for it");
    long failures = 0;
    for (long n = 1;; ++n) {
      ASSERT_LT(n, 1000) << "the allocation never stopped allocating host memory";
      SCOPED_TRACE("operator new number " + std::to_string(n) + " fails");
      DeviceAllocator allocator(0, Options(c.options));
      std::map<std::uintptr_t, std::size_t> live;
      const auto keep = [&](std::size_t size) {
        live[reinterpret_cast<std::uintptr_t>(allocator.allocate(size, nullptr))] = size;
      };
      keep(c.size);  // held throughout: the failed call must leave it alone
      if (warm) allocator.deallocate(allocator.allocate(3 * c.size, nullptr));
      void* got = nullptr;
      const bool reached = fail_new_number(n, [&] { got = allocator.allocate(c.size, nullptr); });
      if (got != nullptr) live[reinterpret_cast<std::uintptr_t>(got)] = c.size;
      ASSERT_NO_FATAL_FAILURE(expect_nothing_lost(allocator, live));
      if (!reached) break;
      ++failures;
    }
    if (warm) {
      // The spares that the calls before it reserved serve it: a cache hit allocates nothing.
      EXPECT_EQ(failures, 0) << "a cache hit made host allocations";
    } else {
      EXPECT_GT(failures, 0) << "the growth made no host allocation to fail";
    }
  }
}

// Frees, with each of their host allocations failing in turn. A plain free (merging with its
// free neighbour) allocates nothing: the spares were reserved before. A free of a block used on
// another stream records an event, and one on the per-thread default stream waits for that
// thread's stream the same way: those allocate, and either happen or leave the block allocated,
// to be freed again.
TEST_P(HostOom, AFreeThatRunsOutOfHostMemoryLosesNothing) {
  const Case c = GetParam();
  const ScopedStream other;
  enum class Kind { kPlain, kUsedOnAnotherStream, kPerThreadStream };
  for (const Kind kind : {Kind::kPlain, Kind::kUsedOnAnotherStream, Kind::kPerThreadStream}) {
    SCOPED_TRACE("free kind " + std::to_string(static_cast<int>(kind)));
    const cudaStream_t stream = kind == Kind::kPerThreadStream ? cudaStreamPerThread : nullptr;
    long failures = 0;
    for (long n = 1;; ++n) {
      ASSERT_LT(n, 1000) << "the free never stopped allocating host memory";
      SCOPED_TRACE("operator new number " + std::to_string(n) + " fails");
      DeviceAllocator allocator(0, Options(c.options));
      void* first = allocator.allocate(c.size, stream);
      void* second = allocator.allocate(c.size, stream);
      void* third = allocator.allocate(c.size, stream);
      allocator.deallocate(first);
      if (kind == Kind::kUsedOnAnotherStream) allocator.record_stream(second, other.get());
      const bool reached = fail_new_number(
          n, [&] { allocator.deallocate(second); }, /*may_absorb=*/true);
      std::map<std::uintptr_t, std::size_t> live{{reinterpret_cast<std::uintptr_t>(third), c.size}};
      if (allocator.stats().allocation[kAllPools].current == 2) {  // the free did not happen
        ASSERT_TRUE(reached);
        live[reinterpret_cast<std::uintptr_t>(second)] = c.size;
      }
      ASSERT_NO_FATAL_FAILURE(expect_nothing_lost(allocator, live));
      if (!reached) break;
      ++failures;
    }
    if (kind == Kind::kPlain) {
      EXPECT_EQ(failures, 0) << "a plain free made host allocations";
    } else {
      EXPECT_GT(failures, 0) << "the free made no host allocation to fail";
    }
  }
}

// A program that frees a burst of blocks (a layer's tensors at once) and allocates them again
// from the cache makes no host allocation: the free kept each block's entry of the table of
// allocations for the next allocation. (One entry was kept; the second allocation after the
// burst allocated a node, and the second free after it freed one.)
TEST_P(HostOom, CacheHitsAfterABurstOfFreesAllocateNothing) {
  const Case c = GetParam();
  constexpr int kBurst = 24;
  DeviceAllocator allocator(0, Options(c.options));
  std::vector<void*> blocks;
  for (int i = 0; i < kBurst; ++i) blocks.push_back(allocator.allocate(c.size, nullptr));
  for (void* block : blocks) allocator.deallocate(block);
  blocks.clear();
  const bool reached = fail_new_number(1, [&] {
    for (int i = 0; i < kBurst; ++i) blocks.push_back(allocator.allocate(c.size, nullptr));
  });
  EXPECT_FALSE(reached) << "a cache hit after the burst made a host allocation";
  std::map<std::uintptr_t, std::size_t> live;
  for (void* block : blocks) live[reinterpret_cast<std::uintptr_t>(block)] = c.size;
  ASSERT_NO_FATAL_FAILURE(expect_nothing_lost(allocator, live));
}

// Frees whose stream events completed are all made in the next call (here an allocation):
// 300 blocks of one pool that merge with nothing, more than two leaves of the free index hold,
// so their insertions split leaves several times. What they need is reserved before the first event
// leaves its queue; before, a failure among them lost blocks (and with them whole segments).
TEST(HostOomBatch, FreesOfCompletedEventsLoseNothing) {
  CUDACACHE_REQUIRE_CUDASIM();
  const ScopedStream other;
  for (const char* options :
       {"policy:cudacache", "policy:pytorch", "policy:pytorch,expandable_segments:True"}) {
    SCOPED_TRACE(options);
    long failures = 0;
    for (long n = 1;; ++n) {
      ASSERT_LT(n, 1000) << "the allocation never stopped allocating host memory";
      SCOPED_TRACE("operator new number " + std::to_string(n) + " fails");
      DeviceAllocator allocator(0, Options(options));
      std::map<std::uintptr_t, std::size_t> live;
      std::vector<void*> blocks;
      for (int i = 0; i < 600; ++i) blocks.push_back(allocator.allocate(1000, nullptr));
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        if (i % 2 == 0) {
          live[reinterpret_cast<std::uintptr_t>(blocks[i])] = 1000;
          continue;
        }
        allocator.record_stream(blocks[i], other.get());
        allocator.deallocate(blocks[i]);  // waits for an event on `other`
      }
      void* got = nullptr;
      const bool reached = fail_new_number(n, [&] { got = allocator.allocate(1000, nullptr); });
      if (got != nullptr) live[reinterpret_cast<std::uintptr_t>(got)] = 1000;
      ASSERT_NO_FATAL_FAILURE(expect_nothing_lost(allocator, live));
      if (!reached) break;
      ++failures;
    }
    EXPECT_GT(failures, 0) << "the batch of frees made no host allocation to fail";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, HostOom,
    ::testing::Values(Case{"policy:cudacache", 1000}, Case{"policy:cudacache", 30 * kMiB},
                      Case{"policy:pytorch", 1000}, Case{"policy:pytorch", 30 * kMiB},
                      Case{"policy:pytorch,expandable_segments:True", 1000},
                      Case{"policy:pytorch,expandable_segments:True", 30 * kMiB}),
    [](const ::testing::TestParamInfo<Case>& param) {
      const std::string options = param.param.options;
      return std::string(options == "policy:cudacache"                     ? "cudacache"
                         : options.find("expandable") != std::string::npos ? "expandable"
                                                                           : "native") +
             (param.param.size < kMiB ? "_small" : "_large");
    });

// A log line that cannot be formatted for lack of host memory is dropped, not thrown: the
// allocator logs on error paths, where host memory may be short, and from destructors.
TEST(HostOomLog, ALineThatCannotBeFormattedIsDroppedNotThrown) {
  spdlog::logger& log = spdlog_logger();
  const spdlog::level::level_enum level = log.level();
  log.set_level(spdlog::level::err);
  const std::string text(4096, 'x');  // longer than fmt's inline buffer: the line needs the heap
  t_failed = false;
  t_countdown = 1;
  EXPECT_NO_THROW(logger().error("host memory test: {}", text));
  t_countdown = 0;
  log.set_level(level);
  EXPECT_TRUE(t_failed) << "formatting the line made no operator new call of this program";
}

}  // namespace
}  // namespace cudacache
