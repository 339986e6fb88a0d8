// The out-of-memory ladder: cache release steps, the search after release, retry hooks,
// the report, and that the allocator keeps working afterwards.
#include "oom_report.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace cudacache {
namespace {

using testing::HeldStream;
using testing::pytorch_native;
using testing::ScopedStream;

using testing::allocated;
using testing::reserved;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr std::size_t kGiB = std::size_t{1} << 30;

class OomTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    ASSERT_EQ(cudasim_set_capacity(0, 256 * kMiB), 0);
  }
};

TEST(OomReport, FormatsSizesLikePyTorch) {
  EXPECT_EQ(format_size(0), "0 bytes");
  EXPECT_EQ(format_size(1024), "1024 bytes");
  EXPECT_EQ(format_size(1025), "1.00 KiB");
  EXPECT_EQ(format_size(1536 * 1024), "1.50 MiB");
  EXPECT_EQ(format_size(256 * kGiB), "256.00 GiB");
}

TEST(OomReport, FragmentationDefinition) {
  EXPECT_DOUBLE_EQ(fragmentation(100, 100, 0), 0.0);
  EXPECT_DOUBLE_EQ(fragmentation(100, 60, 40), 0.0);
  EXPECT_DOUBLE_EQ(fragmentation(100, 60, 10), 0.75);
}

TEST_F(OomTest, FailedCudaMallocReleasesCacheAndRetries) {
  DeviceAllocator allocator(0, pytorch_native());
  // Fill the cache with free 12 MiB segments on a side stream: they cannot serve stream 0.
  const ScopedStream side;
  std::vector<void*> blocks;
  for (int i = 0; i < 12; ++i) blocks.push_back(allocator.allocate(12 * kMiB, side));
  for (void* p : blocks) allocator.deallocate(p);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(12 * 12 * kMiB));
  // 150 MiB does not fit next to 144 MiB of cache in 256 MiB: the cache is released.
  void* big = allocator.allocate(150 * kMiB, nullptr);
  ASSERT_NE(big, nullptr);
  const MemoryStats s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.num_device_free, 12);
  EXPECT_EQ(reserved(s), static_cast<std::int64_t>(150 * kMiB));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "stale error after a failed cudaMalloc";
  allocator.deallocate(big);
}

TEST_F(OomTest, OversizeBlocksAreReleasedFirst) {
  DeviceAllocator allocator(0, pytorch_native("max_split_size_mb:40"));
  void* a = allocator.allocate(160 * kMiB, nullptr);
  void* b = allocator.allocate(60 * kMiB, nullptr);
  allocator.deallocate(a);  // oversize and 60 MiB larger than the next request: not reused
  void* c = allocator.allocate(100 * kMiB, nullptr);
  ASSERT_NE(c, nullptr);
  const MemoryStats s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 0) << "the oversize step alone should have sufficed";
  EXPECT_EQ(s.num_sync_all_streams, 0);
  EXPECT_EQ(s.num_device_free, 1);
  allocator.deallocate(b);
  allocator.deallocate(c);
}

TEST_F(OomTest, InjectedFailureIsRetriedTransparently) {
  DeviceAllocator allocator(0, pytorch_native());
  ASSERT_EQ(cudasim_fail_nth_allocation(0, 1), 0);
  void* p = allocator.allocate(4 * kMiB, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(allocator.stats().num_ooms, 0);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  allocator.deallocate(p);
}

TEST_F(OomTest, HugeRequestThrowsWithAFullReportAndTheAllocatorKeepsWorking) {
  DeviceAllocator allocator(0, pytorch_native());
  void* live = allocator.allocate(10 * kMiB, nullptr);
  const MemoryStats before = allocator.stats();
  try {
    allocator.allocate(256 * kGiB, nullptr);
    FAIL() << "no exception";
  } catch (const OutOfMemoryError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("Tried to allocate 256.00 GiB"), std::string::npos) << message;
    EXPECT_NE(message.find("device 0"), std::string::npos) << message;
    EXPECT_NE(message.find("total capacity of 256.00 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("10.00 MiB is allocated"), std::string::npos) << message;
    EXPECT_NE(message.find("fragmentation"), std::string::npos) << message;
    EXPECT_EQ(error.report().requested_bytes, 256 * kGiB);
    EXPECT_EQ(error.report().device_total_bytes, 256 * kMiB);
    EXPECT_EQ(error.report().allocated_bytes, 10 * kMiB);
    const std::bad_alloc& base = error;  // catchable as std::bad_alloc
    EXPECT_STREQ(base.what(), error.what());
  }
  const MemoryStats after = allocator.stats();
  EXPECT_EQ(after.num_ooms, 1);
  EXPECT_EQ(allocated(after), allocated(before));
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  void* more = allocator.allocate(64 * kMiB, nullptr);
  ASSERT_NE(more, nullptr);
  allocator.deallocate(more);
  allocator.deallocate(live);
  EXPECT_EQ(allocated(allocator.stats()), 0);
}

TEST_F(OomTest, FragmentedCacheIsReportedWithASuggestion) {
  DeviceAllocator allocator(0, pytorch_native());
  allocator.deallocate(allocator.allocate(200 * kMiB, nullptr));  // one 200 MiB segment
  std::vector<void*> pieces;
  for (int i = 0; i < 10; ++i) pieces.push_back(allocator.allocate(20 * kMiB, nullptr));
  for (std::size_t i = 0; i < pieces.size(); i += 2) allocator.deallocate(pieces[i]);
  // 100 MiB free in five separate 20 MiB holes; 56 MiB left on the device.
  try {
    allocator.allocate(60 * kMiB, nullptr);
    FAIL() << "no exception";
  } catch (const OutOfMemoryError& error) {
    const OomReport& report = error.report();
    EXPECT_EQ(report.reserved_unallocated_bytes, 100 * kMiB);
    EXPECT_EQ(report.largest_free_cached_block, 20 * kMiB);
    EXPECT_DOUBLE_EQ(report.fragmentation, 0.8);
    const std::string message = error.what();
    EXPECT_NE(message.find("fragmentation 0.80"), std::string::npos) << message;
    EXPECT_NE(message.find("max_split_size_mb:60"), std::string::npos) << message;
    EXPECT_NE(message.find("expandable_segments:True"), std::string::npos) << message;
  }
  const MemoryStats s = allocator.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(allocated(s), static_cast<std::int64_t>(100 * kMiB));
  for (std::size_t i = 1; i < pieces.size(); i += 2) allocator.deallocate(pieces[i]);
  void* whole = allocator.allocate(180 * kMiB, nullptr);  // the holes merged back
  EXPECT_EQ(whole, pieces[0]);
  allocator.deallocate(whole);
}

// Issue 12, defect 6: with the free memory cached for another stream, the message blamed
// fragmentation and suggested max_split_size_mb and expandable segments, neither of which
// helps. It says where the memory is.
TEST_F(OomTest, MemoryCachedForAnotherStreamIsNamedNotBlamedOnFragmentation) {
  const ScopedStream other;
  DeviceAllocator allocator(0, pytorch_native());
  allocator.deallocate(allocator.allocate(200 * kMiB, other));  // one 200 MiB segment
  void* kept = allocator.allocate(20 * kMiB, other);            // keeps it split
  // 180 MiB free on `other`, 56 MiB left on the device.
  try {
    allocator.allocate(100 * kMiB, nullptr);
    FAIL() << "no exception";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().free_on_other_streams_bytes, 180 * kMiB);
    const std::string message = error.what();
    EXPECT_NE(message.find("180.00 MiB of the free cached memory belongs to other streams"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("max_split_size_mb"), std::string::npos) << message;
    EXPECT_EQ(message.find("expandable_segments"), std::string::npos) << message;
    EXPECT_NE(message.find("Allocate on the stream that freed the memory"), std::string::npos)
        << message;
  }
  allocator.deallocate(kept);
}

TEST_F(OomTest, SearchesThePoolAgainAfterWaitingForEvents) {
  // PyTorch issue 189504: a block that becomes free only while the ladder waits for stream
  // events is not looked at again by PyTorch, which reports OOM; cudacache serves from it.
  ASSERT_EQ(cudasim_set_capacity(0, 200 * kMiB), 0);
  DeviceAllocator allocator(0, pytorch_native());
  const ScopedStream side;
  allocator.deallocate(allocator.allocate(120 * kMiB, nullptr));  // one 120 MiB segment
  void* b = allocator.allocate(60 * kMiB, nullptr);
  void* c = allocator.allocate(50 * kMiB, nullptr);
  void* d = allocator.allocate(10 * kMiB, nullptr);  // keeps the segment split
  ASSERT_EQ(allocator.stats().num_device_alloc, 1);
  allocator.record_stream(b, side);
  HeldStream held(side);
  allocator.deallocate(b);  // pending on side
  allocator.deallocate(c);  // 50 MiB free, cannot merge with pending b
  // jthread: joined also when the allocation throws (the fault sweep fails its calls).
  std::jthread releaser([&held] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    held.release();
  });
  void* e = allocator.allocate(100 * kMiB, nullptr);  // cudaMalloc fails; b+c = 110 MiB fits
  releaser.join();
  EXPECT_EQ(e, b);
  const MemoryStats s = allocator.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_sync_all_streams, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_alloc, 1);
  allocator.deallocate(e);
  allocator.deallocate(d);
}

TEST_F(OomTest, FractionCapIsAnOutOfMemoryError) {
  DeviceAllocator allocator(0, pytorch_native("per_process_memory_fraction:0.25"));  // 64 MiB
  void* a = allocator.allocate(40 * kMiB, nullptr);
  try {
    allocator.allocate(30 * kMiB, nullptr);
    FAIL() << "no exception";
  } catch (const OutOfMemoryError& error) {
    EXPECT_TRUE(error.report().fraction_cap_hit);
    EXPECT_NE(std::string(error.what()).find("per_process_memory_fraction"), std::string::npos);
  }
  EXPECT_LE(sim_counters().in_use_bytes, 64 * kMiB);
  void* b = allocator.allocate(20 * kMiB, nullptr);
  allocator.deallocate(a);
  allocator.deallocate(b);
}

// Each stream's pool holds an address range of about 9/8 of the device: a program on many
// streams can run out of address space with the device nearly empty (on a 16 TiB device, a
// process's 128 TiB of user address space holds about seven ranges; under TSan, whose shadow
// memory takes most of it, none). The report says so, not that the memory is fragmented, and
// empty_cache() gives the ranges back.
TEST_F(OomTest, ARefusedAddressRangeIsReportedAsAddressSpaceNotDeviceMemory) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 40), 0);
  {
    DeviceAllocator allocator(0, Options("policy:cudacache"));
    std::vector<std::unique_ptr<ScopedStream>> streams;
    std::vector<void*> blocks;
    bool refused = false;
    for (int i = 0; i < 32 && !refused; ++i) {
      streams.push_back(std::make_unique<ScopedStream>());
      try {
        blocks.push_back(allocator.allocate(4 * kMiB, *streams.back()));
      } catch (const OutOfMemoryError& error) {
        refused = true;
        EXPECT_GE(error.report().address_range_refused_bytes, std::size_t{18} << 40);  // 9/8
        const std::string message = error.what();
        EXPECT_NE(message.find("address space ran out, not the device's memory"), std::string::npos)
            << message;
        EXPECT_NE(message.find("Allocate on fewer streams"), std::string::npos) << message;
        EXPECT_EQ(message.find("fragmented"), std::string::npos) << message;
      }
    }
    ASSERT_TRUE(refused) << "32 ranges of 18 TiB were all reserved";
    if (!blocks.empty()) {  // the refused stream gets a range once the others are given back
      for (void* block : blocks) allocator.deallocate(block);
      allocator.empty_cache();
      void* again = allocator.allocate(4 * kMiB, *streams.back());
      EXPECT_NE(again, nullptr);
      allocator.deallocate(again);
    }
  }
  // Device memory running out says nothing of address space.
  ASSERT_EQ(cudasim_set_capacity(0, 256 * kMiB), 0);
  DeviceAllocator allocator(0, Options("policy:cudacache"));
  try {
    allocator.allocate(300 * kMiB, nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().address_range_refused_bytes, 0u);
    EXPECT_EQ(std::string(error.what()).find("address space"), std::string::npos);
  }
}

TEST_F(OomTest, GarbageCollectionFreesOldCachedBlocksBeforeTheCap) {
  DeviceAllocator allocator(
      0, pytorch_native("per_process_memory_fraction:0.5,garbage_collection_threshold:0.5"));
  // Allowed: 128 MiB; GC starts above 64 MiB reserved.
  void* a = allocator.allocate(40 * kMiB, nullptr);
  void* b = allocator.allocate(30 * kMiB, nullptr);
  allocator.deallocate(a);
  allocator.deallocate(b);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(70 * kMiB));
  void* c = allocator.allocate(50 * kMiB, nullptr);  // no fit: GC runs before cudaMalloc
  const MemoryStats s = allocator.stats();
  // As in PyTorch, one pass frees every block at least as old as the average, without stopping
  // at the target: a and b are equally old, so both go, and c gets a segment of its own.
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(reserved(s), static_cast<std::int64_t>(50 * kMiB));
  allocator.deallocate(c);
}
TEST_F(OomTest, RetryHooksRunInOrderAndMayFreeMemory) {
  DeviceAllocator allocator(0, pytorch_native());
  void* hog = allocator.allocate(200 * kMiB, nullptr);
  std::vector<int> calls;
  allocator.retry_hooks().add([&](const OomContext& context) {
    calls.push_back(1);
    EXPECT_EQ(context.requested_bytes, 100 * kMiB);
    EXPECT_EQ(context.device, 0);
    EXPECT_EQ(context.allocated_bytes, 200 * kMiB);
    return false;
  });
  allocator.retry_hooks().add([&](const OomContext& context) {
    calls.push_back(2);
    if (context.round == 0) {
      allocator.deallocate(hog);  // the lock is not held while hooks run
      allocator.empty_cache();
      return true;
    }
    return false;
  });
  void* p = allocator.allocate(100 * kMiB, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(calls, (std::vector<int>{1, 2}));
  EXPECT_EQ(allocator.stats().num_ooms, 0);
  allocator.deallocate(p);
}

TEST_F(OomTest, RetryHooksAreBounded) {
  DeviceAllocator allocator(0, pytorch_native());
  int calls = 0;
  allocator.retry_hooks().add([&](const OomContext&) {
    ++calls;
    return true;  // always asks again, never frees anything
  });
  EXPECT_THROW(allocator.allocate(300 * kMiB, nullptr), OutOfMemoryError);
  EXPECT_EQ(calls, CUDACACHE_MAX_RETRY_ROUNDS);
  EXPECT_EQ(allocator.stats().num_ooms, 1);
}

// Found in review: a hook that allocated through the allocator it serves ran out of memory in
// turn, ran the hooks again, and so on until the stack overflowed. Its allocation now fails
// with out of memory at once, the outer one after its rounds, and nothing is lost.
TEST_F(OomTest, AnAllocationInsideAHookDoesNotRunTheHooksAgain) {
  DeviceAllocator allocator(0, pytorch_native());
  void* hog = allocator.allocate(200 * kMiB, nullptr);
  int calls = 0;
  int nested_ooms = 0;
  allocator.retry_hooks().add([&](const OomContext& context) {
    ++calls;
    EXPECT_TRUE(RetryHooks::running_on_this_thread());
    try {
      allocator.deallocate(allocator.allocate(context.requested_bytes, nullptr));
    } catch (const OutOfMemoryError&) {
      ++nested_ooms;
    }
    void* small = allocator.allocate(kMiB, nullptr);  // what fits is served inside a hook
    allocator.deallocate(small);
    return true;
  });
  EXPECT_THROW(allocator.allocate(100 * kMiB, nullptr), OutOfMemoryError);
  EXPECT_EQ(calls, CUDACACHE_MAX_RETRY_ROUNDS);
  EXPECT_EQ(nested_ooms, CUDACACHE_MAX_RETRY_ROUNDS);
  EXPECT_FALSE(RetryHooks::running_on_this_thread());
  EXPECT_EQ(allocator.stats().num_ooms, CUDACACHE_MAX_RETRY_ROUNDS + 1);
  EXPECT_EQ(allocated(allocator.stats()), static_cast<std::int64_t>(200 * kMiB));
  allocator.deallocate(hog);
}

// Found in review: when cudaMemGetInfo failed as the report was made, the message said the
// device had 0 bytes and that the request was larger than the whole device.
TEST_F(OomTest, AnUnreadableDeviceIsSaidSoInTheMessage) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  DeviceAllocator allocator(0, pytorch_native());
  void* kept = allocator.allocate(10 * kMiB, nullptr);
  ASSERT_EQ(cudasim_fail_nth_call(0, "mem_get_info", 1), 0);
  try {
    allocator.allocate(60 * kMiB, nullptr);
    ADD_FAILURE() << "no out of memory";
  } catch (const OutOfMemoryError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("could not say how much memory it has (cudaMemGetInfo failed)"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("larger than the whole device"), std::string::npos) << message;
    EXPECT_EQ(message.find("total capacity of 0 bytes"), std::string::npos) << message;
  }
  allocator.deallocate(kept);
}

// Waits (up to 10 s, so that a broken build fails rather than hangs) until `flag` holds `value`.
bool wait_for(const std::atomic<int>& flag, int value) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (flag.load() != value) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Found in review: run() called copies of the hooks, outside the lock, so a hook removed while
// another thread's run was under way could still be called after remove() returned, with what
// its caller had freed since (a use-after-free through the C API's user_data).
TEST(RetryHooks, RemovingAHookWaitsForTheCallAnotherThreadBegan) {
  RetryHooks hooks;
  std::atomic<int> stage{0};
  std::atomic<bool> call_ended{false};
  const int handle = hooks.add([&](const OomContext&) {
    stage = 1;
    wait_for(stage, 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    call_ended = true;
    return false;
  });
  std::thread runner([&] { hooks.run(OomContext{}); });
  ASSERT_TRUE(wait_for(stage, 1));
  std::atomic<bool> ended_when_removed{false};
  std::thread remover([&] {
    EXPECT_TRUE(hooks.remove(handle));
    ended_when_removed = call_ended.load();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the remover is waiting now
  stage = 2;
  remover.join();
  runner.join();
  EXPECT_TRUE(ended_when_removed.load()) << "remove() returned while the hook was running";
}

TEST(RetryHooks, AHookRemovedWhileAnotherRunsIsNotCalled) {
  RetryHooks hooks;
  std::atomic<int> stage{0};
  hooks.add([&](const OomContext&) {
    stage = 1;
    wait_for(stage, 2);
    return false;
  });
  std::atomic<int> later_calls{0};
  const int later = hooks.add([&](const OomContext&) {
    ++later_calls;
    return false;
  });
  std::thread runner([&] { hooks.run(OomContext{}); });
  ASSERT_TRUE(wait_for(stage, 1));
  EXPECT_TRUE(hooks.remove(later));  // not running: returns at once
  stage = 2;
  runner.join();
  EXPECT_EQ(later_calls.load(), 0);
}

TEST(RetryHooks, AHookKeepsItsStateFromCallToCallAndMayRemoveItself) {
  RetryHooks hooks;
  std::vector<int> seen;
  int handle = 0;
  handle = hooks.add([&, calls = 0](const OomContext&) mutable {
    seen.push_back(++calls);
    if (calls == 3) {
      EXPECT_TRUE(hooks.remove(handle));  // from inside: waits for nothing
    }
    return false;
  });
  for (int run = 0; run < 4; ++run) hooks.run(OomContext{});
  EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));  // the same callable each time, then gone
  EXPECT_TRUE(hooks.empty());
}

TEST_F(OomTest, AnEmptyHookIsRefused) {
  DeviceAllocator allocator(0, pytorch_native());
  try {
    allocator.retry_hooks().add(RetryHook{});
    ADD_FAILURE() << "an empty hook was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_INVALID_ARGUMENT);
    EXPECT_NE(std::string(error.what()).find("the hook is empty"), std::string::npos);
  }
  EXPECT_TRUE(allocator.retry_hooks().empty());
}

}  // namespace
}  // namespace cudacache
