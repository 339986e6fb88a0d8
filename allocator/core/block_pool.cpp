#include "block_pool.h"

#include <algorithm>
#include <iterator>

namespace cudacache {

namespace {

std::size_t growable_size(const Block* block) {
  const Block* next = block->next;
  return block->size + (next != nullptr && !next->mapped ? next->size : 0);
}

}  // namespace

Block* BlockPool::smallest_fit(cudaStream_t stream, std::size_t size) const {
  const auto it = free_.lower_bound(FreeIndex::search_key(stream, size));
  return it != free_.end() && (*it)->stream == stream ? *it : nullptr;
}

Block* BlockPool::take_best_fit(cudaStream_t stream, std::size_t size, std::size_t max_split_size,
                                FitRule rule, Lifetime lifetime) {
  ++search_count_;
  auto it = free_.lower_bound(FreeIndex::search_key(stream, size));
  if (it == free_.end() || (*it)->stream != stream) return nullptr;
  // With no long-lived hole in the pool, a lifetime changes nothing: no scan for one.
  it = lifetime == Lifetime::kUnknown || long_lived_holes_ == 0
           ? rule_fit(it, stream, rule, false)
           : lifetime_fit(it, stream, size, max_split_size, rule, lifetime);
  if (it == free_.end() || !may_serve((*it)->size, size, max_split_size)) return nullptr;
  Block* block = *it;
  if (block->long_lived_hole) --long_lived_holes_;
  free_.erase(it);
  return block;
}

[[gnu::always_inline]] inline FreeIndex::Iterator BlockPool::candidate(FreeIndex::Iterator at,
                                                                       cudaStream_t stream,
                                                                       bool pass_holes) const {
  int steps = 0;
  auto of_stream = [&] { return at != free_.end() && (*at)->stream == stream; };
  while (pass_holes && of_stream() && (*at)->long_lived_hole && ++steps < kLifetimeScan) ++at;
  return of_stream() && !(pass_holes && (*at)->long_lived_hole) ? at : free_.end();
}

[[gnu::always_inline]] inline FreeIndex::Iterator BlockPool::rule_fit(FreeIndex::Iterator it,
                                                                      cudaStream_t stream,
                                                                      FitRule rule,
                                                                      bool pass_holes) const {
  while (rule == FitRule::kLeastGrowable) {
    const auto next = candidate(std::next(it), stream, pass_holes);
    if (next == free_.end() || growable_size(*next) >= growable_size(*it)) break;
    it = next;
  }
  return it;
}

FreeIndex::Iterator BlockPool::lifetime_fit(FreeIndex::Iterator smallest, cudaStream_t stream,
                                            std::size_t size, std::size_t max_split_size,
                                            FitRule rule, Lifetime lifetime) const {
  auto serves = [&](FreeIndex::Iterator at) {
    return may_serve((*at)->size, size, max_split_size);
  };
  if (lifetime == Lifetime::kLong) {
    int steps = 0;
    for (auto at = smallest; at != free_.end() && (*at)->stream == stream && steps < kLifetimeScan;
         ++at, ++steps) {
      if ((*at)->long_lived_hole && serves(at)) return at;
    }
  }
  if (lifetime != Lifetime::kShort) return rule_fit(smallest, stream, rule, false);
  // A short-lived request passes over long-lived holes while `rule` finds another block.
  const auto first = candidate(smallest, stream, true);
  const auto it = rule_fit(first != free_.end() ? first : smallest, stream, rule, true);
  if (serves(it)) return it;
  return rule_fit(smallest, stream, rule, false);  // not to be split here: without lifetimes
}

BlockPool::~BlockPool() {
  for (Block* block : spare_) delete block;
}

Block* BlockPool::new_block() {
  if (spare_.empty()) {
    Block* block = new Block;
    ++blocks_made_;
    return block;
  }
  Block* block = spare_.back();
  spare_.pop_back();
  *block = Block{};
  return block;
}

void BlockPool::recycle(Block* block) {
  if (spare_.size() == spare_.capacity()) {  // growing the spares could throw
    delete block;
    // The count only sizes the spares' room; a block another pool made may end here, so it
    // stops at zero.
    if (blocks_made_ != 0) --blocks_made_;
    return;
  }
  spare_.push_back(block);
}

void BlockPool::reserve_host_memory_now(std::size_t insertions) {
  // Room for every block this pool has made and the new spares, so that recycle() keeps each
  // block it is given (a pool whose blocks come and go in bursts, a growth splitting a range
  // around its pages and a free merging them back, would otherwise delete and make them anew).
  const std::size_t room = blocks_made_ + kSpareBlocks;
  if (spare_.capacity() < room) spare_.reserve(std::max(2 * spare_.capacity(), room));
  while (spare_.size() < kSpareBlocks) {  // capacity reserved above
    spare_.push_back(new Block);
    ++blocks_made_;
  }
  spare_unmapped_nodes_.reserve(2 * kSpareUnmappedNodes);
  while (spare_unmapped_nodes_.size() < kSpareUnmappedNodes) {
    // A node of the unmapped index's own type, made in a scratch index: its only element needs
    // no comparison, so a null Block* is fine.
    UnmappedIndex scratch;
    scratch.insert(nullptr);
    spare_unmapped_nodes_.push_back(scratch.extract(scratch.begin()));  // capacity reserved
  }
  free_.reserve_host_memory(insertions);
}

void BlockPool::insert_unmapped(Block* block) {
  if (spare_unmapped_nodes_.empty()) {
    unmapped_.insert(block);
    return;
  }
  UnmappedIndex::node_type node = std::move(spare_unmapped_nodes_.back());
  spare_unmapped_nodes_.pop_back();
  node.value() = block;
  unmapped_.insert(std::move(node));
}

void BlockPool::insert(Block* block) {
  if (!block->mapped) {
    insert_unmapped(block);
    return;
  }
  if (block->long_lived_hole) ++long_lived_holes_;
  free_.insert(block);
}

void BlockPool::erase(Block* block) {
  if (!block->mapped) {
    const auto at = unmapped_.find(block);
    if (at == unmapped_.end()) return;
    UnmappedIndex::node_type node = unmapped_.extract(at);
    // Kept for the next insertion while there is room (pushing must not allocate).
    if (spare_unmapped_nodes_.size() < spare_unmapped_nodes_.capacity()) {
      spare_unmapped_nodes_.push_back(std::move(node));
    }
    return;
  }
  if (free_.erase(block) && block->long_lived_hole) --long_lived_holes_;
}

void BlockPool::replace_unmapped(Block* block, Block* with) {
  auto at = unmapped_.find(block);
  if (at == unmapped_.end()) {
    insert_unmapped(with);
    return;
  }
  const auto hint = std::next(at);
  auto node = unmapped_.extract(at);
  node.value() = with;
  unmapped_.insert(hint, std::move(node));
}

std::size_t BlockPool::largest_free_block() const {
  // The last block of each stream is that stream's largest: one search per stream.
  std::size_t largest = 0;
  for (auto it = free_.end(); it != free_.begin();) {
    --it;
    largest = std::max(largest, (*it)->size);
    it = free_.lower_bound(FreeIndex::search_key((*it)->stream, 0));
  }
  return largest;
}

Block* split_block(Block* block, std::size_t size, BlockPool& pool) {
  Block* remainder = pool.new_block();
  remainder->address = block->address + size;
  remainder->size = block->size - size;
  remainder->stream = block->stream;
  remainder->segment = block->segment;
  remainder->segment_order = block->segment_order;
  remainder->mapped = block->mapped;
  remainder->long_lived_hole = block->long_lived_hole;
  remainder->prev = block;
  remainder->next = block->next;
  if (remainder->next != nullptr) remainder->next->prev = remainder;
  block->next = remainder;
  block->size = size;
  return remainder;
}

std::size_t try_merge(Block* dst, Block* src, BlockPool& pool) {
  if (!allocatable(src) || src->mapped != dst->mapped) return 0;
  if (dst->prev == src) {  // [src dst]
    dst->address = src->address;
    dst->prev = src->prev;
    if (dst->prev != nullptr) {
      dst->prev->next = dst;
    } else {
      dst->segment->head = dst;
    }
  } else {  // [dst src]
    dst->next = src->next;
    if (dst->next != nullptr) dst->next->prev = dst;
  }
  dst->long_lived_hole = dst->long_lived_hole && src->long_lived_hole;
  const std::size_t absorbed = src->size;
  dst->size += absorbed;
  pool.erase(src);
  pool.recycle(src);
  return absorbed;
}

}  // namespace cudacache
