// A pool's index of free blocks, and the split and merge operations on a segment's blocks.
//
// Free blocks are ordered by (stream, size, segment order, address), called BlockOrder below and
// kept by FreeIndex (free_index.h, Note [Free index]): the first block not below
// (stream, size, 0, 0) is the best fit on that stream; among equal sizes, the block of the
// oldest segment (the one cudaMalloc'd first), then the lowest address within that segment.
// This is PyTorch's order (observed in PyTorch 2.15 on cudasim; its allocation-order counter,
// described in pytorch PR 183591 as BlockComparatorSizeCounterAddress): the counter is taken at
// each cudaMalloc and inherited by every block split from that segment. Ranking by address alone
// differs whenever the driver does not hand out addresses in increasing order (cudasim's and
// Linux's mmap go top down): a newer segment then wins ties that PyTorch gives to an older one.
#pragma once

#include "free_index.h"
#include "lifetime_predictor.h"
#include "segment.h"

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace cudacache {

// Unmapped stretches of expandable segments, by (stream, address): the lowest address first.
struct UnmappedOrder {
  bool operator()(const Block* a, const Block* b) const {
    const auto stream_a = reinterpret_cast<std::uintptr_t>(a->stream);
    const auto stream_b = reinterpret_cast<std::uintptr_t>(b->stream);
    if (stream_a != stream_b) return stream_a < stream_b;
    return a->address < b->address;
  }
};

// How take_best_fit chooses among the free blocks large enough for a request.
enum class FitRule {
  kSmallest,  // the first in BlockOrder: the smallest, then the oldest segment's, lowest address
  // PyTorch's rule for expandable segments: from the smallest, move on to larger blocks while
  // the next one could grow less (its size plus the unmapped stretch after it), so the block at
  // the growing end of a range is kept for requests nothing else serves.
  kLeastGrowable,
};

// The indexes are private: every search key is built here, in the index's own order, and
// callers walk the blocks through the visitors below (which must not change the pool; collect
// first, then change).
class BlockPool {
 public:
  explicit BlockPool(PoolKind kind) : kind_(kind) {}
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  PoolKind kind() const { return kind_; }

  // Removes and returns the best free block for `size` bytes on `stream` (max_split_size rules
  // in size_policy.h), or nullptr. Counts searches for the garbage collector's block ages.
  // With a known `lifetime` (Note [Lifetime classes] in policy_cudacache.cpp), among the
  // kLifetimeScan smallest blocks large enough: a long-lived request takes the smallest
  // long-lived hole, if any; a short-lived one passes over long-lived holes while `rule` finds
  // another block. Otherwise, and when there is no such block, `rule` alone decides.
  Block* take_best_fit(cudaStream_t stream, std::size_t size, std::size_t max_split_size,
                       FitRule rule = FitRule::kSmallest, Lifetime lifetime = Lifetime::kUnknown);
  // How many of the free blocks large enough a lifetime-aware search looks at (bounded, so that
  // a pool of many free blocks costs no more than a few dozen steps).
  static constexpr int kLifetimeScan = 64;
  // The smallest free block of `stream` of at least `size` bytes (not removed), or nullptr.
  Block* smallest_fit(cudaStream_t stream, std::size_t size) const;

  std::size_t free_count() const { return free_.size(); }
  // Every free (mapped) block, in BlockOrder.
  template <typename Fn>
  void for_each_free(Fn&& fn) const {
    for (Block* block : free_) fn(block);
  }
  // Every free (mapped) block, in BlockOrder, while fn returns true.
  template <typename Fn>
  void for_each_free_while(Fn&& fn) const {
    for (Block* block : free_) {
      if (!fn(block)) return;
    }
  }
  // Every free (mapped) block of `size` bytes or more, in BlockOrder: one search per stream.
  template <typename Fn>
  void for_each_free_of_at_least(std::size_t size, Fn&& fn) const {
    for (auto it = free_.begin(); it != free_.end();) {
      const cudaStream_t stream = (*it)->stream;
      for (it = free_.lower_bound(FreeIndex::search_key(stream, size));
           it != free_.end() && (*it)->stream == stream; ++it) {
        fn(*it);
      }
    }
  }
  // The free blocks of `stream` of at least `size` bytes, smallest first (BlockOrder), while fn
  // returns true.
  template <typename Fn>
  void for_each_fit(cudaStream_t stream, std::size_t size, Fn&& fn) const {
    for (auto it = free_.lower_bound(FreeIndex::search_key(stream, size));
         it != free_.end() && (*it)->stream == stream; ++it) {
      if (!fn(*it)) return;
    }
  }
  // The free blocks of `stream` smaller than `size`, largest first, while fn returns true.
  template <typename Fn>
  void for_each_smaller(cudaStream_t stream, std::size_t size, Fn&& fn) const {
    for (auto it = free_.lower_bound(FreeIndex::search_key(stream, size)); it != free_.begin();) {
      --it;
      if ((*it)->stream != stream || !fn(*it)) return;
    }
  }
  // The unmapped stretches of `stream`, lowest address first, while fn returns true.
  template <typename Fn>
  void for_each_unmapped(cudaStream_t stream, Fn&& fn) const {
    Block key = unmapped_key(stream);
    for (auto it = unmapped_.lower_bound(&key); it != unmapped_.end(); ++it) {
      if ((*it)->stream != stream || !fn(*it)) return;
    }
  }

  // Free blocks go to the free index, unmapped ones (block->mapped false) to the unmapped one.
  void insert(Block* block);
  void erase(Block* block);
  // Puts `with` in the unmapped index where `block` was (same stream, no unmapped block
  // between their addresses): one node moved, none freed or allocated.
  void replace_unmapped(Block* block, Block* with);
  std::uint64_t search_count() const { return search_count_; }
  // The largest free (mapped) block of any stream: one search per stream (the last block of a
  // stream is its largest), not a walk of every free block.
  std::size_t largest_free_block() const;

  // Block objects are recycled, so that split and merge on the cache-hit path do not
  // allocate host memory. new_block() returns a default-initialised Block. recycle() never
  // throws: a block with no room left among the spares is deleted (the spares' room grows
  // with them, in reserve_host_memory).
  Block* new_block();
  void recycle(Block* block);
  // Note [Host memory runs out] (device_allocator.h): allocates, now, what the next few splits,
  // merges and insertions would (spare blocks, room to recycle them, index nodes), so that
  // those make no host allocation. Throws std::bad_alloc before any change. Inline: on every
  // allocation and free, where all is nearly always there already.
  void reserve_host_memory() {
    if (spare_.size() >= kSpareBlocks && free_.host_memory_reserved()) return;
    reserve_host_memory_now(1);
  }
  // For `insertions` blocks inserted at once (the frees of a batch of completed stream events).
  void reserve_host_memory(std::size_t insertions) {
    if (spare_.size() >= kSpareBlocks && free_.host_memory_reserved(insertions)) return;
    reserve_host_memory_now(insertions);
  }
  // For an allocation served from this pool: its split's remainder, and before it the free
  // block that a cache hit puts back when it takes another rather than cut a page (Note [Pages
  // of one block]). Two insertions may split two full leaves of the free index.
  void reserve_host_memory_for_allocation() { reserve_host_memory(kAllocationInsertions); }
  // ... and nodes for the unmapped index: before pages are mapped or unmapped, or a range is
  // reserved (the only calls that insert unmapped stretches). Unmapping the middle of a free
  // block inserts the mapped parts before and after it: two insertions.
  void reserve_host_memory_for_pages() {
    if (spare_unmapped_nodes_.size() >= kSpareUnmappedNodes) {
      reserve_host_memory(kPageInsertions);
      return;
    }
    reserve_host_memory_now(kPageInsertions);
  }

 private:
  using UnmappedIndex = std::set<Block*, UnmappedOrder>;

  // `at`, or with `pass_holes` the first block from `at` that is not a long-lived hole (within
  // kLifetimeScan), if it is `stream`'s; else free_.end().
  FreeIndex::Iterator candidate(FreeIndex::Iterator at, cudaStream_t stream, bool pass_holes) const;
  // `rule`'s choice from `it` (a block of `stream` large enough): with kLeastGrowable, on to the
  // next candidate while it could grow less.
  FreeIndex::Iterator rule_fit(FreeIndex::Iterator it, cudaStream_t stream, FitRule rule,
                               bool pass_holes) const;
  // take_best_fit's choice for a known lifetime, from the smallest block large enough (of
  // `stream`); when the block it would take may not be split for the request, `rule`'s choice
  // without lifetimes.
  FreeIndex::Iterator lifetime_fit(FreeIndex::Iterator smallest, cudaStream_t stream,
                                   std::size_t size, std::size_t max_split_size, FitRule rule,
                                   Lifetime lifetime) const;

  void reserve_host_memory_now(std::size_t insertions);
  // Into the unmapped index, in a spare node when there is one.
  void insert_unmapped(Block* block);
  // The key that sorts before every unmapped stretch of `stream`.
  static Block unmapped_key(cudaStream_t stream) {
    Block key;  // address 0 sorts before every real block
    key.stream = stream;
    return key;
  }

  // What reserve_host_memory() keeps ready: enough for one call's splits and merges (a growth
  // splits a range's stretch around its pages; moves and teardowns that need more fall back to
  // allocating, as before).
  static constexpr std::size_t kSpareBlocks = 8;
  static constexpr std::size_t kPageInsertions = 2;
  static constexpr std::size_t kAllocationInsertions = 2;
  static constexpr std::size_t kSpareUnmappedNodes = 4;

  PoolKind kind_;
  FreeIndex free_;
  UnmappedIndex unmapped_;
  std::vector<UnmappedIndex::node_type> spare_unmapped_nodes_;
  std::vector<Block*> spare_;
  std::size_t blocks_made_ = 0;  // by new_block() and reserve_host_memory_now(), ever
  std::uint64_t search_count_ = 0;
  // Free (mapped) blocks that are long-lived holes: a block's mark does not change while it is
  // in the index (split_block, try_merge and map_block set it outside).
  std::size_t long_lived_holes_ = 0;
};

// Splits `size` bytes off the front of `block`; returns the new block (from `pool`) holding
// the remainder, with the block's long_lived_hole. The remainder is not inserted into the free
// index.
Block* split_block(Block* block, std::size_t size, BlockPool& pool);

// Absorbs neighbour `src` into `dst` if `src` is free (not allocated, no pending events) and
// mapped as `dst` is, and returns the number of bytes absorbed (0 if not merged). On a merge,
// src is removed from `pool`'s index and recycled; the merged block is a long-lived hole only
// if both were.
std::size_t try_merge(Block* dst, Block* src, BlockPool& pool);

}  // namespace cudacache
