#include "device_stats.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>

namespace cudacache {
namespace {

using testing::pytorch_native;

using testing::allocated;
using testing::reserved;

constexpr std::size_t kMiB = std::size_t{1} << 20;

TEST(DeviceStats, IncreaseDecreaseTrackPeakAndTotals) {
  StatArray array{};
  DeviceStats::increase(array, PoolKind::kSmall, 10);
  DeviceStats::increase(array, PoolKind::kLarge, 5);
  DeviceStats::decrease(array, PoolKind::kSmall, 7);
  EXPECT_EQ(array[kAllPools].current, 8);
  EXPECT_EQ(array[kAllPools].peak, 15);
  EXPECT_EQ(array[kAllPools].allocated, 15);
  EXPECT_EQ(array[kAllPools].freed, 7);
  EXPECT_EQ(array[kSmallPool].current, 3);
  EXPECT_EQ(array[kSmallPool].peak, 10);
  EXPECT_EQ(array[kLargePool].current, 5);
}

TEST(DeviceStats, JsonHasEveryPyTorchKeyOnce) {
  MemoryStats stats;
  stats.allocated_bytes[kAllPools].current = 1234;
  stats.num_ooms = 3;
  stats.max_split_size = -1;
  const std::string json = DeviceStats::to_json(stats);
  std::set<std::string> keys;
  const std::regex key_pattern("\"([a-z_.]+)\":(-?[0-9]+)");
  for (auto it = std::sregex_iterator(json.begin(), json.end(), key_pattern);
       it != std::sregex_iterator(); ++it) {
    EXPECT_TRUE(keys.insert((*it)[1]).second) << "duplicate " << (*it)[1];
  }
  std::set<std::string> expected;
  for (const char* name :
       {"allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
        "active_bytes", "inactive_split_bytes", "requested_bytes"}) {
    for (const char* pool : {"all", "small_pool", "large_pool"}) {
      for (const char* field : {"current", "peak", "allocated", "freed"}) {
        expected.insert(std::string(name) + "." + pool + "." + field);
      }
    }
  }
  for (const char* name : {"oversize_allocations", "oversize_segments"}) {
    for (const char* field : {"current", "peak", "allocated", "freed"}) {
      expected.insert(std::string(name) + "." + field);
    }
  }
  for (const char* name : {"num_alloc_retries", "num_ooms", "num_sync_all_streams",
                           "num_device_alloc", "num_device_free", "max_split_size"}) {
    expected.insert(name);
  }
  EXPECT_EQ(keys, expected);
  EXPECT_NE(json.find("\"allocated_bytes.all.current\":1234"), std::string::npos);
  EXPECT_NE(json.find("\"num_ooms\":3"), std::string::npos);
  EXPECT_NE(json.find("\"max_split_size\":-1"), std::string::npos);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
}

TEST(DeviceStats, AllocatorCountsLikePyTorch) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native());
  void* small = allocator.allocate(1000, nullptr);
  void* large = allocator.allocate(30 * kMiB + 5, nullptr);
  MemoryStats s = allocator.stats();
  EXPECT_EQ(s.allocation[kAllPools].current, 2);
  EXPECT_EQ(s.allocation[kSmallPool].current, 1);
  EXPECT_EQ(s.allocation[kLargePool].current, 1);
  EXPECT_EQ(s.allocated_bytes[kSmallPool].current, 1024);
  EXPECT_EQ(s.allocated_bytes[kLargePool].current, static_cast<std::int64_t>(30 * kMiB + 512));
  EXPECT_EQ(s.requested_bytes[kAllPools].current, static_cast<std::int64_t>(1000 + 30 * kMiB + 5));
  EXPECT_EQ(s.reserved_bytes[kSmallPool].current, static_cast<std::int64_t>(2 * kMiB));
  EXPECT_EQ(s.reserved_bytes[kLargePool].current, static_cast<std::int64_t>(32 * kMiB));
  EXPECT_EQ(s.segment[kAllPools].current, 2);
  EXPECT_EQ(s.active[kAllPools].current, 2);
  EXPECT_EQ(s.num_device_alloc, 2);
  EXPECT_EQ(s.max_split_size, -1);
  // The large block was split: 32 MiB segment, remainder 2 MiB - 512 B > 1 MiB.
  EXPECT_EQ(s.inactive_split[kLargePool].current, 1);

  allocator.deallocate(large);
  s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes[kLargePool].current, 0);
  EXPECT_EQ(s.allocated_bytes[kLargePool].peak, static_cast<std::int64_t>(30 * kMiB + 512));
  EXPECT_EQ(s.allocated_bytes[kLargePool].freed, static_cast<std::int64_t>(30 * kMiB + 512));
  EXPECT_EQ(s.reserved_bytes[kLargePool].current, static_cast<std::int64_t>(32 * kMiB));
  EXPECT_EQ(s.inactive_split[kLargePool].current, 0);

  allocator.reset_peak_stats();
  s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].peak, s.allocated_bytes[kAllPools].current);
  EXPECT_EQ(s.reserved_bytes[kAllPools].peak, s.reserved_bytes[kAllPools].current);

  allocator.reset_accumulated_stats();
  s = allocator.stats();
  EXPECT_EQ(s.allocated_bytes[kAllPools].allocated, 0);
  EXPECT_EQ(s.allocated_bytes[kAllPools].freed, 0);
  EXPECT_EQ(s.num_device_alloc, 0);
  EXPECT_EQ(allocated(s), 1024);  // current values survive both resets

  allocator.deallocate(small);
  allocator.empty_cache();
  s = allocator.stats();
  EXPECT_EQ(reserved(s), 0);
  EXPECT_EQ(s.num_device_free, 2);
  EXPECT_EQ(s.num_sync_all_streams, 1);
}

TEST(DeviceStats, OversizeCounters) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, pytorch_native("max_split_size_mb:40"));
  void* big = allocator.allocate(50 * kMiB, nullptr);
  void* normal = allocator.allocate(12 * kMiB, nullptr);
  MemoryStats s = allocator.stats();
  EXPECT_EQ(s.max_split_size, static_cast<std::int64_t>(40 * kMiB));
  EXPECT_EQ(s.oversize_allocations.current, 1);
  EXPECT_EQ(s.oversize_segments.current, 1);
  allocator.deallocate(big);
  allocator.deallocate(normal);
  s = allocator.stats();
  EXPECT_EQ(s.oversize_allocations.current, 0);
  EXPECT_EQ(s.oversize_allocations.peak, 1);
  EXPECT_EQ(s.oversize_segments.current, 1);  // still cached
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().oversize_segments.current, 0);
}

}  // namespace
}  // namespace cudacache
