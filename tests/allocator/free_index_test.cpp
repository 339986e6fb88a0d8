// FreeIndex (allocator/core/free_index.h) against std::set in the same order: the same blocks,
// in the same order, found by the same searches, through random insertions and removals that
// grow the index to thousands of blocks (leaves split, join and even out) and shrink it again;
// and its reserve of host memory, which this binary observes through its own aligned operator
// new (the leaves are aligned to their size).
#include "free_index.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <vector>

namespace {
long g_aligned_news = 0;  // aligned operator new calls so far: a leaf each
}  // namespace

void* operator new(std::size_t bytes, std::align_val_t alignment) {
  ++g_aligned_news;
  const auto align = static_cast<std::size_t>(alignment);
  if (void* memory = std::aligned_alloc(align, (bytes + align - 1) / align * align)) return memory;
  throw std::bad_alloc();
}
void operator delete(void* memory, std::align_val_t) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t, std::align_val_t) noexcept { std::free(memory); }

namespace cudacache {
namespace {

struct SetOrder {
  bool operator()(const Block* a, const Block* b) const {
    return FreeIndex::below(a, FreeIndex::key_of(b));
  }
};

cudaStream_t fake_stream(std::uintptr_t id) { return reinterpret_cast<cudaStream_t>(id); }

// The index's blocks, front to back and back to front, and its size, equal the set's.
void expect_same(const FreeIndex& index, const std::set<Block*, SetOrder>& expected) {
  ASSERT_EQ(index.size(), expected.size());
  ASSERT_EQ(index.empty(), expected.empty());
  std::vector<Block*> forward(index.begin(), index.end());
  ASSERT_EQ(forward, std::vector<Block*>(expected.begin(), expected.end()));
  std::vector<Block*> backward;
  for (auto it = index.end(); it != index.begin();) backward.push_back(*--it);
  ASSERT_EQ(backward, std::vector<Block*>(expected.rbegin(), expected.rend()));
}

TEST(FreeIndex, EmptyIndexHasNothingToFindOrErase) {
  FreeIndex index;
  EXPECT_TRUE(index.empty());
  EXPECT_EQ(index.begin(), index.end());
  EXPECT_EQ(index.lower_bound(FreeIndex::search_key(nullptr, 0)), index.end());
  Block block;
  block.size = 512;
  EXPECT_FALSE(index.erase(&block));
  EXPECT_EQ(index.size(), 0u);
}

TEST(FreeIndex, OrdersByStreamThenSizeThenSegmentThenAddress) {
  std::vector<Block> blocks(5);
  const auto set = [](Block& block, std::uintptr_t stream, std::size_t size, std::uint64_t segment,
                      std::uintptr_t address) {
    block.stream = fake_stream(stream);
    block.size = size;
    block.segment_order = segment;
    block.address = address;
  };
  set(blocks[0], 2, 512, 1, 0x1000);
  set(blocks[1], 1, 4096, 1, 0x9000);
  set(blocks[2], 1, 1024, 2, 0x1000);
  set(blocks[3], 1, 1024, 1, 0x8000);
  set(blocks[4], 1, 1024, 1, 0x2000);
  FreeIndex index;
  for (Block& block : blocks) index.insert(&block);
  EXPECT_EQ(std::vector<Block*>(index.begin(), index.end()),
            (std::vector<Block*>{&blocks[4], &blocks[3], &blocks[2], &blocks[1], &blocks[0]}));
  // The best fit for 1,000 bytes on stream 1 is the oldest segment's lowest address; for 2,000
  // bytes the 4 KiB block; stream 2 starts after every block of stream 1.
  EXPECT_EQ(*index.lower_bound(FreeIndex::search_key(fake_stream(1), 1000)), &blocks[4]);
  EXPECT_EQ(*index.lower_bound(FreeIndex::search_key(fake_stream(1), 2000)), &blocks[1]);
  EXPECT_EQ(*index.lower_bound(FreeIndex::search_key(fake_stream(2), 0)), &blocks[0]);
  EXPECT_EQ(index.lower_bound(FreeIndex::search_key(fake_stream(2), 513)), index.end());
}

// Two leaves, one shrinking next to a full one: it takes blocks from the full one's front, then
// gives the other leaf's last blocks to the shrinking one's front; the order holds throughout.
TEST(FreeIndex, LeavesEvenOutInBothDirections) {
  constexpr std::size_t kCapacity = FreeIndex::kLeafCapacity;
  std::vector<std::unique_ptr<Block>> blocks;
  for (std::size_t i = 0; i < 2 * kCapacity; ++i) {
    blocks.push_back(std::make_unique<Block>());
    blocks.back()->size = 512;  // one stream, size and segment: ordered by address
    blocks.back()->address = 0x1000 * (i + 1);
  }
  FreeIndex index;
  std::set<Block*, SetOrder> expected;
  const auto insert = [&](std::size_t i) {
    index.insert(blocks[i].get());
    expected.insert(blocks[i].get());
  };
  const auto erase = [&](std::size_t i) {
    ASSERT_TRUE(index.erase(blocks[i].get()));
    expected.erase(blocks[i].get());
  };
  // One full leaf, then a split into halves; the later blocks all go to the second leaf.
  const std::size_t half = kCapacity / 2;
  const std::size_t total = kCapacity + 48;
  for (std::size_t i = 0; i < total; ++i) insert(i);
  ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  // The first leaf shrinks below the minimum beside a second leaf too full to join it.
  for (std::size_t i = 0; i < half - FreeIndex::kLeafMinimum + 1; ++i) {
    erase(i);
    ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  }
  // The erased blocks come back (into the first leaf), then the second leaf shrinks.
  for (std::size_t i = 0; i < half - FreeIndex::kLeafMinimum + 1; ++i) insert(i);
  ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  for (std::size_t i = total; i-- > total - kCapacity / 2;) {
    erase(i);
    ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  }
}

// Random insertions and removals, by block and by iterator, checked against std::set after
// every change while small and every 97 changes after, and every search against the set's.
TEST(FreeIndex, MatchesAnOrderedSetThroughRandomChanges) {
  std::mt19937_64 random(20261204);
  constexpr std::size_t kBlocks = 6000;  // about 50 leaves when all are in
  std::vector<std::unique_ptr<Block>> blocks;
  for (std::size_t i = 0; i < kBlocks; ++i) {
    auto block = std::make_unique<Block>();
    block->stream = fake_stream(1 + random() % 3);
    block->size = (1 + random() % 64) * 512;  // many equal sizes: the later fields decide
    block->segment_order = 1 + random() % 4;
    block->address = 0x100000 + i * 0x1000;
    blocks.push_back(std::move(block));
  }
  FreeIndex index;
  std::set<Block*, SetOrder> expected;
  std::vector<bool> inside(kBlocks, false);
  std::size_t changes = 0;
  // Phases: grow to nearly all blocks, shrink to a few, grow again, churn around that size
  // (leaves split, join and even out at once), empty it.
  struct Phase {
    std::size_t target;
    std::size_t churn;  // changes after reaching the target, each way at random
  };
  for (const Phase phase :
       {Phase{kBlocks * 9 / 10, 0}, Phase{20, 0}, Phase{kBlocks / 2, 20000}, Phase{0, 0}}) {
    std::size_t churn = phase.churn;
    while (expected.size() != phase.target || churn > 0) {
      const std::size_t i = random() % kBlocks;
      Block* block = blocks[i].get();
      bool grow = expected.size() < phase.target;
      if (expected.size() == phase.target || (churn > 0 && random() % 3 == 0)) {
        grow = random() % 2 == 0;
        if (churn > 0) --churn;
      }
      if (grow && !inside[i]) {
        index.insert(block);
        expected.insert(block);
        inside[i] = true;
      } else if (!grow && inside[i]) {
        if (random() % 2 == 0) {
          ASSERT_TRUE(index.erase(block));
        } else {
          // By iterator, found as a search finds it.
          auto it = index.lower_bound(FreeIndex::key_of(block));
          ASSERT_NE(it, index.end());
          ASSERT_EQ(*it, block);
          index.erase(it);
        }
        expected.erase(block);
        inside[i] = false;
      } else if (!inside[i]) {
        ASSERT_FALSE(index.erase(block));  // not in the index: nothing changes
      } else {
        continue;
      }
      ++changes;
      if (expected.size() < 300 || changes % 97 == 0) {
        ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
      }
      // A best-fit search for a random request, and the walk from it, as the pool does.
      Block key;
      key.stream = fake_stream(1 + random() % 3);
      key.size = random() % (65 * 512);
      const auto found = index.lower_bound(FreeIndex::key_of(&key));
      const auto wanted = expected.lower_bound(&key);
      if (wanted == expected.end()) {
        ASSERT_EQ(found, index.end());
      } else {
        ASSERT_NE(found, index.end());
        ASSERT_EQ(*found, *wanted);
        const auto next = std::next(wanted);
        if (next == expected.end()) {
          ASSERT_EQ(std::next(found), index.end());
        } else {
          ASSERT_EQ(*std::next(found), *next);
        }
      }
    }
  }
  ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  EXPECT_TRUE(index.empty());
}

// Note [Insertion where the last removal was]: an insertion right after a removal, as a split's
// remainder and a merge's result are inserted, of a block that sorts where the removed one was,
// just beside it, or anywhere, at either end of a leaf or inside one, with one leaf and with
// many: the index keeps the set's order whether or not the block goes where the removal was.
TEST(FreeIndex, AnInsertionRightAfterARemovalGoesWhereItSorts) {
  std::mt19937_64 random(20261208);
  std::vector<std::unique_ptr<Block>> blocks;
  std::uintptr_t next_address = 0x100000;
  const auto make_block = [&](cudaStream_t stream, std::size_t size, std::uint64_t order) {
    auto block = std::make_unique<Block>();
    block->stream = stream;
    block->size = size;
    block->segment_order = order;
    block->address = next_address;
    next_address += 0x1000;
    blocks.push_back(std::move(block));
    return blocks.back().get();
  };
  FreeIndex index;
  std::set<Block*, SetOrder> expected;
  std::vector<Block*> inside;  // what the index holds, in no order
  std::size_t at_hint_kinds[3] = {0, 0, 0};
  // A sole leaf (up to 6 blocks), then several (about 8 leaves of blocks, each split and joined
  // along the way).
  for (const std::size_t target : {std::size_t{6}, 8 * FreeIndex::kLeafCapacity / 2}) {
    for (int step = 0; step < 30000; ++step) {
      if (inside.size() < target) {
        Block* block =
            make_block(fake_stream(1 + random() % 2), (1 + random() % 32) * 512, 1 + random() % 3);
        index.insert(block);
        expected.insert(block);
        inside.push_back(block);
        continue;
      }
      // Out goes a random block...
      const std::size_t victim = random() % inside.size();
      Block* removed = inside[victim];
      inside[victim] = inside.back();
      inside.pop_back();
      if (random() % 2 == 0) {
        ASSERT_TRUE(index.erase(removed));
      } else {
        auto it = index.lower_bound(FreeIndex::key_of(removed));
        ASSERT_NE(it, index.end());
        ASSERT_EQ(*it, removed);
        index.erase(it);
      }
      expected.erase(removed);
      // ... and in, at once, a block like a split's remainder (smaller, same stream and
      // segment), a merge's result (larger) or any block.
      const int kind = static_cast<int>(random() % 3);
      Block* added = nullptr;
      if (kind == 0) {
        added = make_block(removed->stream, std::max<std::size_t>(512, removed->size - 512),
                           removed->segment_order);
      } else if (kind == 1) {
        added = make_block(removed->stream, removed->size + 512 * (random() % 3),
                           removed->segment_order);
      } else {
        added =
            make_block(fake_stream(1 + random() % 2), (1 + random() % 32) * 512, 1 + random() % 3);
      }
      index.insert(added);
      const auto where = expected.insert(added).first;
      inside.push_back(added);
      // Whether it sorts where the removed block was: between the blocks that were beside it.
      const auto after = std::next(where);
      const bool at_removal =
          (where == expected.begin() || SetOrder{}(*std::prev(where), removed)) &&
          (after == expected.end() || SetOrder{}(removed, *after));
      if (at_removal) ++at_hint_kinds[kind];
      if (target < 10 || step % 64 == 0) {
        ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
      }
    }
    ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  }
  // Each kind of insertion came where the removal was many times, and elsewhere too.
  for (const std::size_t count : at_hint_kinds) EXPECT_GT(count, 1000u);
}

// Note [Host memory runs out]: leaves fill to kLeafCapacity and split at the next insertion, so
// several may be full at once. With the reserve for two insertions made, two insertions that
// split two full leaves allocate nothing. (The reserve counted one split for the first
// kLeafCapacity / 2 insertions, so the second split allocated its leaf.)
TEST(FreeIndex, ReservedInsertionsSplitSeveralFullLeavesWithoutAllocating) {
  constexpr std::size_t kCapacity = FreeIndex::kLeafCapacity;
  std::vector<std::unique_ptr<Block>> blocks;
  const auto make = [&](std::uintptr_t address) {
    blocks.push_back(std::make_unique<Block>());
    blocks.back()->size = 512;  // one stream, size and segment: ordered by address
    blocks.back()->address = address;
    return blocks.back().get();
  };
  FreeIndex index;
  std::set<Block*, SetOrder> expected;
  const auto insert = [&](Block* block) {
    index.insert(block);
    expected.insert(block);
  };
  // One full leaf split in two, then each half filled to kLeafCapacity: two full leaves.
  for (std::size_t i = 1; i <= kCapacity + 1; ++i) insert(make(0x1000 * i));
  for (std::size_t i = 0; i < kCapacity / 2; ++i) insert(make(0x1000 * i + 0x10));
  for (std::size_t i = kCapacity + 2; index.size() < 2 * kCapacity; ++i) insert(make(0x1000 * i));
  ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  index.reserve_host_memory(2);
  ASSERT_TRUE(index.host_memory_reserved(2));
  Block* into_first = make(0x1000 * 5 + 0x20);
  Block* into_second = make(0x1000 * (kCapacity + 5) + 0x20);
  const long before = g_aligned_news;
  insert(into_first);
  insert(into_second);
  EXPECT_EQ(g_aligned_news - before, 0) << "an insertion the reserve covered allocated a leaf";
  ASSERT_NO_FATAL_FAILURE(expect_same(index, expected));
  // Each reserve covers what it names: after the two splits, one more insertion's.
  EXPECT_FALSE(index.host_memory_reserved(1));
  index.reserve_host_memory(1);
  EXPECT_TRUE(index.host_memory_reserved(1));
}

}  // namespace
}  // namespace cudacache
