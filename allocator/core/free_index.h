// FreeIndex: a pool's free blocks in BlockOrder (stream, size, segment order, address), the order
// of best fit (block_pool.h).
//
// Note [Free index]: every allocation and every free goes through this index (a best-fit search
// and a removal, then the insertion of a split's remainder or a merge's result), nearly always
// with few blocks in it: 4 on average on `qwen7b` under cudacache's policy, 2 under PyTorch's
// expandable segments, at most 966 on the real traces (PyTorch's native policy filling a device
// with `cs336_lm`). A red-black tree of Block pointers (std::set, what this replaced) pays a
// node walk and a rebalancing for each change, branch after unpredictable branch. Here the
// blocks lie in sorted arrays (leaves) of at most kLeafCapacity pointers, linked in order, the
// leaves themselves in a sorted array. Up to kLeafCapacity free blocks the index is one array: a
// change is a binary search and a move of a few pointers. Beyond, a search first picks the leaf
// (a binary search over the leaves' last blocks), and a change moves at most one leaf's
// pointers; a leaf that fills splits, one that empties below a quarter joins or evens out with a
// neighbour. Side by side (bench/bench_free_index.cpp, a search, a removal and an insertion):
// 21 against 29 ns with 4 free blocks, 49 against 85 with 64, 161 against 172 with 1,024, 614
// against 598 with 65,536; replays of the 11 real traces spend 12-15 % less time per event in
// the allocator (geometric mean; 0.76 to 1.01 x per trace and policy), under every policy
// (README, "Traces and `cudacache-replay`").
//
// The key of a block must not change while it is in the index (as with any ordered
// container): BlockPool takes a block out before splitting, merging or unmapping it.
#pragma once

#include "segment.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

namespace cudacache {

class FreeIndex {
 public:
  // A place in BlockOrder.
  struct Key {
    std::uintptr_t stream = 0;
    std::size_t size = 0;
    std::uint64_t segment_order = 0;
    std::uintptr_t address = 0;
  };
  static Key key_of(const Block* block) {
    return {reinterpret_cast<std::uintptr_t>(block->stream), block->size, block->segment_order,
            block->address};
  }
  // The key that sorts before every block of `stream` of `size` bytes or more (segment order
  // and address 0 come before every real block's).
  static Key search_key(cudaStream_t stream, std::size_t size) {
    return {reinterpret_cast<std::uintptr_t>(stream), size, 0, 0};
  }
  // Whether `block` sorts before `key` (BlockOrder).
  static bool below(const Block* block, const Key& key) {
    const auto stream = reinterpret_cast<std::uintptr_t>(block->stream);
    if (stream != key.stream) return stream < key.stream;
    if (block->size != key.size) return block->size < key.size;
    if (block->segment_order != key.segment_order) return block->segment_order < key.segment_order;
    return block->address < key.address;
  }
  // Whether block `a` sorts before block `b` (BlockOrder): below() against a block, written out
  // because insertions and removals search with it (below(a, key_of(b)) rebuilt the key at each
  // step: about 14 instructions more per insertion on `qwen7b`).
  static bool before(const Block* a, const Block* b) {
    if (a->stream != b->stream) {
      return reinterpret_cast<std::uintptr_t>(a->stream) <
             reinterpret_cast<std::uintptr_t>(b->stream);
    }
    if (a->size != b->size) return a->size < b->size;
    if (a->segment_order != b->segment_order) return a->segment_order < b->segment_order;
    return a->address < b->address;
  }

  // A leaf is kLeafBytes, aligned to its size, so that a pointer into it finds it (an iterator
  // is one pointer). It holds up to kLeafCapacity blocks and a null after the last one (where an
  // iterator stepping past them learns that the leaf ends). A full leaf splits in two; one that
  // holds fewer than kLeafMinimum joins a neighbour, or takes blocks from it.
  static constexpr std::size_t kLeafBytes = 1024;
  // Four words of the leaf are not blocks: previous, next, count and the null.
  static constexpr std::size_t kLeafCapacity = kLeafBytes / sizeof(Block*) - 4;
  static constexpr std::size_t kLeafMinimum = kLeafCapacity / 4;
  // Up to how many blocks (in a sole leaf) a removal looks for its block one by one.
  static constexpr std::size_t kScannedForRemoval = 16;

 private:
  struct alignas(kLeafBytes) Leaf {
    Leaf* previous = nullptr;
    Leaf* next = nullptr;
    std::size_t count = 0;
    Block* blocks[kLeafCapacity + 1] = {};  // blocks[count] is null
    Block* last() const { return blocks[count - 1]; }
  };
  static_assert(sizeof(Leaf) == kLeafBytes);
  static Leaf* leaf_of(Block* const* entry) {
    return reinterpret_cast<Leaf*>(reinterpret_cast<std::uintptr_t>(entry) & ~(kLeafBytes - 1));
  }

 public:
  // A bidirectional iterator over the blocks in order: a pointer into a leaf. The end is the
  // last leaf's null. Insertions and removals invalidate every iterator (as with a vector).
  class Iterator {
   public:
    using iterator_category = std::bidirectional_iterator_tag;
    using value_type = Block*;
    using difference_type = std::ptrdiff_t;
    using pointer = Block* const*;
    using reference = Block*;

    Iterator() = default;
    Block* operator*() const { return *at_; }
    Iterator& operator++() {
      if (*++at_ == nullptr) {  // past the leaf's last block: the next leaf's first, if any
        const Leaf* next = leaf_of(at_)->next;
        if (next != nullptr) at_ = next->blocks;
      }
      return *this;
    }
    Iterator& operator--() {
      const Leaf* leaf = leaf_of(at_);
      if (at_ == leaf->blocks) at_ = leaf->previous->blocks + leaf->previous->count;
      --at_;
      return *this;
    }
    friend bool operator==(const Iterator& a, const Iterator& b) { return a.at_ == b.at_; }
    friend bool operator!=(const Iterator& a, const Iterator& b) { return a.at_ != b.at_; }

   private:
    friend class FreeIndex;
    explicit Iterator(Block* const* at) : at_(at) {}
    Block* const* at_ = nullptr;
  };

  FreeIndex() {
    leaves_.push_back(std::make_unique<Leaf>());
    last_ = leaves_.back().get();
  }
  FreeIndex(const FreeIndex&) = delete;
  FreeIndex& operator=(const FreeIndex&) = delete;

  // An empty index is one empty leaf: begin() is its null, the end.
  Iterator begin() const { return Iterator{leaves_.front()->blocks}; }
  Iterator end() const { return Iterator{last_->blocks + last_->count}; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // The first block whose key is not below `key`, or end().
  Iterator lower_bound(const Key& key) const { return first_not_below(key, KeyOrder{}); }
  // Adds `block` (not in the index).
  void insert(Block* block) {
    // Note [Insertion where the last removal was]: first the place of the last removal.
    if (Block** position = hinted_position(block))
      return insert_at(*leaf_of(position), position, block);
    // Into the leaf that holds its successor, or the last one when it sorts after every block.
    const std::size_t at =
        leaves_.size() == 1 ? 0 : std::min(leaf_for(block, Order{}), leaves_.size() - 1);
    Leaf& leaf = *leaves_[at];
    if (leaf.count == kLeafCapacity) return insert_splitting(at, block);
    insert_at(leaf, std::lower_bound(leaf.blocks, leaf.blocks + leaf.count, block, Order{}), block);
  }
  // Removes `block`; false (and nothing changes) when it is not in the index.
  bool erase(const Block* block) {
    // A few blocks in one leaf (the usual case, Note [Free index]): the block found by its
    // address, a loop whose branch goes the same way until the end, where a search by its key
    // takes an unpredictable branch at each step and compares four fields there.
    if (leaves_.size() == 1 && last_->count <= kScannedForRemoval) {
      for (Block** entry = last_->blocks; *entry != nullptr; ++entry) {
        if (*entry == block) {
          erase(Iterator{entry});
          return true;
        }
      }
      return false;
    }
    const Iterator found = first_not_below(block, Order{});
    if (found == end() || *found != block) return false;
    erase(found);
    return true;
  }
  // Whether the next `insertions` insertions allocate nothing: spare leaves for their splits,
  // and room for them among the leaves (Note [Host memory runs out] in device_allocator.h).
  // Any number of leaves may be full at once, each split by the next insertion into it, so
  // each leaf now in the index may split once; a split leaves two halves, so each further
  // split takes kLeafCapacity / 2 more insertions.
  std::size_t splits_for(std::size_t insertions) const {
    return std::min(insertions, leaves_.size()) + insertions / (kLeafCapacity / 2);
  }
  // Every spare leaf has its room among the leaves (capacity - size >= spares: a split takes
  // one of each, a leaf that goes gives back one of each), so the spares alone tell.
  bool host_memory_reserved(std::size_t insertions) const {
    return spare_leaves_.size() >= splits_for(insertions);
  }
  bool host_memory_reserved() const { return !spare_leaves_.empty(); }  // on every call
  // Allocates what host_memory_reserved(insertions) asks for; throws std::bad_alloc before any
  // change to the index.
  void reserve_host_memory(std::size_t insertions = 1);
  // Removes the block at `at` (not end()).
  void erase(Iterator at) {
    Leaf& leaf = *leaf_of(at.at_);
    Block** entry = leaf.blocks + (at.at_ - leaf.blocks);
    // A leaf about to hold too few is found while its block still orders it.
    const std::size_t index =
        leaf.count <= kLeafMinimum && leaves_.size() > 1 ? leaf_for(*entry, Order{}) : 0;
    std::copy(entry + 1, leaf.blocks + leaf.count + 1, entry);  // the null moves down too
    --leaf.count;
    --size_;
    hint_ = entry;
    if (leaf.count < kLeafMinimum && leaves_.size() > 1) shrunk(index);
  }

 private:
  // below() and before() as function objects, so that the searches inline them.
  struct KeyOrder {
    bool operator()(const Block* block, const Key& key) const { return below(block, key); }
  };
  struct Order {
    bool operator()(const Block* a, const Block* b) const { return before(a, b); }
  };
  // The first leaf whose last block is not below `value` (leaves_.size() if none); more than
  // one leaf.
  template <typename Value, typename Less>
  std::size_t leaf_for(const Value& value, Less less) const {
    const auto found = std::partition_point(
        leaves_.begin(), leaves_.end(),
        [&](const std::unique_ptr<Leaf>& leaf) { return less(leaf->last(), value); });
    return static_cast<std::size_t>(found - leaves_.begin());
  }
  // The first block not below `value`, or end(); with one leaf, one search in it. Past the
  // blocks of a leaf is its null, the end when it is the last leaf (the only one where a search
  // can go past them).
  template <typename Value, typename Less>
  Iterator first_not_below(const Value& value, Less less) const {
    const std::size_t at = leaves_.size() == 1 ? 0 : leaf_for(value, less);
    if (at == leaves_.size()) return end();
    const Leaf& leaf = *leaves_[at];
    return Iterator{std::lower_bound(leaf.blocks, leaf.blocks + leaf.count, value, less)};
  }
  // Puts `block` at `position` of `leaf` (not full), where it sorts.
  void insert_at(Leaf& leaf, Block** position, Block* block) {
    // The null after the last block moves up with them.
    std::copy_backward(position, leaf.blocks + leaf.count + 1, leaf.blocks + leaf.count + 2);
    *position = block;
    ++leaf.count;
    ++size_;
    hint_ = nullptr;
  }
  // Note [Insertion where the last removal was]: a split's remainder is inserted just after the
  // block it was cut from was taken out, and it sorts just below it (smaller, same stream); a
  // block freed beside a free one is inserted just after that one was taken out to merge, and
  // sorts at or just above it. So the place of the last removal, when it is still a place where
  // `block` sorts (the blocks on either side of it, within its leaf, are below and above it),
  // spares the insertion its search: two comparisons that nearly always go the same way, where
  // a binary search takes a branch per step that no predictor can learn. The place is forgotten
  // at every other change (an insertion, a leaf split, joined or evened out), so that it always
  // points into a leaf of this index. Null when there is none, or when `block` does not sort
  // there.
  Block** hinted_position(const Block* block) const {
    if (hint_ == nullptr) return nullptr;
    const Leaf& leaf = *leaf_of(hint_);
    const auto at = static_cast<std::size_t>(hint_ - leaf.blocks);
    // Not full: the leaf lost a block at the removal, and nothing was inserted since.
    // At either end of a leaf the neighbour lies in another leaf: only a sole leaf's ends are
    // taken (nothing lies beyond them).
    const bool sole = leaves_.size() == 1;
    if (at == 0 ? !sole : !before(leaf.blocks[at - 1], block)) return nullptr;
    if (at == leaf.count ? !sole : !before(block, leaf.blocks[at])) return nullptr;
    return hint_;
  }
  // The slow paths (free_index.cpp).
  void insert_splitting(std::size_t at, Block* block);
  void shrunk(std::size_t index);

  std::vector<std::unique_ptr<Leaf>> leaves_;  // in order; at least one; none empty but a sole one
  Leaf* last_ = nullptr;                       // leaves_.back(): where end() is
  std::vector<std::unique_ptr<Leaf>> spare_leaves_;  // for splits (reserve_host_memory)
  std::size_t size_ = 0;
  Block** hint_ = nullptr;  // where the last removal was, if nothing changed since
};

}  // namespace cudacache
