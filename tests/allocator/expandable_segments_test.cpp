// Expandable (VMM) segments: PyTorch's layout and call pattern, the out-of-memory ladder, the
// fallback without VMM, and failures of the driver. The behaviours every configuration shares
// are in conformance_test.cpp.
#include "test_support.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudacache {
namespace {

using testing::reserved;
using testing::ScopedStream;
using testing::sim_calls;
using testing::sim_counters;

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::vector<HistoryEntry> entries_of(const DeviceAllocator& allocator, HistoryAction action) {
  std::vector<HistoryEntry> found;
  for (const HistoryEntry& entry : allocator.history()) {
    if (entry.action == action) found.push_back(entry);
  }
  return found;
}

class ExpandableSegments : public testing::SimulatedDeviceTest {
 protected:
  static Options options() { return Options("expandable_segments:True,record_history:1000"); }
};

TEST_F(ExpandableSegments, GrowsAtTheEndOfOneRangeInWholePages) {
  DeviceAllocator allocator(0, options());
  ASSERT_TRUE(allocator.expandable());
  void* first = allocator.allocate(3 * kMiB, nullptr);    // maps one 20 MiB page
  void* second = allocator.allocate(18 * kMiB, nullptr);  // 17 MiB free + one more page
  EXPECT_EQ(static_cast<char*>(second), static_cast<char*>(first) + 3 * kMiB);
  const MemoryStats stats = allocator.stats();
  EXPECT_EQ(reserved(stats), static_cast<std::int64_t>(40 * kMiB));
  EXPECT_EQ(stats.num_device_alloc, 2);
  EXPECT_EQ(stats.segment[kAllPools].current, 0);  // PyTorch does not count ranges
  EXPECT_EQ(stats.inactive_split[kAllPools].current, 0);
  const cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.reserve, 1u);
  EXPECT_EQ(counts.create, 2u);
  EXPECT_EQ(counts.map, 2u);
  EXPECT_EQ(counts.set_access, 2u);
  EXPECT_EQ(counts.malloc, 0u);
  EXPECT_EQ(sim_counters().in_use_bytes, 40 * kMiB);

  const MemorySnapshot snapshot = allocator.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  EXPECT_TRUE(snapshot.segments[0].is_expandable);
  EXPECT_EQ(snapshot.segments[0].total_size, 40 * kMiB);
  const auto maps = entries_of(allocator, HistoryAction::kSegmentMap);
  ASSERT_EQ(maps.size(), 2u);
  EXPECT_EQ(maps[0].address, reinterpret_cast<std::uintptr_t>(first));
  EXPECT_EQ(maps[0].size, 20 * kMiB);
  EXPECT_EQ(maps[1].address, reinterpret_cast<std::uintptr_t>(first) + 20 * kMiB);
  allocator.deallocate(second);
  allocator.deallocate(first);
}

TEST_F(ExpandableSegments, SmallPoolMapsTwoMiBPagesInItsOwnRange) {
  DeviceAllocator allocator(0, options());
  void* small = allocator.allocate(4096, nullptr);
  void* large = allocator.allocate(3 * kMiB, nullptr);
  const MemoryStats stats = allocator.stats();
  EXPECT_EQ(stats.reserved_bytes[kSmallPool].current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(stats.reserved_bytes[kLargePool].current, static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(sim_calls().reserve, 2u);
  EXPECT_EQ(allocator.snapshot().segments.size(), 2u);
  allocator.deallocate(small);
  allocator.deallocate(large);
}

TEST_F(ExpandableSegments, FreeNeverUnmapsAndASteadyLoopMakesNoDeviceCall) {
  DeviceAllocator allocator(0, options());
  allocator.deallocate(allocator.allocate(50 * kMiB, nullptr));  // warm-up
  const cudasim_call_counts before = sim_calls();
  for (int step = 0; step < 100; ++step) {
    void* a = allocator.allocate(30 * kMiB, nullptr);
    void* b = allocator.allocate(20 * kMiB, nullptr);
    allocator.deallocate(a);
    allocator.deallocate(b);
  }
  const cudasim_call_counts after = sim_calls();
  EXPECT_EQ(after.create, before.create);
  EXPECT_EQ(after.map, before.map);
  EXPECT_EQ(after.unmap, 0u);
  EXPECT_EQ(after.synchronize, 0u);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(60 * kMiB));
}

TEST_F(ExpandableSegments, EmptyCacheUnmapsOnlyWholeFreePagesAfterASynchronize) {
  DeviceAllocator allocator(0, options());
  void* kept = allocator.allocate(3 * kMiB, nullptr);
  void* freed = allocator.allocate(50 * kMiB, nullptr);  // [3, 53) MiB: pages 0, 1, 2
  allocator.deallocate(freed);
  allocator.empty_cache();
  // Page 0 holds the live block; pages 1 and 2 ([20, 60) MiB) were wholly free.
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(sim_counters().in_use_bytes, 20 * kMiB);
  cudasim_call_counts counts = sim_calls();
  EXPECT_EQ(counts.synchronize, 1u);
  EXPECT_EQ(counts.unmap, 2u);
  EXPECT_EQ(counts.release, 2u);
  EXPECT_EQ(counts.address_free, 0u);  // the range still holds a page
  const auto unmaps = entries_of(allocator, HistoryAction::kSegmentUnmap);
  ASSERT_EQ(unmaps.size(), 1u);
  EXPECT_EQ(unmaps[0].address, reinterpret_cast<std::uintptr_t>(kept) + 20 * kMiB);
  EXPECT_EQ(unmaps[0].size, 40 * kMiB);
  EXPECT_EQ(allocator.stats().num_device_free, 1);

  void* again = allocator.allocate(30 * kMiB, nullptr);  // maps into the same range again
  EXPECT_EQ(static_cast<char*>(again), static_cast<char*>(kept) + 3 * kMiB);
  allocator.deallocate(again);
  allocator.deallocate(kept);
  allocator.empty_cache();
  EXPECT_EQ(reserved(allocator.stats()), 0);
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
  counts = sim_calls();
  EXPECT_EQ(counts.address_free, 1u);  // nothing mapped any more: the range is returned
  EXPECT_EQ(counts.create, counts.release);
}

TEST_F(ExpandableSegments, DeviceFullUnmapsAnotherStreamsPagesAndRetries) {
  ASSERT_EQ(cudasim_set_capacity(0, 100 * kMiB), 0);
  const ScopedStream other;
  {
    DeviceAllocator allocator(0, options());
    allocator.deallocate(allocator.allocate(80 * kMiB, other));  // 4 pages stay mapped
    void* p = allocator.allocate(80 * kMiB, nullptr);            // needs them back
    const MemoryStats stats = allocator.stats();
    EXPECT_EQ(stats.num_alloc_retries, 1);
    EXPECT_EQ(stats.num_ooms, 0);
    EXPECT_EQ(reserved(stats), static_cast<std::int64_t>(80 * kMiB));
    // The failed attempt created pages and gave them back: nothing leaked.
    EXPECT_EQ(sim_counters().in_use_bytes, 80 * kMiB);
    allocator.deallocate(p);
  }
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

TEST_F(ExpandableSegments, OutOfMemoryLeavesNoPageBehind) {
  ASSERT_EQ(cudasim_set_capacity(0, 50 * kMiB), 0);
  DeviceAllocator allocator(0, options());
  void* p = allocator.allocate(30 * kMiB, nullptr);  // two pages
  EXPECT_THROW(allocator.allocate(30 * kMiB, nullptr), OutOfMemoryError);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(40 * kMiB));
  EXPECT_EQ(sim_counters().in_use_bytes, 40 * kMiB);
  EXPECT_EQ(allocator.stats().num_ooms, 1);
  allocator.deallocate(p);
}

TEST_F(ExpandableSegments, FallsBackToCudaMallocSegmentsWithoutVmm) {
  ASSERT_EQ(cudasim_set_vmm_supported(0, 0), 0);
  DeviceAllocator allocator(0, options());
  EXPECT_FALSE(allocator.expandable());
  void* p = allocator.allocate(3 * kMiB, nullptr);
  EXPECT_EQ(reserved(allocator.stats()), static_cast<std::int64_t>(20 * kMiB));
  EXPECT_EQ(sim_calls().malloc, 1u);
  EXPECT_EQ(sim_calls().create, 0u);
  EXPECT_FALSE(allocator.snapshot().segments.at(0).is_expandable);
  allocator.deallocate(p);
}

// Fails the nth map call (1 = the next) with a driver error that is not "device full".
class FailingMapBackend final : public ForwardingSegmentBackend {
 public:
  FailingMapBackend(std::unique_ptr<SegmentBackend> inner, int nth)
      : ForwardingSegmentBackend(std::move(inner)), countdown_(nth) {}
  cudaError_t map(std::uintptr_t address, std::size_t bytes, PageHandle handle) override {
    if (--countdown_ == 0) return cudaErrorUnknown;
    return ForwardingSegmentBackend::map(address, bytes, handle);
  }

 private:
  int countdown_;
};

TEST_F(ExpandableSegments, ADriverErrorWhileMappingIsAnErrorThatLosesNothing) {
  auto backend = std::make_unique<FailingMapBackend>(make_segment_backend(0, true), 3);
  DeviceAllocator allocator(0, options(), nullptr, std::move(backend));
  void* kept = allocator.allocate(3 * kMiB, nullptr);  // map 1
  try {
    allocator.allocate(70 * kMiB, nullptr);  // map 2 succeeds, map 3 fails
    FAIL() << "the injected failure was not reported";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_CUDA_ERROR);
    EXPECT_NE(std::string(error.what()).find("mapping pages"), std::string::npos) << error.what();
  }
  // The pages of the failed call were unmapped and released; accounting matches the device.
  EXPECT_EQ(static_cast<std::uint64_t>(reserved(allocator.stats())), sim_counters().in_use_bytes);
  void* after = allocator.allocate(70 * kMiB, nullptr);  // the allocator still works
  allocator.deallocate(after);
  allocator.deallocate(kept);
  allocator.empty_cache();
  EXPECT_EQ(sim_counters().in_use_bytes, 0u);
}

// Found by the suite-wide fault sweep (tests/fault_sweep): teardown stopped at the first failed
// unmap, so the driver kept every page after it too.
TEST_F(ExpandableSegments, TeardownGivesBackEveryPageAFailedCallDidNotKeep) {
  // Three 20 MiB pages, then the allocator is destroyed with the nth `kind` call of its
  // teardown failing (n = 0: none), for every n that teardown makes.
  const auto teardown = [](const char* kind, int n) {
    const std::uint64_t before = sim_counters().in_use_bytes;
    std::uint64_t calls = 0;
    {
      DeviceAllocator allocator(0, options());
      allocator.deallocate(allocator.allocate(50 * kMiB, nullptr));
      EXPECT_EQ(sim_counters().in_use_bytes - before, 60 * kMiB);
      calls = sim_calls().synchronize + sim_calls().unmap;
      EXPECT_EQ(cudasim_fail_nth_call(0, kind, n), 0);
    }
    EXPECT_EQ(cudasim_fail_nth_call(0, kind, 0), 0);
    calls = sim_calls().synchronize + sim_calls().unmap - calls;
    return std::pair{sim_counters().in_use_bytes - before, calls};
  };
  const auto [clean_kept, clean_calls] = teardown("synchronize", 0);
  EXPECT_EQ(clean_kept, 0u);
  EXPECT_GE(clean_calls, 4u);  // a synchronize, then one unmap per page
  for (const char* kind : {"synchronize", "unmap"}) {
    for (int n = 1; n <= static_cast<int>(clean_calls); ++n) {
      SCOPED_TRACE(std::string(kind) + " call " + std::to_string(n) + " of teardown fails");
      // A failed unmap keeps its one page (the driver still has it mapped), never the others.
      // A failed synchronize keeps nothing: one failure never stops teardown, since a failed
      // stream synchronize falls back to synchronizing the device.
      const std::uint64_t expected = std::string(kind) == "unmap" && n <= 3 ? 20 * kMiB : 0;
      const std::uint64_t kept = teardown(kind, n).first;
      EXPECT_EQ(kept, expected);
      // The next round gets the same free memory.
      ASSERT_EQ(cudasim_set_capacity(0, cudasim_get_capacity(0) + kept), 0);
    }
  }
}

// A release that fails while empty_cache unmaps a free block loses its one page (the driver
// keeps it) and no other: the pages after it are still unmapped and released, so nothing stays
// reserved. Found by the suite-wide fault sweep (Concurrency.ThreadsShareTheCApi, whose final
// empty_cache then left a page mapped).
TEST_F(ExpandableSegments, AFailedReleaseLosesOnlyItsPage) {
  const std::uint64_t before = sim_counters().in_use_bytes;
  {
    DeviceAllocator allocator(0, options());
    allocator.deallocate(allocator.allocate(50 * kMiB, nullptr));  // three 20 MiB pages, free
    ASSERT_EQ(cudasim_fail_nth_call(0, "release", 1), 0);
    const cudasim_call_counts calls = sim_calls();
    allocator.empty_cache();
    EXPECT_EQ(sim_calls().unmap, calls.unmap + 3);
    EXPECT_EQ(sim_calls().release, calls.release + 3);
    EXPECT_EQ(reserved(allocator.stats()), 0);
    EXPECT_EQ(sim_counters().in_use_bytes - before, 20 * kMiB);  // the page the driver kept
  }
  ASSERT_EQ(cudasim_fail_nth_call(0, "release", 0), 0);
  EXPECT_EQ(sim_counters().in_use_bytes - before, 20 * kMiB);
}

// A backend whose granularity is not a power of two (no driver reports one): the range's page
// index refuses it, so reserving the range fails with an error that says why, and the address
// range it had reserved goes back.
class OddGranularityBackend final : public ForwardingSegmentBackend {
 public:
  explicit OddGranularityBackend(std::unique_ptr<SegmentBackend> inner)
      : ForwardingSegmentBackend(std::move(inner)) {}
  std::size_t page_granularity() const override { return 3 * kMiB; }
};

TEST_F(ExpandableSegments, AGranularityThatIsNotAPowerOfTwoIsRefusedAndTheRangeGoesBack) {
  OddGranularityBackend backend(make_segment_backend(0, true));
  const cudasim_call_counts before = sim_calls();
  cudaError_t error = cudaSuccess;
  try {
    ExpandableSegment::reserve(backend, 6 * kMiB, 4, nullptr, &error);
    FAIL() << "the granularity was accepted";
  } catch (const std::invalid_argument& refused) {
    EXPECT_NE(std::string(refused.what()).find("not a power of two"), std::string::npos)
        << refused.what();
  }
  const cudasim_call_counts after = sim_calls();
  EXPECT_EQ(after.reserve, before.reserve + 1);
  EXPECT_EQ(after.address_free, before.address_free + 1);  // the addresses went back
}

// page_across: the page strictly around a point, one lookup. A point on a page's first byte
// belongs to no page "across" it; a point in an unmapped stretch or before every page finds none.
// A range of 16 pages of 2 MiB on device 0, for the page-level tests below; `map` maps pages
// created by the test and releases them if that fails (they stay the caller's then).
struct PageRange {
  std::unique_ptr<SegmentBackend> backend = make_segment_backend(0, true);
  std::unique_ptr<ExpandableSegment> segment;  // destroyed before the backend it uses
  PageRange() {
    cudaError_t error = cudaSuccess;
    segment = ExpandableSegment::reserve(*backend, 2 * kMiB, 16, nullptr, &error);
  }
  cudaError_t map(std::size_t offset, const std::vector<Page>& pages) {
    AddressRange mapped{};
    const cudaError_t error = segment->map_pages(segment->base() + offset, pages, &mapped);
    if (error != cudaSuccess) release_pages(*backend, pages);
    return error;
  }
};

TEST_F(ExpandableSegments, PageAcrossFindsOnlyThePageAroundAPoint) {
  PageRange range;
  ASSERT_NE(range.segment, nullptr);
  ExpandableSegment* const segment = range.segment.get();
  const std::uintptr_t base = segment->base();
  EXPECT_FALSE(segment->page_across(base + kMiB).has_value());  // nothing mapped yet
  std::vector<Page> pages;
  ASSERT_EQ(create_pages(*range.backend, 6 * kMiB, 6 * kMiB, &pages), cudaSuccess);
  ASSERT_EQ(range.map(4 * kMiB, pages), cudaSuccess);               // [4, 10)
  EXPECT_FALSE(segment->page_across(base + 2 * kMiB).has_value());  // before every page
  EXPECT_FALSE(segment->page_across(base + 4 * kMiB).has_value());  // its first byte
  const auto inside = segment->page_across(base + 7 * kMiB);
  ASSERT_TRUE(inside.has_value());
  EXPECT_EQ(inside->first, base + 4 * kMiB);
  EXPECT_EQ(inside->second.size, 6 * kMiB);
  EXPECT_FALSE(segment->page_across(base + 10 * kMiB).has_value());  // just past its end
  EXPECT_FALSE(segment->page_across(base + 12 * kMiB).has_value());  // an unmapped stretch
}

// create_pages appends to the caller's list (a growth collects moved and new pages in one
// reused vector); a failure releases and removes only the pages this call created.
TEST_F(ExpandableSegments, CreatingPagesAppendsAndAFailureTakesBackOnlyItsOwn) {
  PageRange range;
  ASSERT_NE(range.segment, nullptr);
  const std::uint64_t before = sim_counters().in_use_bytes;
  struct Created {  // released however the test ends (the fault sweep fails calls it did not)
    SegmentBackend& backend;
    std::vector<Page> pages;
    ~Created() { release_pages(backend, pages); }
  } created{*range.backend, {}};
  std::vector<Page>& pages = created.pages;
  ASSERT_EQ(create_pages(*range.backend, 4 * kMiB, 2 * kMiB, &pages), cudaSuccess);
  ASSERT_EQ(pages.size(), 2u);
  const std::vector<Page> first = pages;
  ASSERT_EQ(create_pages(*range.backend, 6 * kMiB, 2 * kMiB, &pages), cudaSuccess);
  ASSERT_EQ(pages.size(), 5u);  // appended after the first two, which are unchanged
  EXPECT_EQ(pages[0].handle, first[0].handle);
  EXPECT_EQ(pages[1].handle, first[1].handle);
  EXPECT_EQ(sim_counters().in_use_bytes - before, 10 * kMiB);
  // The second page of the next call fails: the first it made goes back, the five stay.
  ASSERT_EQ(cudasim_fail_nth_call(0, "create", 2), 0);
  EXPECT_NE(create_pages(*range.backend, 6 * kMiB, 2 * kMiB, &pages), cudaSuccess);
  ASSERT_EQ(cudasim_fail_nth_call(0, "create", 0), 0);
  EXPECT_EQ(pages.size(), 5u);
  EXPECT_EQ(sim_counters().in_use_bytes - before, 10 * kMiB);
  release_pages(*range.backend, pages);
  pages.clear();
  EXPECT_EQ(sim_counters().in_use_bytes, before);
}

// has_exclusive_pages() lets the allocation path skip page_across() while no page of one
// block is mapped: it follows every map and unmap.
TEST_F(ExpandableSegments, KnowsWhetherAPageOfOneBlockIsMapped) {
  PageRange range;
  ASSERT_NE(range.segment, nullptr);
  ExpandableSegment* const segment = range.segment.get();
  const std::uintptr_t base = segment->base();
  std::vector<Page> pages;
  ASSERT_EQ(create_pages(*range.backend, 8 * kMiB, 4 * kMiB, &pages), cudaSuccess);
  pages[1].exclusive = true;  // [0, 4) shared, [4, 8) of one block
  ASSERT_EQ(range.map(0, pages), cudaSuccess);
  EXPECT_TRUE(segment->has_exclusive_pages());
  AddressRange unmapped{};
  ASSERT_EQ(segment->unmap(base, 4 * kMiB, &unmapped), cudaSuccess);  // the shared one
  EXPECT_TRUE(segment->has_exclusive_pages());
  ASSERT_EQ(segment->unmap(base + 4 * kMiB, 4 * kMiB, &unmapped), cudaSuccess);
  EXPECT_EQ(unmapped.size, 4 * kMiB);
  EXPECT_FALSE(segment->has_exclusive_pages());
}

TEST_F(ExpandableSegments, BackendOfAnotherDeviceIsRejected) {
  try {
    DeviceAllocator allocator(0, options(), nullptr, std::make_unique<MallocSegmentBackend>(1));
    FAIL() << "accepted a backend of device 1";
  } catch (const Error& error) {
    EXPECT_EQ(error.status(), CUDACACHE_INVALID_ARGUMENT);
  }
}

}  // namespace
}  // namespace cudacache
