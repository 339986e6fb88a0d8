#include "free_index.h"

#include <algorithm>
#include <utility>

namespace cudacache {

void FreeIndex::reserve_host_memory(std::size_t insertions) {
  const std::size_t splits = std::max(splits_for(insertions), spare_leaves_.size());
  // Room among the leaves for every spare first (host_memory_reserved's invariant).
  if (leaves_.capacity() - leaves_.size() < splits) {
    leaves_.reserve(std::max(2 * leaves_.capacity(), leaves_.size() + splits));
  }
  if (spare_leaves_.capacity() < splits) spare_leaves_.reserve(2 * splits);
  while (spare_leaves_.size() < splits) spare_leaves_.push_back(std::make_unique<Leaf>());
}

void FreeIndex::insert_splitting(std::size_t at, Block* block) {
  // The full leaf's upper half moves to a new leaf after it; the block goes into either half.
  // What this allocates comes first, before any block moves: a failure changes nothing. With
  // reserve_host_memory() called, nothing does.
  hint_ = nullptr;
  if (leaves_.capacity() == leaves_.size()) leaves_.reserve(2 * leaves_.size());
  std::unique_ptr<Leaf> upper;
  if (spare_leaves_.empty()) {
    upper = std::make_unique<Leaf>();
  } else {
    upper = std::move(spare_leaves_.back());
    spare_leaves_.pop_back();
    *upper = Leaf{};
  }
  Leaf& lower = *leaves_[at];
  const std::size_t kept = lower.count / 2;
  std::copy(lower.blocks + kept, lower.blocks + lower.count + 1, upper->blocks);  // with the null
  upper->count = lower.count - kept;
  lower.count = kept;
  lower.blocks[kept] = nullptr;
  upper->previous = &lower;
  upper->next = lower.next;
  if (upper->next != nullptr) upper->next->previous = upper.get();
  lower.next = upper.get();
  leaves_.insert(leaves_.begin() + static_cast<std::ptrdiff_t>(at) + 1, std::move(upper));
  last_ = leaves_.back().get();
  // Neither half is full now: the insertion takes the fast path.
  insert(block);
}

void FreeIndex::shrunk(std::size_t index) {
  // Leaf `index` (one of several) holds fewer than kLeafMinimum blocks. Empty, it goes; else it
  // joins a neighbour if the two fit in one leaf, or takes blocks from it until the two hold
  // about as many: either way no leaf stays this small, so that the leaves number at most about
  // size() / kLeafMinimum and a search over them stays short.
  hint_ = nullptr;
  const auto unlink = [this](std::size_t gone) {
    Leaf& leaf = *leaves_[gone];
    if (leaf.previous != nullptr) leaf.previous->next = leaf.next;
    if (leaf.next != nullptr) leaf.next->previous = leaf.previous;
    // Kept for a split, if room: its slot among the leaves is freed just below, which keeps
    // host_memory_reserved's invariant.
    if (spare_leaves_.size() < spare_leaves_.capacity()) {
      spare_leaves_.push_back(std::move(leaves_[gone]));
    }
    leaves_.erase(leaves_.begin() + static_cast<std::ptrdiff_t>(gone));
    last_ = leaves_.back().get();
  };
  if (leaves_[index]->count == 0) return unlink(index);
  const std::size_t left = index + 1 < leaves_.size() ? index : index - 1;
  Leaf& a = *leaves_[left];
  Leaf& b = *leaves_[left + 1];
  if (a.count + b.count <= kLeafCapacity) {
    std::copy(b.blocks, b.blocks + b.count + 1, a.blocks + a.count);  // with the null
    a.count += b.count;
    return unlink(left + 1);
  }
  const std::size_t half = (a.count + b.count) / 2;
  if (a.count < half) {  // b's first blocks move to a's end
    const std::size_t moved = half - a.count;
    std::copy(b.blocks, b.blocks + moved, a.blocks + a.count);
    std::copy(b.blocks + moved, b.blocks + b.count + 1, b.blocks);
    a.count += moved;
    b.count -= moved;
    a.blocks[a.count] = nullptr;
  } else {  // a's last blocks move to b's front
    const std::size_t moved = a.count - half;
    std::copy_backward(b.blocks, b.blocks + b.count + 1, b.blocks + b.count + 1 + moved);
    std::copy(a.blocks + half, a.blocks + a.count, b.blocks);
    a.count -= moved;
    b.count += moved;
    a.blocks[a.count] = nullptr;
  }
}

}  // namespace cudacache
