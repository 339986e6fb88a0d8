// Helpers shared by the allocator tests: cudasim access and the accounting invariants. The
// skip without cudasim and the stream guards are in tests/common, for the other tests too.
#pragma once

#include "device_allocator.h"
#include "require_cudasim.h"
#include "sim_streams.h"

#include <cudasim.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

// A call site that a test's expected frames name: one frame of its own, never inlined, cloned
// or folded with a look-alike (GCC's constant-propagation clones are local symbols, which
// dladdr cannot name).
#if defined(__clang__)
#define CUDACACHE_TEST_SITE __attribute__((noinline))
#else
#define CUDACACHE_TEST_SITE __attribute__((noipa))
#endif

namespace cudacache::testing {

// A test that may change cudasim's device 0: skipped without cudasim, its counters reset
// first, its capacity and VMM support restored after.
class SimulatedDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CUDACACHE_REQUIRE_CUDASIM();
    capacity_ = cudasim_get_capacity(0);
    ASSERT_EQ(cudasim_reset_counters(0), 0);
  }
  void TearDown() override {
    if (!cudasim_available()) return;
    cudasim_set_capacity(0, capacity_);
    cudasim_set_vmm_supported(0, 1);
  }

 private:
  std::size_t capacity_ = 0;
};

// PyTorch's native policy, for the tests of its semantics segment by segment (cudacache's
// default is its own policy), with `extra` options ("key:value,...") on top.
inline Options pytorch_native(const std::string& extra = {}) {
  return Options(extra.empty() ? std::string("policy:pytorch") : "policy:pytorch," + extra);
}

inline cudasim_counters sim_counters(int device = 0) {
  cudasim_counters counters{};
  EXPECT_EQ(cudasim_get_counters(device, &counters), 0);
  return counters;
}

// Device calls by kind since the last cudasim_reset_counters.
inline cudasim_call_counts sim_calls(int device = 0) {
  cudasim_call_counts counts{};
  EXPECT_EQ(cudasim_get_call_counts(device, &counts), 0);
  return counts;
}

inline std::int64_t allocated(const MemoryStats& s) { return s.allocated_bytes[kAllPools].current; }
inline std::int64_t reserved(const MemoryStats& s) { return s.reserved_bytes[kAllPools].current; }

// Checks, from a snapshot and the stats:
// - segments do not overlap; the blocks of each tile it exactly, in address order;
// - allocated_bytes = sum of allocated blocks; reserved_bytes = sum of segments;
// - every pointer in `live` (pointer -> rounded request size) is an allocated block at least
//   that large (a block is not split when the remainder would be too small to be useful);
// - active and requested bytes agree with the blocks.
inline void expect_invariants(const DeviceAllocator& allocator,
                              const std::map<std::uintptr_t, std::size_t>& live) {
  const MemorySnapshot snapshot = allocator.snapshot();
  const MemoryStats stats = allocator.stats();
  std::uintptr_t previous_end = 0;
  std::size_t reserved_sum = 0;
  std::size_t allocated_sum = 0;
  std::size_t active_sum = 0;
  std::size_t requested_sum = 0;
  std::size_t allocated_blocks = 0;
  for (const SegmentSnapshot& segment : snapshot.segments) {
    ASSERT_GE(segment.address, previous_end) << "segments overlap";
    previous_end = segment.address + segment.total_size;
    reserved_sum += segment.total_size;
    std::uintptr_t cursor = segment.address;
    for (const BlockSnapshot& block : segment.blocks) {
      ASSERT_EQ(block.address, cursor) << "blocks do not tile their segment";
      ASSERT_GT(block.size, 0u);
      cursor += block.size;
      const std::string state = block.state;
      if (state == "active_allocated") {
        allocated_sum += block.size;
        ++allocated_blocks;
        const auto it = live.find(block.address);
        ASSERT_NE(it, live.end()) << "allocated block that the test does not hold";
        EXPECT_GE(block.size, it->second);
        EXPECT_LT(block.size - it->second, kLargeBuffer);
      }
      if (state != "inactive") {
        active_sum += block.size;
        requested_sum += block.requested_size;
      }
    }
    ASSERT_EQ(cursor, segment.address + segment.total_size) << "blocks do not cover segment";
  }
  EXPECT_EQ(allocated_blocks, live.size());
  EXPECT_EQ(static_cast<std::size_t>(allocated(stats)), allocated_sum);
  EXPECT_EQ(static_cast<std::size_t>(reserved(stats)), reserved_sum);
  EXPECT_EQ(static_cast<std::size_t>(stats.active_bytes[kAllPools].current), active_sum);
  EXPECT_EQ(static_cast<std::size_t>(stats.requested_bytes[kAllPools].current), requested_sum);
  if (!allocator.expandable()) {  // expandable ranges are not counted as segments (PyTorch)
    EXPECT_EQ(static_cast<std::size_t>(stats.segment[kAllPools].current), snapshot.segments.size());
  }
  EXPECT_EQ(stats.allocation[kAllPools].current, static_cast<std::int64_t>(live.size()));
  for (const auto& array : {stats.allocated_bytes, stats.reserved_bytes, stats.active_bytes}) {
    EXPECT_EQ(array[kAllPools].current, array[kSmallPool].current + array[kLargePool].current);
  }
}

}  // namespace cudacache::testing
