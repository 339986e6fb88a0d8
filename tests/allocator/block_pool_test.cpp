// BlockPool, split and merge on hand-built blocks (no device), then the same rules observed
// through DeviceAllocator on cudasim.
#include "block_pool.h"
#include "test_support.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace cudacache {
namespace {

using testing::pytorch_native;
using testing::ScopedStream;

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
  // A free block left by a long-lived one (Note [Lifetime classes]), on the null stream.
  Block* make_hole(std::uintptr_t address, std::size_t size) {
    Block* block = make(address, size, nullptr);
    block->long_lived_hole = true;
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
  EXPECT_EQ(pool.free_count(), 2u);
  EXPECT_EQ(pool.search_count(), 4u);
}

// Equal sizes rank by segment order (PyTorch's per-cudaMalloc counter), then address: the
// block of the older segment wins even at a higher address, and within one segment the lower
// address wins.
TEST(BlockPool, EqualSizesPreferTheOlderSegmentThenTheLowerAddress) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  auto make = [&](std::uintptr_t address, std::uint64_t order) {
    Block* block = f.make(address, 196 * kMiB, nullptr);
    block->segment_order = order;
    return block;
  };
  pool.insert(make(0x10000000, 3));  // newest segment, lowest address
  pool.insert(make(0x90000000, 1));  // oldest segment, its second block
  pool.insert(make(0x80000000, 1));  // oldest segment, its first block
  pool.insert(make(0x40000000, 2));
  const std::uintptr_t expected[] = {0x80000000, 0x90000000, 0x40000000, 0x10000000};
  for (const std::uintptr_t address : expected) {
    Block* block = pool.take_best_fit(nullptr, 100 * kMiB, SIZE_MAX);
    ASSERT_NE(block, nullptr);
    EXPECT_EQ(block->address, address);
  }
  EXPECT_EQ(pool.free_count(), 0u);
}

// largest_free_block() searches once per stream: after every insert, erase and best-fit take
// of a random sequence on three streams it must equal the largest size among the blocks
// actually in the pool.
TEST(BlockPool, LargestFreeBlockFollowsEveryInsertEraseAndTake) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  std::vector<Block*> inside;
  std::uint64_t state = 12345;
  const auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  EXPECT_EQ(pool.largest_free_block(), 0u);
  for (int step = 0; step < 4000; ++step) {
    const auto choice = next() % 3;
    if (choice == 0 || inside.empty()) {
      Block* block = f.make(0x100000000ULL + step * 0x1000000ULL, (1 + next() % 40) * kMiB,
                            fake_stream(1 + next() % 3));
      pool.insert(block);
      inside.push_back(block);
    } else if (choice == 1) {
      const std::size_t at = next() % inside.size();
      pool.erase(inside[at]);
      inside.erase(inside.begin() + static_cast<std::ptrdiff_t>(at));
    } else {
      Block* taken =
          pool.take_best_fit(fake_stream(1 + next() % 3), (1 + next() % 40) * kMiB, SIZE_MAX);
      if (taken != nullptr) inside.erase(std::find(inside.begin(), inside.end(), taken));
    }
    std::size_t expected = 0;
    for (const Block* block : inside) expected = std::max(expected, block->size);
    ASSERT_EQ(pool.largest_free_block(), expected) << "after step " << step;
  }
}

TEST(BlockPool, SplitRemainderInheritsTheSegmentOrder) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  Block* whole = f.make(0x1000000, 40 * kMiB, nullptr);
  whole->segment_order = 7;
  f.segment.head = whole;
  Block* rest = split_block(whole, 10 * kMiB, pool);
  f.owned.push_back(rest);
  EXPECT_EQ(rest->segment_order, 7u);
  EXPECT_EQ(whole->segment_order, 7u);
}

// Note [Lifetime classes]: a long-lived request takes the smallest long-lived hole large
// enough, a short-lived one passes over such holes; without a prediction, best fit as before.
TEST(BlockPool, LongLivedRequestsTakeLongLivedHolesAndShortLivedOnesPassThemOver) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  pool.insert(f.make_hole(0x10000000, 100 * kMiB));  // the exact fit, left by a long-lived block
  pool.insert(f.make(0x20000000, 120 * kMiB, nullptr));  // left by short-lived ones
  pool.insert(f.make_hole(0x30000000, 150 * kMiB));
  Block* taken =
      pool.take_best_fit(nullptr, 100 * kMiB, SIZE_MAX, FitRule::kLeastGrowable, Lifetime::kShort);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, 0x20000000u);
  pool.insert(taken);
  taken =
      pool.take_best_fit(nullptr, 110 * kMiB, SIZE_MAX, FitRule::kLeastGrowable, Lifetime::kLong);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, 0x30000000u);  // the hole, not the smaller short-lived block
  pool.insert(taken);
  taken = pool.take_best_fit(nullptr, 100 * kMiB, SIZE_MAX, FitRule::kLeastGrowable,
                             Lifetime::kUnknown);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, 0x10000000u);  // no prediction: plain best fit
  // Only holes are large enough: a short-lived request takes the best of them.
  taken =
      pool.take_best_fit(nullptr, 130 * kMiB, SIZE_MAX, FitRule::kLeastGrowable, Lifetime::kShort);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, 0x30000000u);
  // No hole is large enough: a long-lived request takes the best fit.
  taken =
      pool.take_best_fit(nullptr, 115 * kMiB, SIZE_MAX, FitRule::kLeastGrowable, Lifetime::kLong);
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->address, 0x20000000u);
}

// The pool counts its long-lived holes to skip the lifetime search when it has none: the count
// must follow takes, re-inserts and erases (also of a block it does not hold), or a long-lived
// request would be placed by plain best fit while a hole waits.
TEST(BlockPool, ALongLivedHoleIsStillFoundAfterHolesLeftAndCameBack) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  Block* plain = f.make(0x10000000, 100 * kMiB, nullptr);
  Block* hole = f.make_hole(0x20000000, 120 * kMiB);
  Block* elsewhere = f.make_hole(0x30000000, 150 * kMiB);  // never in the pool
  pool.insert(plain);
  pool.insert(hole);
  for (int round = 0; round < 3; ++round) {
    Block* taken =
        pool.take_best_fit(nullptr, 100 * kMiB, SIZE_MAX, FitRule::kLeastGrowable, Lifetime::kLong);
    EXPECT_EQ(taken, hole) << "round " << round;  // not the exact fit beside it
    pool.insert(taken);
    pool.erase(elsewhere);  // not held: changes nothing
  }
  pool.erase(hole);
  EXPECT_EQ(
      pool.take_best_fit(nullptr, 100 * kMiB, SIZE_MAX, FitRule::kLeastGrowable, Lifetime::kLong),
      plain);
}

TEST(BlockPool, FreeBlocksOfAtLeastASizeAreVisitedOnEveryStreamInOrder) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  pool.insert(f.make(0x1000000, 2 * kMiB, fake_stream(7)));
  pool.insert(f.make(0x2000000, 6 * kMiB, fake_stream(7)));
  pool.insert(f.make(0x3000000, 4 * kMiB, fake_stream(7)));
  pool.insert(f.make(0x4000000, 1 * kMiB, fake_stream(8)));  // a stream with none large enough
  pool.insert(f.make(0x5000000, 4 * kMiB, fake_stream(9)));
  pool.insert(f.make(0x6000000, 3 * kMiB, fake_stream(9)));
  std::vector<std::uintptr_t> seen;
  pool.for_each_free_of_at_least(4 * kMiB, [&](Block* block) { seen.push_back(block->address); });
  EXPECT_EQ(seen, (std::vector<std::uintptr_t>{0x3000000, 0x2000000, 0x5000000}));
  seen.clear();
  pool.for_each_free_of_at_least(7 * kMiB, [&](Block* block) { seen.push_back(block->address); });
  EXPECT_TRUE(seen.empty());
}

// A growth maps the start of an unmapped stretch and leaves the rest, split off, where the
// stretch was in the unmapped index; the index still finds every stretch in address order and
// can erase the rest. A block the index does not hold is simply inserted.
TEST(BlockPool, AnUnmappedRestTakesItsStretchsPlace) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  auto unmapped = [&](std::uintptr_t address) {
    Block* block = f.make(address, 8 * kMiB, nullptr);
    block->mapped = false;
    pool.insert(block);
    return block;
  };
  unmapped(0x1000000);
  Block* stretch = unmapped(0x2000000);
  unmapped(0x3000000);
  Block* rest = f.make(0x2400000, 4 * kMiB, nullptr);
  rest->mapped = false;
  pool.replace_unmapped(stretch, rest);
  auto addresses = [&] {
    std::vector<std::uintptr_t> seen;
    pool.for_each_unmapped(nullptr, [&](Block* block) {
      seen.push_back(block->address);
      return true;
    });
    return seen;
  };
  EXPECT_EQ(addresses(), (std::vector<std::uintptr_t>{0x1000000, 0x2400000, 0x3000000}));
  pool.erase(rest);
  EXPECT_EQ(addresses(), (std::vector<std::uintptr_t>{0x1000000, 0x3000000}));
  Block* other = f.make(0x2800000, 2 * kMiB, nullptr);
  other->mapped = false;
  pool.replace_unmapped(stretch, other);  // `stretch` is no longer held: `other` is inserted
  EXPECT_EQ(addresses(), (std::vector<std::uintptr_t>{0x1000000, 0x2800000, 0x3000000}));
}

// A hole the max_split_size rule forbids to split for the request is not taken over a block
// that serves it.
TEST(BlockPool, ALongLivedHoleTooLargeToSplitLeavesTheRequestToBestFit) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  Block* plain = f.make(0x10000000, 32 * kMiB, nullptr);
  Block* hole = f.make_hole(0x20000000, 64 * kMiB);
  pool.insert(plain);
  pool.insert(hole);
  Block* taken =
      pool.take_best_fit(nullptr, 30 * kMiB, 40 * kMiB, FitRule::kSmallest, Lifetime::kLong);
  EXPECT_EQ(taken, plain);
  EXPECT_EQ(pool.search_count(), 1u);
}

TEST(BlockPool, SplitsKeepTheLongLivedHoleMarkAndMergesAndIt) {
  Fixture f;
  BlockPool pool(PoolKind::kLarge);
  Block* whole = f.make_hole(0x1000000, 40 * kMiB);
  f.segment.head = whole;
  Block* rest = split_block(whole, 10 * kMiB, pool);
  EXPECT_TRUE(rest->long_lived_hole);
  pool.insert(rest);
  EXPECT_EQ(try_merge(whole, rest, pool), 30 * kMiB);
  EXPECT_TRUE(whole->long_lived_hole);  // both were holes
  Block* other = split_block(whole, 10 * kMiB, pool);
  other->long_lived_hole = false;
  pool.insert(other);
  EXPECT_EQ(try_merge(whole, other, pool), 30 * kMiB);
  EXPECT_FALSE(whole->long_lived_hole);  // part of it was not
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
  EXPECT_EQ(pool.free_count(), 0u);
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
  DeviceAllocator allocator(0, pytorch_native());
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
  DeviceAllocator allocator(0, pytorch_native());
  // 19 MiB from a 20 MiB segment: remainder 1 MiB is not > 1 MiB, no split.
  void* a = allocator.allocate(19 * kMiB, nullptr);
  EXPECT_EQ(allocator.snapshot().segments.at(0).blocks.size(), 1u);
  EXPECT_EQ(allocator.stats().allocated_bytes[kLargePool].current,
            static_cast<std::int64_t>(20 * kMiB));
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
  const ScopedStream other;
  DeviceAllocator allocator(0, pytorch_native());
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

// The pattern that made the qwen7b_layerwise_sparse_quant_calibration trace diverge from
// PyTorch 2.15 (on cudasim) at its 82nd event: two free 196 MiB blocks, one the front of an older
// 392 MiB segment, one a whole newer segment. PyTorch serves a 196 MiB request from the older
// segment whatever the addresses (cudasim's, like the driver's, need not grow with age), so the 392
// MiB segment stays [used, used] and a later 392 MiB request needs a new segment: 3 cudaMallocs,
// 392 + 196 + 392 = 980 MiB. Ranking by address alone picks the newer segment on a top-down address
// space; the 392 MiB segment then merges back whole and serves the 392 MiB request: 2 cudaMallocs,
// 588 MiB.
TEST(BlockPool, AllocatorBreaksSizeTiesByOlderSegment) {
  CUDACACHE_REQUIRE_CUDASIM();
  DeviceAllocator allocator(
      0, pytorch_native("max_split_size_mb:unlimited,roundup_power2_divisions:1"));
  constexpr std::size_t kHalf = 196 * kMiB;              // a multiple of 2 MiB: segments are exact
  void* whole = allocator.allocate(2 * kHalf, nullptr);  // segment 1: 392 MiB
  allocator.deallocate(whole);
  void* front = allocator.allocate(kHalf, nullptr);  // splits segment 1
  void* back = allocator.allocate(kHalf, nullptr);   // the rest of segment 1
  EXPECT_EQ(front, whole);
  EXPECT_EQ(static_cast<char*>(back) - static_cast<char*>(front),
            static_cast<std::ptrdiff_t>(kHalf));
  void* newer = allocator.allocate(kHalf, nullptr);  // segment 2: 196 MiB
  EXPECT_EQ(allocator.stats().num_device_alloc, 2);
  allocator.deallocate(newer);
  allocator.deallocate(front);  // free 196 MiB blocks: front of segment 1, all of segment 2

  void* again = allocator.allocate(kHalf, nullptr);
  EXPECT_EQ(again, front);     // the older segment's block, at either address order
  allocator.deallocate(back);  // segment 1 is [again, free 196 MiB]: no 392 MiB block
  void* big = allocator.allocate(2 * kHalf, nullptr);
  MemoryStats stats = allocator.stats();
  EXPECT_EQ(stats.num_device_alloc, 3);
  EXPECT_EQ(stats.reserved_bytes[kAllPools].current, static_cast<std::int64_t>(5 * kHalf));
  EXPECT_EQ(stats.reserved_bytes[kAllPools].peak, static_cast<std::int64_t>(5 * kHalf));

  // The free 196 MiB blocks: back of segment 1 (older) and segment 2. The older one serves.
  void* last = allocator.allocate(kHalf, nullptr);
  EXPECT_EQ(last, back);
  allocator.deallocate(last);
  allocator.deallocate(big);
  allocator.deallocate(again);
}

}  // namespace
}  // namespace cudacache
