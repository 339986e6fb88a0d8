// cudacache's own policy (policy:cudacache, Note [Moving pages] in policy_cudacache.cpp):
// pages are moved, not created, when the device is full; PyTorch's 20 MiB steps with room (in
// larger pages on a large device), smaller pages as the device fills (Note [Pages shrink as the
// device fills]). The behaviours every configuration shares are in conformance_test.cpp.
#include "captured_log.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace cudacache {
namespace {

using testing::CapturedLog;
using testing::HeldStream;
using testing::reserved;
using testing::ScopedStream;
using testing::sim_calls;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;

class CudacachePolicy : public testing::SimulatedDeviceTest {
 protected:
  static Options options() { return Options("policy:cudacache"); }
};

// `count` blocks of 6 MiB allocated on `stream` and freed: their pages stay mapped, free.
void leave_free_pages(DeviceAllocator& allocator, cudaStream_t stream, int count) {
  std::vector<void*> blocks;
  for (int i = 0; i < count; ++i) blocks.push_back(allocator.allocate(6 * kMiB, stream));
  for (void* block : blocks) allocator.deallocate(block);
}

// Note [Why pages are created]: at trace level the policy logs every page it creates and every
// page it moves, with the reason; bench/replay/calls_by_reason.py counts them. Every create the
// device sees is in the log: pages of growths without room, pages of one block and their end
// granules, a page of one block cut for a smaller block, and the pages moved to a growth.
// One trace line of Note [Why pages are created]: "device 0: created 3 pages, 6291456 bytes,
// for <reason>" (or "moved"), from the line's text on; nullopt for any other line.
struct PageLine {
  std::string done;  // created or moved
  std::size_t pages = 0;
  std::size_t bytes = 0;
  std::string reason;
};
std::optional<PageLine> page_line(const std::string& line) {
  const std::size_t at = line.find("device 0: ");
  if (at == std::string::npos) return std::nullopt;
  char done[16] = {};
  char noun[8] = {};
  PageLine parsed;
  int reason_at = 0;
  if (std::sscanf(line.c_str() + at, "device 0: %15s %zu %7[a-z], %zu bytes, for %n", done,
                  &parsed.pages, noun, &parsed.bytes, &reason_at) != 4 ||
      reason_at == 0) {
    return std::nullopt;
  }
  EXPECT_EQ(std::string(noun), parsed.pages == 1 ? "page" : "pages") << line;
  parsed.done = done;
  parsed.reason = line.substr(at + static_cast<std::size_t>(reason_at));
  while (!parsed.reason.empty() && (parsed.reason.back() == '\n' || parsed.reason.back() == '\r')) {
    parsed.reason.pop_back();
  }
  return parsed;
}

TEST_F(CudacachePolicy, TraceLogNamesWhyEachPageIsCreatedOrMoved) {
  std::vector<std::string> lines;
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);  // no room: 2 MiB pages
  const ScopedStream other;
  {
    const CapturedLog log(spdlog::level::trace, 256);
    DeviceAllocator allocator(0, options());
    leave_free_pages(allocator, other, 10);                // 30 pages created, then free
    void* moved = allocator.allocate(60 * kMiB, nullptr);  // those pages, moved
    allocator.deallocate(moved);
    allocator.empty_cache();
    void* own = allocator.allocate(41 * kMiB, nullptr);  // a page of one block, an end granule
    allocator.deallocate(own);
    void* cut = allocator.allocate(11 * kMiB, nullptr);  // that page, cut at the block's end
    allocator.deallocate(cut);
    lines = log.lines();
  }

  std::map<std::string, std::size_t> created;
  std::map<std::string, std::size_t> moved;
  for (const std::string& line : lines) {
    const std::optional<PageLine> parsed = page_line(line);
    if (!parsed) continue;
    EXPECT_GE(parsed->bytes, parsed->pages * 2 * kMiB) << line;
    (parsed->done == "created" ? created : moved)[parsed->reason] += parsed->pages;
  }
  std::size_t logged = 0;
  for (const auto& [reason, pages] : created) logged += pages;
  EXPECT_EQ(logged, static_cast<std::size_t>(sim_calls().create));
  EXPECT_EQ(created["a large-pool growth without room"], 30u);
  EXPECT_EQ(moved["a growth without room"], 30u);
  EXPECT_EQ(created["a page of one block"], 1u);
  EXPECT_EQ(created["the end granule of a page of one block"], 1u);
  // The block's whole granules, its end granule and the rest of the page.
  EXPECT_EQ(created["a page of one block cut"], 3u);
}

// max_page_size_mb: no page the policy creates is larger, with room or without, for a block
// under a granule or a large one (whose page of one block it would otherwise get). With 2 every
// page is one granule; what is held is the same, only the creates change.
TEST_F(CudacachePolicy, MaxPageSizeBoundsEveryPageItCreates) {
  const auto run = [&](const char* config, std::size_t capacity, std::size_t limit) {
    SCOPED_TRACE(std::string(config) + " on " + std::to_string(capacity >> 20) + " MiB");
    EXPECT_EQ(cudasim_set_capacity(0, capacity), 0);
    const cudasim_call_counts before = sim_calls();
    std::int64_t held = 0;
    std::vector<std::string> lines;
    {
      const CapturedLog log(spdlog::level::trace, 1024);
      DeviceAllocator allocator(0, Options(config));
      std::vector<void*> blocks;
      for (const std::size_t size : {41 * kMiB, 1536 * std::size_t{1024}, 100 * kMiB, 3 * kMiB}) {
        blocks.push_back(allocator.allocate(size, nullptr));
      }
      EXPECT_EQ(cudaMemset(blocks[2], 7, 100 * kMiB), cudaSuccess);  // mapped, accessible
      held = reserved(allocator.stats());
      for (void* block : blocks) allocator.deallocate(block);
      lines = log.lines();
    }
    std::size_t logged = 0;
    for (const std::string& line : lines) {
      const std::optional<PageLine> parsed = page_line(line);
      if (!parsed || parsed->done != "created") continue;
      // The pages of a line are one size, the last smaller.
      EXPECT_LE(parsed->bytes, parsed->pages * limit) << line;
      logged += parsed->pages;
    }
    const std::size_t creates = sim_calls().create - before.create;
    EXPECT_EQ(logged, creates);
    return std::make_pair(creates, held);
  };
  constexpr std::size_t kSmallDevice = 200 * kMiB;             // no room: pages of one block
  constexpr std::size_t kLargeDevice = std::size_t{16} << 30;  // room: pages of 16 MiB
  const auto [default_small, held_small] = run("", kSmallDevice, std::size_t{1} << 40);
  const auto [granules_small, held_granules] = run("max_page_size_mb:2", kSmallDevice, 2 * kMiB);
  EXPECT_EQ(held_granules, held_small);
  EXPECT_EQ(granules_small, static_cast<std::size_t>(held_granules) / (2 * kMiB));
  EXPECT_LT(default_small, granules_small);
  const auto [default_large, held_large] = run("", kLargeDevice, std::size_t{1} << 40);
  const auto [four_large, held_four] = run("max_page_size_mb:4", kLargeDevice, 4 * kMiB);
  EXPECT_LT(default_large, four_large);
  EXPECT_LE(held_four, held_large);
}

TEST_F(CudacachePolicy, MovesAnotherStreamsFreePagesInsteadOfCreatingWhenFull) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    ASSERT_TRUE(allocator.expandable());
    // No room: 2 MiB pages, three per 6 MiB block (too small for a page of its own).
    leave_free_pages(allocator, other, 10);
    cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.create, 30u);
    void* p = allocator.allocate(60 * kMiB, nullptr);  // the same pages, moved
    counts = sim_calls();
    EXPECT_EQ(counts.create, 30u);
    EXPECT_EQ(counts.release, 0u);
    EXPECT_EQ(counts.unmap, 30u);
    EXPECT_EQ(counts.synchronize, 1u);  // one for the stream the pages leave, not one per page
    EXPECT_EQ(counts.map, 60u);
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(stats.num_ooms, 0);
    EXPECT_EQ(stats.num_alloc_retries, 0);  // no out-of-memory ladder was needed
    // The freed blocks merged into one: its 30 adjacent pages leave in one unmap of the range
    // (one cuMemUnmap per page, counted above).
    EXPECT_EQ(stats.num_device_free, 1);
    EXPECT_EQ(reserved(stats), static_cast<std::int64_t>(60 * kMiB));
    EXPECT_EQ(sim_counters().in_use_bytes, 60 * kMiB);
    ASSERT_EQ(cudaMemset(p, 7, 60 * kMiB), cudaSuccess);  // mapped and accessible
    allocator.deallocate(p);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Note [New pages first]: without room, a request gets new pages while the device has them, and
// free pages elsewhere are moved only once it has not.
TEST_F(CudacachePolicy, WithoutRoomNewPagesComeBeforeMovedOnes) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);  // no room: 2 MiB pages
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    leave_free_pages(allocator, other, 3);  // 18 MiB of free pages
    cudasim_call_counts before = sim_calls();
    void* first = allocator.allocate(6 * kMiB, nullptr);
    cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.create, before.create + 3);
    EXPECT_EQ(counts.unmap, before.unmap);
    void* second = allocator.allocate(76 * kMiB, nullptr);  // what the device has left
    counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap);
    EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(100 * kMiB));
    before = sim_calls();
    void* third = allocator.allocate(18 * kMiB, nullptr);  // now the free pages move
    counts = sim_calls();
    EXPECT_EQ(counts.create, before.create);
    EXPECT_EQ(counts.unmap, before.unmap + 9);
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(stats.num_ooms, 0);
    EXPECT_EQ(stats.num_alloc_retries, 0);
    EXPECT_EQ(reserved(stats), static_cast<std::int64_t>(100 * kMiB));
    ASSERT_EQ(cudaMemset(third, 3, 18 * kMiB), cudaSuccess);
    for (void* p : {first, second, third}) allocator.deallocate(p);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Whether `pointer` lies in a mapped stretch of a range (a segment of the snapshot).
bool mapped(const MemorySnapshot& snapshot, const void* pointer) {
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  for (const SegmentSnapshot& segment : snapshot.segments) {
    if (address >= segment.address && address < segment.address + segment.total_size) return true;
  }
  return false;
}

// Note [Moving pages]: without room too, among free pages of one size those of the block free
// the longest move first, whatever their place: the one freed last is the likelier to serve
// the next request of its size where it is.
TEST_F(CudacachePolicy, WithoutRoomThePagesFreeTheLongestMoveFirst) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);  // no room: 2 MiB pages
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    void* fill = allocator.allocate(80 * kMiB, nullptr);
    void* low = allocator.allocate(6 * kMiB, other);
    void* between = allocator.allocate(2 * kMiB, other);  // keeps the two free blocks apart
    void* high = allocator.allocate(6 * kMiB, other);
    allocator.deallocate(high);  // freed first: its pages go first though they lie higher
    void* search = allocator.allocate(2 * kMiB, nullptr);  // a search between the two frees
    allocator.deallocate(low);
    ASSERT_EQ(sim_counters().in_use_bytes, 96 * kMiB);
    const cudasim_call_counts before = sim_calls();
    void* moved = allocator.allocate(6 * kMiB, nullptr);  // the device has 4 MiB left
    const cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.create, before.create);
    EXPECT_EQ(counts.unmap, before.unmap + 3);
    EXPECT_EQ(allocator.stats().num_alloc_retries, 0);
    const MemorySnapshot snapshot = allocator.snapshot();
    EXPECT_FALSE(mapped(snapshot, high));
    EXPECT_TRUE(mapped(snapshot, low));
    ASSERT_EQ(cudaMemset(moved, 5, 6 * kMiB), cudaSuccess);
    for (void* p : {moved, fill, search, between}) allocator.deallocate(p);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Note [New pages first]: a growth that extends a free block at its range's end asks the device
// only for the rest, and when the device has that, nothing moves: the other stream's free pages
// stay where they are (before, asked for the whole request, it moved them).
TEST_F(CudacachePolicy, AGrowthAsksTheDeviceOnlyForWhatTheFreeBlockItExtendsLacks) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);  // no room: 2 MiB pages
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    leave_free_pages(allocator, other, 10);  // 60 MiB of free pages
    void* kept = allocator.allocate(20 * kMiB, nullptr);
    allocator.deallocate(allocator.allocate(10 * kMiB, nullptr));  // a free block at the end
    ASSERT_EQ(sim_counters().in_use_bytes, 90 * kMiB);
    const cudasim_call_counts before = sim_calls();
    void* grown = allocator.allocate(18 * kMiB, nullptr);  // 10 MiB free + 8 MiB new
    cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap);
    EXPECT_GT(counts.create, before.create);
    EXPECT_EQ(sim_counters().in_use_bytes, 98 * kMiB);
    EXPECT_EQ(allocator.stats().num_alloc_retries, 0);
    ASSERT_EQ(cudaMemset(grown, 8, 18 * kMiB), cudaSuccess);
    // The other stream's 60 MiB are all still there.
    const cudasim_call_counts kept_calls = sim_calls();
    void* again = allocator.allocate(60 * kMiB, other);
    counts = sim_calls();
    EXPECT_EQ(counts.map, kept_calls.map);
    EXPECT_EQ(counts.create, kept_calls.create);
    for (void* p : {again, grown, kept}) allocator.deallocate(p);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// The driver out of memory for an access grant: a growth in new pages that fails that way goes
// down the out-of-memory ladder like a refused create (it was a CUDA error, which skipped the
// ladder and the retry hooks, and counted no out-of-memory), and the next request that needs
// moved pages still gets them.
TEST_F(CudacachePolicy, AFailedGrowthInNewPagesLeavesMovesOn) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    leave_free_pages(allocator, other, 3);  // 18 MiB of free pages
    ASSERT_EQ(cudasim_fail_nth_call(0, "set_access", 1), 0);
    void* grown = allocator.allocate(6 * kMiB, nullptr);  // a growth in new pages
    ASSERT_NE(grown, nullptr);
    EXPECT_EQ(cudaMemset(grown, 2, 6 * kMiB), cudaSuccess);
    EXPECT_EQ(allocator.stats().num_ooms, 0);
    EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())), sim_counters().in_use_bytes);
    allocator.deallocate(grown);
    allocator.empty_cache();
    leave_free_pages(allocator, other, 3);
    // More than the device has left (82 MiB): the free pages must move.
    const cudasim_call_counts before = sim_calls();
    void* p = allocator.allocate(90 * kMiB, nullptr);
    EXPECT_EQ(sim_calls().unmap, before.unmap + 9);
    EXPECT_EQ(allocator.stats().num_alloc_retries, 0);
    ASSERT_EQ(cudaMemset(p, 1, 90 * kMiB), cudaSuccess);
    allocator.deallocate(p);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Found by fuzz_allocator_ops: a new range is sized from the device's memory (9/8 of it), but
// pages moved from elsewhere can serve a request larger than that once the device has shrunk
// (cudasim; on a GPU the memory does not change). The range ran out under the request and the
// allocator followed a null block. A range is never smaller than its request now.
TEST_F(CudacachePolicy, ANewRangeIsNeverSmallerThanItsRequest) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);  // large enough for 20 MiB pages
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    allocator.deallocate(allocator.allocate(40 * kMiB, nullptr));  // 40 MiB of pages, cached
    ASSERT_EQ(cudasim_set_capacity(0, 32 * kMiB), 0);              // a new range would be 36 MiB
    void* p = allocator.allocate(40 * kMiB, other);                // served by the pages moved
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(cudaMemset(p, 3, 40 * kMiB), cudaSuccess);
    EXPECT_EQ(sim_calls().create, 2u);  // the two 20 MiB pages, created once
    allocator.deallocate(p);
    allocator.empty_cache();
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// The out-of-memory ladder waits for pending frees; the 2 MiB pages and pages of one block it
// then unmaps are mapped again where the request needs them, not released and created anew.
TEST_F(CudacachePolicy, TheLadderMapsThePagesItUnmapsInsteadOfCreatingNewOnes) {
  ASSERT_EQ(cudasim_set_capacity(0, 40 * kMiB), 0);  // no room: 2 MiB pages
  const ScopedStream side;
  for (const std::size_t block : {6 * kMiB, 30 * kMiB}) {
    SCOPED_TRACE(block);
    const cudasim_call_counts before = sim_calls();
    {
      DeviceAllocator allocator(0, options());
      // Pending on side: not free, so their pages cannot move yet.
      std::vector<void*> pending;
      for (std::size_t bytes = 0; bytes < 30 * kMiB; bytes += block) {
        pending.push_back(allocator.allocate(block, nullptr));
        allocator.record_stream(pending.back(), side);
      }
      const cudasim_call_counts made = sim_calls();
      HeldStream held(side);
      // jthread: joined also when the allocation throws (the fault sweep fails its calls).
      // Started before the frees: a failed event call makes a free wait for the device.
      std::jthread releaser([&held] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        held.release();
      });
      for (void* p : pending) allocator.deallocate(p);
      void* b = allocator.allocate(30 * kMiB, nullptr);  // the ladder waits for side
      releaser.join();
      const cudasim_call_counts counts = sim_calls();
      EXPECT_EQ(allocator.stats().num_alloc_retries, 1);
      // Before the ladder, b asks for one page of its own of 30 MiB, which the full device
      // refuses (cudasim counts failed calls). After it, b maps the pages the ladder unmapped:
      // nothing more is created or released.
      EXPECT_EQ(made.create - before.create, block == 6 * kMiB ? 15u : 1u);
      EXPECT_EQ(counts.create - made.create, 1u);
      EXPECT_EQ(counts.release - before.release, 0u);
      EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(30 * kMiB));
      EXPECT_EQ(sim_counters().in_use_bytes, 30 * kMiB);
      ASSERT_EQ(cudaMemset(b, 1, 30 * kMiB), cudaSuccess);
      allocator.deallocate(b);
    }
    EXPECT_EQ(sim_counters().in_use_bytes, 0u);
  }
}

TEST_F(CudacachePolicy, CreatesPyTorchsPagesWhileTheDeviceHasRoom) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);  // 20 MiB pages from 10 GiB on
  DeviceAllocator allocator(0, options());
  void* p = allocator.allocate(30 * kMiB, nullptr);
  EXPECT_EQ(sim_calls().create, 2u);  // two 20 MiB pages, as PyTorch
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(40 * kMiB));
  allocator.deallocate(p);
}

// Note [Fewer pages with room]: a growth still maps whole 20 MiB steps, but on a device of
// 64 GiB creates them in pages of up to 64 MiB (1/1024 of the device): 150 MiB is three creates
// and three maps, not eight. On a 16 GiB device (16 MiB would be 1/1024) it is PyTorch's pages.
TEST_F(CudacachePolicy, WithRoomALargeDeviceCreatesAGrowthInFewerPages) {
  for (const auto& [gib, creates] :
       {std::pair{std::size_t{64}, 3u}, std::pair{std::size_t{16}, 8u}}) {
    SCOPED_TRACE(gib);
    ASSERT_EQ(cudasim_set_capacity(0, gib << 30), 0);
    DeviceAllocator allocator(0, options());
    const cudasim_call_counts before = sim_calls();
    void* p = allocator.allocate(150 * kMiB, nullptr);
    const cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.create, before.create + creates);
    EXPECT_EQ(counts.map, before.map + creates);
    EXPECT_EQ(counts.set_access, before.set_access + 1);  // the growth's range at once
    EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(160 * kMiB));
    ASSERT_EQ(cudaMemset(p, 3, 150 * kMiB), cudaSuccess);
    allocator.deallocate(p);
    allocator.empty_cache();
    EXPECT_EQ(sim_calls().release, counts.release + creates);
  }
}

// Note [Mapping ahead with room]: once the program has had 4 GiB in use, a growth of 30 MiB maps
// a whole 64 MiB page (1/1024 of a 64 GiB device), within 1.02 x that peak, and the next
// request finds its memory mapped: no device call. Before such a peak the growth maps its 20 MiB
// steps, as PyTorch does.
TEST_F(CudacachePolicy, WithRoomAGrowthMapsAWholePageAheadWithinTheLimit) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{64} << 30), 0);
  DeviceAllocator allocator(0, options());
  void* small = allocator.allocate(30 * kMiB, nullptr);  // nothing in use before: 40 MiB
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(40 * kMiB));
  void* big = allocator.allocate(std::size_t{4} << 30, nullptr);
  const std::int64_t held = reserved(allocator.stats());
  const cudasim_call_counts before = sim_calls();
  void* first = allocator.allocate(30 * kMiB, nullptr);
  cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.create, before.create + 1);
  EXPECT_EQ(counts.map, before.map + 1);
  EXPECT_EQ(counts.set_access, before.set_access + 1);
  EXPECT_EQ(reserved(allocator.stats()), held + static_cast<std::int64_t>(64 * kMiB));
  void* second = allocator.allocate(30 * kMiB, nullptr);  // in what was mapped ahead
  counts = sim_calls();
  EXPECT_EQ(counts.create, before.create + 1);
  EXPECT_EQ(counts.map, before.map + 1);
  EXPECT_EQ(reserved(allocator.stats()), held + static_cast<std::int64_t>(64 * kMiB));
  // Within 1.02 x the most in use.
  const MemoryStats stats = allocator.stats();
  EXPECT_LE(reserved(stats) * 1000,
            stats.active_bytes[kAllPools].peak * static_cast<std::int64_t>(1020));
  EXPECT_EQ(sim_counters().in_use_bytes, static_cast<std::size_t>(reserved(stats)));
  ASSERT_EQ(cudaMemset(second, 5, 30 * kMiB), cudaSuccess);  // mapped and accessible
  for (void* p : {small, big, first, second}) allocator.deallocate(p);
}

// Note [Moving pages]: a growth that would end the room while the device has it is one large
// request, not a device filling up: it is held to kHeldPerMille, with a free block's pages
// moved to it instead of new ones created for all of it.
TEST_F(CudacachePolicy, AGrowthThatWouldEndTheRoomIsHeldToTheLimit) {
  // Room while a growth leaves 2,700 MiB free (what is held stays within 500 MiB); pages of
  // 6 MiB (1/512 of the device) while there is room.
  ASSERT_EQ(cudasim_set_capacity(0, 3200 * kMiB), 0);
  DeviceAllocator allocator(0, options());
  void* a = allocator.allocate(240 * kMiB, nullptr);
  void* b = allocator.allocate(240 * kMiB, nullptr);
  EXPECT_EQ(sim_calls().create, 80u);
  allocator.deallocate(a);
  // 300 MiB more would hold 780 MiB: past the room, and past 1.08 x the 540 MiB then in use.
  void* c = allocator.allocate(300 * kMiB, nullptr);
  const cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.unmap, 40u);  // a's pages, moved
  EXPECT_LE(reserved(allocator.stats()), static_cast<std::int64_t>(540 * kMiB * 108 / 100));
  EXPECT_EQ(sim_counters().in_use_bytes, static_cast<std::size_t>(reserved(allocator.stats())));
  ASSERT_EQ(cudaMemset(c, 7, 300 * kMiB), cudaSuccess);
  allocator.deallocate(b);
  allocator.deallocate(c);
}

// Note [Moving pages]: with room, a growth past the held limit takes the free pages of its own
// range too. A freed block pinned before a live one is memory a larger request cannot use in
// place: its pages move to the growth instead of new ones being created beside them (a test
// build that kept a range's own pages where they were held 2.2 x the peak on a buffer grown
// step by step with a block kept after each step; PyTorch's expandable segments hold the same).
TEST_F(CudacachePolicy, WithRoomTheGrowingRangesOwnFreePagesMoveToItPastTheHeldLimit) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);  // room, 20 MiB pages
  DeviceAllocator allocator(0, options());
  void* freed = allocator.allocate(200 * kMiB, nullptr);  // ten pages
  void* pinned = allocator.allocate(40 * kMiB, nullptr);  // after it, live throughout
  ASSERT_EQ(cudaMemset(pinned, 9, 40 * kMiB), cudaSuccess);
  allocator.deallocate(freed);
  const cudasim_call_counts before = sim_calls();
  // 300 MiB does not fit in the 200 MiB freed; created whole, 540 MiB would be held for the
  // 340 MiB in use, past 1.08 x.
  void* larger = allocator.allocate(300 * kMiB, nullptr);
  const cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.unmap, before.unmap + 10);   // the freed block's pages, moved
  EXPECT_EQ(counts.create, before.create + 5);  // only the 100 MiB they do not cover
  EXPECT_EQ(counts.release, before.release);
  EXPECT_EQ(counts.synchronize, before.synchronize + 1);  // the stream they leave, once
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(340 * kMiB));
  EXPECT_EQ(sim_counters().in_use_bytes, 340 * kMiB);
  ASSERT_EQ(cudaMemset(larger, 3, 300 * kMiB), cudaSuccess);  // mapped and accessible
  std::vector<unsigned char> content(40 * kMiB);
  ASSERT_EQ(cudaMemcpy(content.data(), pinned, content.size(), cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_EQ(std::count(content.begin(), content.end(), 9), static_cast<std::ptrdiff_t>(40 * kMiB));
  allocator.deallocate(pinned);
  allocator.deallocate(larger);
}

// Note [Moves need whole pages]: with room, no page moves while less than a quarter of the
// free memory lies in whole pages. Here ten freed 15 MiB blocks each share their 20 MiB pages
// with live neighbours (150 MiB free, none of it movable) and one freed 40 MiB block holds two
// whole pages: 40 of 195 MiB. A 100 MiB request past the held limit then creates its pages and
// leaves those two where the program freed them; once a third of the free memory lies in whole
// pages, the same request moves them.
TEST_F(CudacachePolicy, WithRoomNoPageMovesWhileMostFreeMemoryIsInSharedPages) {
  for (const bool mostly_shared : {true, false}) {
    SCOPED_TRACE(mostly_shared);
    ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);  // room, 20 MiB pages
    DeviceAllocator allocator(0, options());
    std::vector<void*> blocks;
    for (int i = 0; i < 20; ++i) blocks.push_back(allocator.allocate(15 * kMiB, nullptr));
    void* whole = allocator.allocate(40 * kMiB, nullptr);  // two pages of its own
    void* last = allocator.allocate(15 * kMiB, nullptr);
    const int freed = mostly_shared ? 10 : 4;  // every other block: each keeps live neighbours
    for (int i = 0; i < 2 * freed; i += 2)
      allocator.deallocate(blocks[static_cast<std::size_t>(i)]);
    allocator.deallocate(whole);
    const cudasim_call_counts before = sim_calls();
    void* request = allocator.allocate(100 * kMiB, nullptr);
    const cudasim_call_counts counts = sim_calls();
    EXPECT_EQ(counts.unmap, before.unmap + (mostly_shared ? 0u : 2u));
    EXPECT_EQ(counts.create, before.create + (mostly_shared ? 5u : 3u));
    ASSERT_EQ(cudaMemset(request, 1, 100 * kMiB), cudaSuccess);
    allocator.deallocate(request);
    allocator.deallocate(last);
    for (int i = 0; i < 20; ++i) {
      if (i % 2 == 1 || i >= 2 * freed) allocator.deallocate(blocks[static_cast<std::size_t>(i)]);
    }
  }
}

// Note [Small pages past the held limit]: with room, a growth of the small pool past the held
// limit takes the smallest whole free page elsewhere, however much larger than its 2 MiB, rather
// than creating one, once that page's block has been free for a few searches. Here ten freed
// 15 MiB blocks share their pages with live neighbours, so a 100 MiB request creates its five
// pages past the limit (Note [Moves need whole pages]); freed, its pages are whole and free. Right
// after that free the small pool's first growth creates its own 2 MiB page (the program may come
// straight back to the memory it just freed); after eight other requests it takes one of them.
TEST_F(CudacachePolicy, WithRoomTheSmallPoolPastTheHeldLimitTakesALargerSettledFreePage) {
  for (const bool settled : {false, true}) {
    SCOPED_TRACE(settled);
    ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);  // room, 20 MiB pages
    DeviceAllocator allocator(0, options());
    std::vector<void*> blocks;
    for (int i = 0; i < 20; ++i) blocks.push_back(allocator.allocate(15 * kMiB, nullptr));
    for (int i = 0; i < 20; i += 2) allocator.deallocate(blocks[static_cast<std::size_t>(i)]);
    const cudasim_call_counts before_large = sim_calls();
    void* large = allocator.allocate(100 * kMiB, nullptr);
    EXPECT_EQ(sim_calls().create, before_large.create + 5);  // 400 MiB held, 300 MiB at most used
    allocator.deallocate(large);
    if (settled) {
      for (int i = 0; i < 8; ++i) allocator.deallocate(allocator.allocate(15 * kMiB, nullptr));
    }
    const std::int64_t held = reserved(allocator.stats());
    EXPECT_EQ(held, static_cast<std::int64_t>(400 * kMiB));
    const cudasim_call_counts before = sim_calls();
    std::vector<void*> small;
    small.push_back(allocator.allocate(512 * 1024, nullptr));
    cudasim_call_counts counts = sim_calls();
    if (!settled) {
      EXPECT_EQ(counts.create, before.create + 1);  // 2 MiB
      EXPECT_EQ(counts.unmap, before.unmap);
      EXPECT_EQ(reserved(allocator.stats()), held + static_cast<std::int64_t>(2 * kMiB));
    } else {
      EXPECT_EQ(counts.create, before.create);       // none created: the 2 MiB it lacks ...
      EXPECT_EQ(counts.unmap, before.unmap + 1);     // ... come with a 20 MiB page moved
      EXPECT_EQ(reserved(allocator.stats()), held);  // what is held stays
      EXPECT_EQ(sim_counters().in_use_bytes, static_cast<std::size_t>(held));
      // The rest of the page serves the small pool's next 19 MiB without a device call.
      for (int i = 1; i < 40; ++i) small.push_back(allocator.allocate(512 * 1024, nullptr));
      counts = sim_calls();
      EXPECT_EQ(counts.create + counts.map + counts.unmap,
                before.create + before.map + 1 + before.unmap + 1);
    }
    for (void* block : small) ASSERT_EQ(cudaMemset(block, 5, 512 * 1024), cudaSuccess);
    for (void* block : small) allocator.deallocate(block);
    for (int i = 1; i < 20; i += 2) allocator.deallocate(blocks[static_cast<std::size_t>(i)]);
  }
}

TEST_F(CudacachePolicy, EmptyCacheReleasesEveryFreePage) {
  DeviceAllocator allocator(0, options());
  void* kept = allocator.allocate(1 * kMiB, nullptr);
  allocator.deallocate(allocator.allocate(300 * kMiB, nullptr));
  allocator.empty_cache();
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(2 * kMiB));  // kept's page
  EXPECT_EQ(sim_counters().in_use_bytes, 2 * kMiB);
  allocator.deallocate(kept);
  allocator.empty_cache();
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
  EXPECT_EQ(sim_calls().create, sim_calls().release);
}

// Note [Room without asking]: a program far from the limit never asks the driver for the
// device's free memory (cudaMemGetInfo, about 10 us).
TEST_F(CudacachePolicy, NeverReadsTheDevicesFreeMemoryFarFromTheLimit) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);  // room all along
  DeviceAllocator allocator(0, options());
  std::vector<void*> blocks;
  for (int i = 0; i < 64; ++i) blocks.push_back(allocator.allocate(20 * kMiB, nullptr));
  const cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.create, 64u);  // one 20 MiB page per growth
  EXPECT_EQ(counts.mem_get_info, 0u);
  for (void* p : blocks) allocator.deallocate(p);
}

// The device is assumed to be the allocator's alone until a page cannot be created. That is the
// most room the device can have (a reading can only find less), so an estimate on it that finds
// no room is trusted too: here another user holds 2 GiB the assumption does not know of, and no
// request reads the device while every page can be created.
TEST_F(CudacachePolicy, TrustsTheAssumedDeviceAlsoWhenItFindsNoRoom) {
  // Room while a growth leaves 6,912 MiB free.
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  void* other = nullptr;  // another user the assumption does not know of
  ASSERT_EQ(cudaMalloc(&other, 2048 * kMiB), cudaSuccess);
  DeviceAllocator allocator(0, options());
  cudasim_call_counts before = sim_calls();
  void* first = allocator.allocate(1000 * kMiB, nullptr);  // assumed 8,192 MiB free: room
  EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info);
  EXPECT_EQ(sim_calls().create, before.create + 63);  // 16 MiB pages (1/512 of the device)
  before = sim_calls();
  // Assumed 7,184 MiB free: no room, and not read (the device has 5,136 MiB). One page of its
  // own for a block of at least four pages (Note [Pages of one block]).
  void* second = allocator.allocate(400 * kMiB, nullptr);
  EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info);
  EXPECT_EQ(sim_calls().create, before.create + 1);
  before = sim_calls();
  // Pages follow the assumption: 7,184 - 392 = 6,792 MiB free, so 10 MiB pages (1/640 of it
  // in whole granules), where a reading (4,744 MiB free) would have given 8 MiB ones (the
  // floor, 1/1024 of the device).
  void* third = allocator.allocate(6 * kMiB, nullptr);
  EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info);
  EXPECT_EQ(sim_calls().create, before.create + 1);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(1410 * kMiB));
  for (void* p : {first, second, third}) allocator.deallocate(p);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
}

// Another user holds 9 GiB of a 64 GiB device. A 56 GiB request finds no room on the assumption,
// its page cannot be created, and the device is read: 55 GiB free, out of memory. The reading is
// then followed, and read again when old (after 64 decisions) where it finds no room.
class CudacachePolicyAfterAReading : public CudacachePolicy {
 protected:
  void SetUp() override {
    CudacachePolicy::SetUp();
    if (IsSkipped()) return;
    ASSERT_EQ(cudasim_set_capacity(0, std::size_t{64} << 30), 0);
    ASSERT_EQ(cudaMalloc(&other_, std::size_t{9} << 30), cudaSuccess);
    allocator_.emplace(0, options());
    const cudasim_call_counts before = sim_calls();
    EXPECT_THROW(allocator_->allocate(std::size_t{56} << 30, nullptr), OutOfMemoryError);
    EXPECT_GE(sim_calls().mem_get_info, before.mem_get_info + 1);
  }
  void TearDown() override {
    allocator_.reset();
    if (other_ != nullptr) {
      EXPECT_EQ(cudaFree(other_), cudaSuccess);
    }
    CudacachePolicy::TearDown();
  }
  void* other_ = nullptr;
  std::optional<DeviceAllocator> allocator_;
};

// Note [Room without asking]: a reading that finds no room again serves twice as long as the one
// before, so a program that stays near the limit asks a few times in all (after 64, 128, 256 ...
// decisions), not once per 64 decisions: here 340 growths of one 20 MiB page each, about 700
// decisions, ask 3 times instead of 10.
TEST_F(CudacachePolicyAfterAReading, ReadingsThatKeepFindingNoRoomAreTakenLessOften) {
  DeviceAllocator& allocator = *allocator_;
  std::vector<void*> blocks{allocator.allocate(std::size_t{48} << 30, nullptr)};  // no room
  const cudasim_call_counts before = sim_calls();
  for (int i = 0; i < 340; ++i) blocks.push_back(allocator.allocate(20 * kMiB, nullptr));
  const cudasim_call_counts after = sim_calls();
  EXPECT_EQ(after.create, before.create + 340);            // one page per growth: 340 growths
  EXPECT_GE(after.mem_get_info, before.mem_get_info + 2);  // still read again
  EXPECT_LE(after.mem_get_info, before.mem_get_info + 5);
  for (void* p : blocks) allocator.deallocate(p);
}

// Once an estimate finds room again, the lifetime is back to 64 decisions: after the long-lived
// readings above, the device is emptied (room, not read), and the first estimate without room
// that follows, more than 64 decisions after the last reading, reads the device (a lifetime
// kept at 512 would not).
TEST_F(CudacachePolicyAfterAReading, RoomFoundAgainShortensTheReadingsLifetime) {
  DeviceAllocator& allocator = *allocator_;
  std::vector<void*> blocks{allocator.allocate(std::size_t{48} << 30, nullptr)};  // no room
  for (int i = 0; i < 340; ++i) blocks.push_back(allocator.allocate(20 * kMiB, nullptr));
  for (void* p : blocks) allocator.deallocate(p);
  allocator.empty_cache();
  cudasim_call_counts before = sim_calls();
  void* small = allocator.allocate(20 * kMiB, nullptr);  // room: trusted, not read
  EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info);
  before = sim_calls();
  void* large = allocator.allocate(std::size_t{48} << 30, nullptr);  // no room: read first
  EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info + 1);
  allocator.deallocate(large);
  allocator.deallocate(small);
}

// The reading is followed by the allocator's own changes only: when another user has filled
// the device since, the first page that cannot be created makes the next decision read the
// device again, and the request is served in the small pages that still fit.
TEST_F(CudacachePolicy, APageThatCannotBeCreatedMakesItReadTheDeviceAgain) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  DeviceAllocator allocator(0, options());
  void* first = allocator.allocate(16 * kMiB, nullptr);  // assumed: room, a 16 MiB page
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASSERT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaSuccess);
  void* other = nullptr;  // another user of the device leaves it 10 MiB
  ASSERT_EQ(cudaMalloc(&other, free_bytes - 10 * kMiB), cudaSuccess);
  const cudasim_call_counts before = sim_calls();
  void* second = allocator.allocate(6 * kMiB, nullptr);
  const cudasim_call_counts after = sim_calls();
  EXPECT_GE(after.mem_get_info, before.mem_get_info + 1);
  // The 16 MiB page that failed, then pages of at most a quarter of what the device has left
  // (2 MiB of the 10), below the smallest page without room (8 MiB: 1/1024 of the device).
  EXPECT_EQ(after.create, before.create + 4);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(22 * kMiB));
  EXPECT_EQ(cudaMemset(second, 1, 6 * kMiB), cudaSuccess);
  allocator.deallocate(second);
  allocator.deallocate(first);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
}

// Bad answer from the driver: a failed cudaMemGetInfo counts as no room (the request is still
// served, its bytes intact) and the next decision reads the device again. Another user leaves
// 10 MiB of 8 GiB: the 16 MiB page the assumption gives a 7 MiB request cannot be created, the
// reading that follows fails, and the request gets 2 MiB pages (the next decision, its second
// page's, reads the device again).
TEST_F(CudacachePolicy, AFailedReadingOfTheDeviceIsNoRoomAndIsTriedAgain) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  void* other = nullptr;
  ASSERT_EQ(cudaMalloc(&other, (std::size_t{8} << 30) - 10 * kMiB), cudaSuccess);
  DeviceAllocator allocator(0, options());
  ASSERT_EQ(cudasim_fail_nth_call(0, "mem_get_info", 1), 0);
  cudasim_call_counts before = sim_calls();
  void* p = allocator.allocate(7 * kMiB, nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info + 2);  // failed calls count too
  EXPECT_EQ(sim_calls().create, before.create + 5);  // the 16 MiB page that failed, then 4
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(8 * kMiB));
  ASSERT_EQ(cudaMemset(p, 5, 7 * kMiB), cudaSuccess);
  allocator.deallocate(p);
  ASSERT_EQ(cudaFree(other), cudaSuccess);
}

// A page holding a live block strands what else it holds: pages made with room are at most
// 1/512 of the memory the allocator may use (the device, or per_process_memory_fraction's cap),
// so 20 MiB from 10 GiB on and less below.
TEST_F(CudacachePolicy, PagesMadeWithRoomShrinkWithTheMemoryTheAllocatorMayUse) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{16} << 30), 0);
  for (const auto& [fraction, page] : {std::pair{"1", 20 * kMiB}, std::pair{"0.5", 16 * kMiB},
                                       std::pair{"0.25", 8 * kMiB}, std::pair{"0.03", 2 * kMiB}}) {
    SCOPED_TRACE(fraction);
    DeviceAllocator allocator(
        0, Options(std::string("policy:cudacache,per_process_memory_fraction:") + fraction));
    const cudasim_call_counts before = sim_calls();
    void* p = allocator.allocate(2 * kMiB, nullptr);  // large pool: one page, with room
    EXPECT_EQ(sim_calls().create, before.create + 1);
    EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(page));
    allocator.deallocate(p);
  }
}

// Without room, pages are at most 1/640 of the free memory left and at least 1/1024 of the
// device (12 MiB here). Another user leaves 10,240, 9,000 or 7,000 MiB of a 12 GiB device free.
// The assumption knows nothing of it until a page cannot be created; once the device is read, a
// 14 MiB request finds no room (a growth must leave 10.125 GiB free) and its pages follow what is
// left free (16 and 14 MiB), down to the floor (12 MiB, where 7,000 / 640 would give 10). It
// spans fewer than four of them: none of its own (Note [Pages of one block]).
TEST_F(CudacachePolicy, PagesMadeWithoutRoomShrinkAsTheDeviceFills) {
  constexpr std::size_t kDevice = std::size_t{12} << 30;
  ASSERT_EQ(cudasim_set_capacity(0, kDevice), 0);
  constexpr std::size_t kRequest = 14 * kMiB;
  for (const auto& [free_mib, page] :
       {std::pair{std::size_t{10240}, 16 * kMiB}, std::pair{std::size_t{9000}, 14 * kMiB},
        std::pair{std::size_t{7000}, 12 * kMiB}}) {
    SCOPED_TRACE(free_mib);
    void* other = nullptr;
    ASSERT_EQ(cudaMalloc(&other, kDevice - free_mib * kMiB), cudaSuccess);
    DeviceAllocator allocator(0, options());
    cudasim_call_counts before = sim_calls();
    // Assumed free (12 GiB) but more than the device has: its page cannot be created, so the
    // device is read (and the request runs out of memory).
    EXPECT_THROW(allocator.allocate((free_mib + 1024) * kMiB, nullptr), OutOfMemoryError);
    EXPECT_GE(sim_calls().mem_get_info, before.mem_get_info + 1);
    before = sim_calls();
    void* p = allocator.allocate(kRequest, nullptr);
    const std::size_t pages = (kRequest + page - 1) / page;
    // Read once more: the ladder's last growth could not create its page either.
    EXPECT_EQ(sim_calls().mem_get_info, before.mem_get_info + 1);
    EXPECT_EQ(sim_calls().create, before.create + pages);
    EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(pages * page));
    allocator.deallocate(p);
    allocator.empty_cache();
    ASSERT_EQ(cudaFree(other), cudaSuccess);
  }
}

// Near the limit a page is at most a quarter of what the device has left, however large the
// smallest page without room (12 MiB: 1/1024 of this device): with 8 MiB left, a 7 MiB request
// gets four 2 MiB pages, where a 12 MiB page could not be created and the request ran out of
// memory with the device's 8 MiB free (found on a variant of the real traces,
// concat_cs336_small_gcn, at its smallest device).
TEST_F(CudacachePolicy, TheLastPagesBeforeTheLimitAreOnesTheDeviceCanGive) {
  constexpr std::size_t kDevice = std::size_t{12} << 30;
  ASSERT_EQ(cudasim_set_capacity(0, kDevice), 0);
  void* other = nullptr;  // another user of the device leaves it 8 MiB
  ASSERT_EQ(cudaMalloc(&other, kDevice - 8 * kMiB), cudaSuccess);
  DeviceAllocator allocator(0, options());
  // Too large for the device: it is read, and the reading says how little is left.
  EXPECT_THROW(allocator.allocate(64 * kMiB, nullptr), OutOfMemoryError);
  const cudasim_call_counts before = sim_calls();
  void* p = allocator.allocate(7 * kMiB, nullptr);
  EXPECT_EQ(sim_calls().create, before.create + 4);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(8 * kMiB));
  EXPECT_EQ(cudaMemset(p, 1, 7 * kMiB), cudaSuccess);
  allocator.deallocate(p);
  allocator.empty_cache();
  ASSERT_EQ(cudaFree(other), cudaSuccess);
}

TEST_F(CudacachePolicy, ASmallDeviceGetsSmallPages) {
  ASSERT_EQ(cudasim_set_capacity(0, 12 * kMiB), 0);  // a 20 MiB page would not fit
  DeviceAllocator allocator(0, options());
  void* p = allocator.allocate(3 * kMiB, nullptr);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(4 * kMiB));
  EXPECT_EQ(allocator.stats().num_alloc_retries, 0);
  allocator.deallocate(p);
}

TEST_F(CudacachePolicy, OutOfMemoryReportsFreeMemoryInPartialPages) {
  ASSERT_EQ(cudasim_set_capacity(0, 12 * kMiB), 0);
  constexpr std::size_t kBlock = 3 * kMiB / 2;  // never a whole page
  DeviceAllocator allocator(0, options());
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(allocator.allocate(kBlock, nullptr));
  for (int i = 1; i < 8; i += 2) allocator.deallocate(blocks[i]);  // 6 MiB free, no whole page
  try {
    allocator.allocate(4 * kMiB, nullptr);
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const OutOfMemoryError& error) {
    EXPECT_TRUE(error.report().pages);
    EXPECT_EQ(error.report().reserved_bytes, 12 * kMiB);
    EXPECT_EQ(error.report().free_in_partial_pages_bytes, 6 * kMiB);
    // Every free byte shares a 2 MiB granule with a block in use: no page size would free it.
    EXPECT_EQ(error.report().free_beside_in_use_bytes, 6 * kMiB);
    const std::string message = error.what();
    EXPECT_NE(message.find("6.00 MiB of the free memory lies in pages that also hold allocated"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("(6.00 MiB of it in the 2 MiB granules, the least a page can be, that "
                           "it shares with memory in use)."),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("max_split_size_mb"), std::string::npos) << message;
  }
  for (int i = 0; i < 8; i += 2) allocator.deallocate(blocks[i]);
}

TEST_F(CudacachePolicy, OutOfMemoryTellsFreeGranulesOfLargerPagesFromGranulesSharedWithBlocks) {
  // With room on a 2 GiB device a page is 4 MiB (1/512 of it): a 2 MiB block leaves the other
  // granule of its page free and whole, which only a smaller page would have freed.
  ASSERT_EQ(cudasim_set_capacity(0, 2048 * kMiB), 0);
  DeviceAllocator allocator(0, options());
  void* block = allocator.allocate(2 * kMiB, nullptr);
  try {
    allocator.allocate(4096 * kMiB, nullptr);  // more than the device
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const OutOfMemoryError& error) {
    EXPECT_EQ(error.report().free_in_partial_pages_bytes, 2 * kMiB);
    EXPECT_EQ(error.report().free_beside_in_use_bytes, 0u);
    const std::string message = error.what();
    EXPECT_NE(message.find("2.00 MiB of the free memory lies in pages that also hold allocated "
                           "memory, so it can be neither unmapped nor moved to where the request "
                           "needs it. "),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("granules"), std::string::npos) << message;
  }
  allocator.deallocate(block);
}

// max_page_size_mb: free whole granules of a 4 MiB page that also holds a live block cannot
// move, and the out-of-memory message says that pages of one granule would have freed them;
// with max_page_size_mb:2 the same program fits, the freed granule moved to the request. The
// page was made with room, which cut_pages:True leaves whole: the program runs out of memory
// with it too, and the message then suggests only max_page_size_mb:2.
TEST_F(CudacachePolicy, OutOfMemorySuggestsPagesOfOneGranuleWhereLargerPagesHoldFreeGranules) {
  for (const char* config : {"", "cut_pages:True", "max_page_size_mb:2"}) {
    SCOPED_TRACE(config);
    const bool granules = std::string(config) == "max_page_size_mb:2";
    const bool cuts = std::string(config) == "cut_pages:True";
    ASSERT_EQ(cudasim_set_capacity(0, 2048 * kMiB), 0);  // room: pages of 4 MiB by default
    DeviceAllocator allocator(0, Options(config));
    void* a = allocator.allocate(3 * kMiB, nullptr);  // [0, 3) in the page [0, 4)
    void* b = allocator.allocate(4 * kMiB, nullptr);  // [3, 7): ends the page, starts the next
    allocator.deallocate(a);                          // [0, 2) free and whole; [2, 3) beside b
    void* c = nullptr;
    try {
      c = allocator.allocate(2042 * kMiB, nullptr);  // the device has 2040 MiB left
      EXPECT_TRUE(granules) << "expected an out-of-memory error";
    } catch (const OutOfMemoryError& error) {
      EXPECT_FALSE(granules) << error.what();
      EXPECT_EQ(error.report().free_in_partial_pages_bytes, 4 * kMiB);
      EXPECT_EQ(error.report().free_beside_in_use_bytes, 2 * kMiB);
      const std::string message = error.what();
      EXPECT_NE(message.find("2.00 MiB of the free memory lies in whole 2 MiB granules of larger "
                             "pages, which cannot move alone:"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("with CUDACACHE_CONF=max_page_size_mb:2 every page is one granule"),
                std::string::npos)
          << message;
      // The pages here were made with room, which cut_pages leaves whole: it is suggested only
      // where it is not set.
      EXPECT_EQ(message.find("with CUDACACHE_CONF=cut_pages:True a page that a block ends inside "
                             "is cut once the device has no room") == std::string::npos,
                cuts)
          << message;
    }
    if (c != nullptr) allocator.deallocate(c);
    allocator.deallocate(b);
  }
}

// Note [Blocks under a granule]: a block of more than 1 MiB but under 2 MiB comes from the small
// pool, so it shares no page with a large block; PyTorch's policies keep it in the large pool.
TEST_F(CudacachePolicy, ABlockUnderAGranuleSharesNoPageWithLargeBlocks) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  for (const std::string conf : {"policy:cudacache", "policy:pytorch,expandable_segments:True"}) {
    SCOPED_TRACE(conf);
    const bool ours = conf == "policy:cudacache";
    DeviceAllocator allocator(0, Options(conf));
    void* large = allocator.allocate(21 * kMiB, nullptr);
    void* under = allocator.allocate(3 * kMiB / 2, nullptr);
    const MemoryStats stats = allocator.stats();
    const auto under_bytes = static_cast<std::int64_t>(3 * kMiB / 2);
    EXPECT_EQ(stats.allocated_bytes[kSmallPool].current, ours ? under_bytes : 0);
    EXPECT_EQ(stats.allocated_bytes[kLargePool].current,
              static_cast<std::int64_t>(21 * kMiB) + (ours ? 0 : under_bytes));
    // Once the large block is freed, all of its pages can go back to the device.
    allocator.deallocate(large);
    allocator.empty_cache();
    if (ours) {
      EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(2 * kMiB));
    } else {
      EXPECT_GT(reserved(allocator.stats()), static_cast<std::int64_t>(2 * kMiB));
    }
    allocator.deallocate(under);
  }
}

// With room, a growth for a block under a granule maps one page of up to 1/1024 of the device
// (8 MiB here) while what is held stays within 1.08 x the most in use: blocks kept one after
// another share creates instead of paying one each.
TEST_F(CudacachePolicy, WithRoomBlocksUnderAGranuleShareTheirPagesCreates) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  DeviceAllocator allocator(0, options());
  void* large = allocator.allocate(400 * kMiB, nullptr);  // 1.08 x of it leaves room for pages
  const std::int64_t held = reserved(allocator.stats());
  const cudasim_call_counts before = sim_calls();
  std::vector<void*> kept;
  for (int i = 0; i < 8; ++i) kept.push_back(allocator.allocate(1900 * 1024, nullptr));
  EXPECT_EQ(sim_calls().create, before.create + 2);  // 8 MiB each, four blocks to a page
  EXPECT_EQ(reserved(allocator.stats()), held + static_cast<std::int64_t>(16 * kMiB));
  for (void* block : kept) allocator.deallocate(block);
  allocator.deallocate(large);
}

// Past the held limit, such a growth maps a quarter of what the small pool has mapped (2 MiB
// to 1/1024 of the device: 8 MiB here), not 2 MiB each: a program made mostly of such blocks
// pays creates that grow geometrically with them, and holds at most a page more than it uses.
TEST_F(CudacachePolicy, WithRoomPastTheHeldLimitBlocksUnderAGranuleGetPagesThatGrowWithThePool) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  DeviceAllocator allocator(0, options());
  const cudasim_call_counts before = sim_calls();
  std::vector<void*> kept;
  constexpr std::size_t kBlock = 1536 * 1024;
  for (int i = 0; i < 64; ++i) kept.push_back(allocator.allocate(kBlock, nullptr));
  // 2 MiB pages while the pool holds under 12 MiB, then 4 and 6, then 8 MiB ones: 18 creates
  // (45 with 2 MiB pages past the limit, one per granule a block lacks).
  EXPECT_LE(sim_calls().create, before.create + 24);
  EXPECT_LE(reserved(allocator.stats()), static_cast<std::int64_t>(64 * kBlock + 8 * kMiB));
  for (void* block : kept) allocator.deallocate(block);
}

// Without room, such a growth creates the large pool's pages (Note [Pages shrink as the device
// fills]): with 2 GiB of an 8 GiB device left, 8 MiB (1/1024 of the device), not 2 MiB.
TEST_F(CudacachePolicy, WithoutRoomBlocksUnderAGranuleGetTheLargePoolsPages) {
  ASSERT_EQ(cudasim_set_capacity(0, std::size_t{8} << 30), 0);
  DeviceAllocator allocator(0, options());
  void* large = allocator.allocate(std::size_t{6} << 30, nullptr);
  ASSERT_LE(reserved(allocator.stats()),
            static_cast<std::int64_t>((std::size_t{6} << 30) + 20 * kMiB));
  const std::int64_t held = reserved(allocator.stats());
  const cudasim_call_counts before = sim_calls();
  std::vector<void*> kept;
  for (int i = 0; i < 4; ++i) kept.push_back(allocator.allocate(1900 * 1024, nullptr));
  EXPECT_EQ(sim_calls().create, before.create + 1);
  EXPECT_EQ(reserved(allocator.stats()), held + static_cast<std::int64_t>(8 * kMiB));
  for (void* block : kept) allocator.deallocate(block);
  allocator.deallocate(large);
}

// Without room, a block under a granule that the small pool cannot serve takes a hole of the
// large pool that it nearly fills (less than a granule of it left) instead of a new page for the
// small pool; a hole it would leave a granule or more of stays for large blocks, and with room
// the small pool grows as before.
TEST_F(CudacachePolicy, WithoutRoomABlockUnderAGranuleTakesALargeHoleItNearlyFills) {
  const auto run = [&](std::size_t capacity, std::size_t hole_size, bool taken) {
    SCOPED_TRACE(std::to_string(capacity >> 20) + " MiB device, hole of " +
                 std::to_string(hole_size >> 10) + " KiB");
    ASSERT_EQ(cudasim_set_capacity(0, capacity), 0);
    DeviceAllocator allocator(0, options());
    void* before = allocator.allocate(3 * kMiB, nullptr);
    void* hole = allocator.allocate(hole_size, nullptr);
    void* after = allocator.allocate(3 * kMiB, nullptr);
    void* filler = allocator.allocate(40 * kMiB, nullptr);  // on 64 MiB, no room is left
    allocator.deallocate(hole);
    const cudasim_call_counts calls = sim_calls();
    void* under = allocator.allocate(3 * kMiB / 2, nullptr);
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(under == hole, taken);
    EXPECT_EQ(stats.allocated_bytes[kSmallPool].current,
              taken ? 0 : static_cast<std::int64_t>(3 * kMiB / 2));
    if (taken) {
      EXPECT_EQ(sim_calls().create, calls.create);
    }
    for (void* block : {before, after, filler, under}) allocator.deallocate(block);
    allocator.empty_cache();
    EXPECT_EQ(reserved(allocator.stats()), 0);
  };
  run(64 * kMiB, 3 * kMiB, true);              // 1.5 MiB left over
  run(64 * kMiB, 4 * kMiB, false);             // 2.5 MiB left over: a granule or more
  run(std::size_t{1} << 30, 3 * kMiB, false);  // room
}

// Note [The other pool's holes]: at the end of the out-of-memory ladder, with the device full and
// no whole free page to move, a request takes a free block of the other pool on its stream
// rather than run out of memory: a small request a large-pool hole, a large request a
// small-pool one. memory_stats() counts the block in the pool whose range holds it, and it goes
// back there when freed.
class OtherPoolsHoles : public CudacachePolicy {
 protected:
  static constexpr std::size_t kKiB = 1024;
  // A device of 64 MiB with no room: a first block of 40 MiB takes a page of its own.
  void SetUp() override {
    CudacachePolicy::SetUp();
    ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
    allocator_.emplace(0, options());
    kept_.push_back(allocator_->allocate(40 * kMiB, nullptr));
  }
  void TearDown() override {
    for (void* block : kept_) allocator_->deallocate(block);
    allocator_->empty_cache();
    EXPECT_EQ(reserved(allocator_->stats()), 0);
    allocator_.reset();
    CudacachePolicy::TearDown();
  }
  void* keep(std::size_t size) {
    kept_.push_back(allocator_->allocate(size, nullptr));
    return kept_.back();
  }
  void free_kept(void* block) {
    kept_.erase(std::find(kept_.begin(), kept_.end(), block));
    allocator_->deallocate(block);
  }
  // The device left exactly as full as what the allocator has mapped.
  void fill_device() {
    ASSERT_EQ(cudasim_set_capacity(0, static_cast<std::size_t>(reserved(allocator_->stats()))), 0);
  }
  std::optional<DeviceAllocator> allocator_;
  std::vector<void*> kept_;
};

TEST_F(OtherPoolsHoles, ASmallRequestTakesALargePoolHole) {
  for (int i = 0; i < 4; ++i) keep(512 * kKiB);  // the small pool's one page, full
  keep(3 * kMiB);
  void* hole = keep(5 * kMiB / 2);  // in two pages it shares with the blocks around it
  keep(3 * kMiB);
  fill_device();
  free_kept(hole);
  const MemoryStats before = allocator_->stats();
  void* small = allocator_->allocate(256 * kKiB, nullptr);
  const MemoryStats stats = allocator_->stats();
  EXPECT_EQ(stats.num_ooms, 0);
  EXPECT_EQ(reserved(stats), reserved(before));  // no page created: the device is full
  EXPECT_EQ(stats.allocated_bytes[kSmallPool].current, before.allocated_bytes[kSmallPool].current);
  EXPECT_EQ(stats.allocated_bytes[kLargePool].current,
            before.allocated_bytes[kLargePool].current + static_cast<std::int64_t>(256 * kKiB));
  EXPECT_EQ(cudaMemset(small, 1, 256 * kKiB), cudaSuccess);
  allocator_->deallocate(small);
  // Back in the large pool, where the hole is whole again.
  EXPECT_EQ(allocator_->allocate(5 * kMiB / 2, nullptr), hole);
  EXPECT_EQ(allocator_->stats().num_ooms, 0);
  kept_.push_back(hole);
  // A small-pool request larger than every free block (1.5 MiB at the end of the large pool's
  // last page) still runs out of memory.
  EXPECT_THROW(allocator_->allocate(2 * kMiB - 512, nullptr), OutOfMemoryError);
}

TEST_F(OtherPoolsHoles, ALargeRequestTakesASmallPoolHole) {
  // In the small pool's range (blocks under a granule are the small pool's): 1 MiB, then two
  // blocks of 1.45 MiB that, freed, leave 2.9 MiB free over two pages shared with the blocks
  // around them, then 100 KiB.
  keep(1 * kMiB);
  void* first = keep(1485 * kKiB);
  void* second = keep(1485 * kKiB);
  keep(100 * kKiB);
  fill_device();
  free_kept(first);
  free_kept(second);
  const MemoryStats before = allocator_->stats();
  void* large = allocator_->allocate(5 * kMiB / 2, nullptr);
  const MemoryStats stats = allocator_->stats();
  EXPECT_EQ(large, first);
  EXPECT_EQ(stats.num_ooms, 0);
  EXPECT_EQ(reserved(stats), reserved(before));
  EXPECT_EQ(stats.allocated_bytes[kLargePool].current, before.allocated_bytes[kLargePool].current);
  EXPECT_EQ(stats.allocated_bytes[kSmallPool].current,
            before.allocated_bytes[kSmallPool].current + static_cast<std::int64_t>(5 * kMiB / 2));
  EXPECT_EQ(cudaMemset(large, 1, 5 * kMiB / 2), cudaSuccess);
  allocator_->deallocate(large);
  EXPECT_EQ(allocator_->stats().allocated_bytes[kSmallPool].current,
            before.allocated_bytes[kSmallPool].current);
  // A large request larger than every free block still runs out of memory.
  EXPECT_THROW(allocator_->allocate(3 * kMiB, nullptr), OutOfMemoryError);
}

// PyTorch's policies keep the pools apart to the end, as PyTorch does: the same full device runs
// out of memory for a small request while the large pool's page has free memory.
TEST_F(CudacachePolicy, PyTorchsExpandableSegmentsKeepThePoolsApartToTheEnd) {
  ASSERT_EQ(cudasim_set_capacity(0, 64 * kMiB), 0);
  DeviceAllocator allocator(0, Options("expandable_segments:True"));
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(allocator.allocate(512 * 1024, nullptr));
  blocks.push_back(allocator.allocate(3 * kMiB, nullptr));  // a 20 MiB page, 17 MiB of it free
  ASSERT_EQ(cudasim_set_capacity(0, static_cast<std::size_t>(reserved(allocator.stats()))), 0);
  EXPECT_GE(allocator.stats().reserved_bytes[kLargePool].current -
                allocator.stats().allocated_bytes[kLargePool].current,
            static_cast<std::int64_t>(16 * kMiB));
  EXPECT_THROW(allocator.allocate(256 * 1024, nullptr), OutOfMemoryError);
  for (void* block : blocks) allocator.deallocate(block);
}

TEST_F(CudacachePolicy, WithoutVmmItIsPyTorchsNativePolicy) {
  ASSERT_EQ(cudasim_set_vmm_supported(0, 0), 0);
  DeviceAllocator allocator(0, options());
  EXPECT_FALSE(allocator.expandable());
  void* p = allocator.allocate(3 * kMiB, nullptr);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(20 * kMiB));
  allocator.deallocate(p);
  cudasim_set_vmm_supported(0, 1);
}

}  // namespace
}  // namespace cudacache
