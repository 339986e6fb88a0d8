// BlockPool, split and merge on hand-built blocks (no device), then the same rules observed
// through DeviceAllocator on cudasim.
#include "block_pool.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace cudacache {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

struct Fixture {
  Segment segment;
  std::vector<Block*> owned;
  Block* make(std::uintptr_t address, std::size_t size, cudaStream_t stream) {
    auto* block = new Block;
    block->address = address;
    block->size = size;
    block->stream = stream;
    block->segment = &segment;
    owned.push_back(block);
    return block;
  }
  ~Fixture() {
    for (Block* block : owned) delete block;
  }
};

TEST(BlockPool, BestFitIsSmallestLargeEnoughOnTheStreamLowestAddressFirst) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  pool.insert(f.make(0x3000000, 8 * kMiB, fake_stream(7)));
  pool.insert(f.make(0x1000000, 4 * kMiB, fake_stream(7)));
  pool.insert(f.make(0x0800000, 4 * kMiB, fake_stream(7)));
  pool.insert(f.make(0x5000000, 3 * kMiB, fake_stream(9)));
  Block* first = pool.take_best_fit(fake_stream(7), 3 * kMiB, SIZE_MAX);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->address, 0x0800000u);
  Block* second = pool.take_best_fit(fake_stream(7), 3 * kMiB, SIZE_MAX);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->address, 0x1000000u);
  EXPECT_EQ(pool.take_best_fit(fake_stream(7), 9 * kMiB, SIZE_MAX), nullptr);
  EXPECT_EQ(pool.take_best_fit(fake_stream(8), kMiB, SIZE_MAX), nullptr);  // other stream
  EXPECT_EQ(pool.free_blocks().size(), 2u);
  EXPECT_EQ(pool.search_count(), 4u);
}

TEST(BlockPool, OversizeBlockIsNotGivenToSmallRequests) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  pool.insert(f.make(0x1000000, 64 * kMiB, nullptr));
  EXPECT_EQ(pool.take_best_fit(nullptr, 30 * kMiB, 40 * kMiB), nullptr);
  EXPECT_EQ(pool.take_best_fit(nullptr, 44 * kMiB, 40 * kMiB), nullptr);  // 20 MiB smaller
  EXPECT_NE(pool.take_best_fit(nullptr, 45 * kMiB, 40 * kMiB), nullptr);
}

TEST(BlockPool, SplitThenMergeRestoresTheSegment) {
  Fixture f;
  BlockPool pool(PoolKind::kSmall);
  Block* whole = f.make(0x100000, kSmallBuffer, nullptr);
  f.segment.head = whole;
  Block* rest = split_block(whole, 4096, pool);
  f.owned.push_back(rest);
  EXPECT_EQ(whole->size, 4096u);
  EXPECT_EQ(rest->address, 0x100000u + 4096);
  EXPECT_EQ(rest->size, kSmallBuffer - 4096);
  EXPECT_EQ(whole->next, rest);
  EXPECT_EQ(rest->prev, whole);
  Block* tail = split_block(rest, 8192, pool);
  f.owned.push_back(tail);
  pool.insert(tail);

  // An allocated neighbour does not merge.
  rest->allocated = true;
  EXPECT_EQ(try_merge(whole, rest, pool), 0u);
  // Neither does one waiting for stream events.
  rest->allocated = false;
  rest->pending_events = 1;
  EXPECT_EQ(try_merge(whole, rest, pool), 0u);
  rest->pending_events = 0;

  // [whole rest] then [whole tail]: try_merge recycles the absorbed blocks into the pool.
  pool.insert(rest);
  std::erase(f.owned, rest);
  std::erase(f.owned, tail);
  EXPECT_EQ(try_merge(whole, whole->next, pool), 8192u);
  EXPECT_EQ(try_merge(whole, whole->next, pool), kSmallBuffer - 4096 - 8192);
  EXPECT_EQ(whole->size, kSmallBuffer);
  EXPECT_FALSE(whole->is_split());
  EXPECT_TRUE(pool.free_blocks().empty());
  EXPECT_EQ(f.segment.head, whole);
}

TEST(BlockPool, MergeWithPreviousMovesTheHead) {
  Fixture f;
  BlockPool pool(PoolKind::kSmall);
  Block* front = f.make(0x200000, kSmallBuffer, nullptr);
  f.segment.head = front;
  Block* back = split_block(front, 1024, pool);
  f.owned.push_back(back);
  pool.insert(front);
  std::erase(f.owned, front);
  EXPECT_EQ(try_merge(back, back->prev, pool), 1024u);
  EXPECT_EQ(back->address, 0x200000u);
  EXPECT_EQ(f.segment.head, back);
}

TEST(BlockPool, AllocatorSplitsSmallSegmentsAndMergesOnFree) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, Options{});
  void* a = allocator.allocate(1000, nullptr);  // 1024 B from a 2 MiB segment
  void* b = allocator.allocate(3000, nullptr);  // next to it
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 1024);
  MemoryStats stats = allocator.stats();
  EXPECT_EQ(stats.segment[kSmallPool].current, 1);
  EXPECT_EQ(stats.inactive_split[kSmallPool].current, 1);
  EXPECT_EQ(stats.inactive_split_bytes[kSmallPool].current,
            static_cast<std::int64_t>(kSmallBuffer - 1024 - 3072));
  allocator.deallocate(a);
  stats = allocator.stats();
  EXPECT_EQ(stats.inactive_split[kSmallPool].current, 2);
  allocator.deallocate(b);  // merges with both neighbours: one free unsplit block
  stats = allocator.stats();
  EXPECT_EQ(stats.inactive_split[kSmallPool].current, 0);
  EXPECT_EQ(stats.inactive_split_bytes[kSmallPool].current, 0);
  const MemorySnapshot snapshot = allocator.snapshot();
  ASSERT_EQ(snapshot.segments.size(), 1u);
  ASSERT_EQ(snapshot.segments[0].blocks.size(), 1u);
  EXPECT_EQ(snapshot.segments[0].blocks[0].size, kSmallBuffer);
}

TEST(BlockPool, AllocatorLargeRemainderRule) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(0, Options{});
  // 19 MiB from a 20 MiB segment: remainder 1 MiB is not > 1 MiB, no split.
  void* a = allocator.allocate(19 * kMiB, nullptr);
  EXPECT_EQ(allocator.snapshot().segments.at(0).blocks.size(), 1u);
  EXPECT_EQ(allocator.stats().allocated_bytes[kLargePool].current, static_cast<std::int64_t>(20 * kMiB));
  allocator.deallocate(a);
  // 18 MiB: remainder 2 MiB, split.
  void* b = allocator.allocate(18 * kMiB, nullptr);
  EXPECT_EQ(b, a);  // reused from the cache
  EXPECT_EQ(allocator.snapshot().segments.at(0).blocks.size(), 2u);
  EXPECT_EQ(allocator.stats().num_device_alloc, 1);
  allocator.deallocate(b);
}

TEST(BlockPool, AllocatorReusesBlocksOnlyOnTheirStream) {
  CUDACACHE_REQUIRE_CUDASIM();
  cudaStream_t other = nullptr;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  {
    DeviceAllocator allocator(0, Options{});
    void* a = allocator.allocate(4096, nullptr);
    allocator.deallocate(a);
    void* b = allocator.allocate(4096, other);
    EXPECT_NE(a, b);
    EXPECT_EQ(allocator.stats().num_device_alloc, 2);
    void* c = allocator.allocate(4096, nullptr);
    EXPECT_EQ(c, a);
    allocator.deallocate(b);
    allocator.deallocate(c);
  }
  cudaStreamDestroy(other);
}

}  // namespace
}  // namespace cudacache
