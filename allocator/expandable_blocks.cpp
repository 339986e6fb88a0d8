// DeviceAllocator with expandable segments: finding address space, mapping pages under free
// blocks, unmapping the whole pages of free blocks. The page rules are in expandable_segment.h
// (Note [Expandable segments]); this file keeps the blocks, the pools and the statistics in
// step with them, as PyTorch does:
// - An allocation that no free block serves takes the lowest-addressed unmapped stretch of its
//   (stream, pool) whose free neighbour before it plus itself (and what follows) is large
//   enough, and maps just enough pages; it is served from the start of the merged block. Only
//   when no stretch is large enough is a new range reserved.
// - reserved_bytes counts mapped bytes; each map is one num_device_alloc and one segment_map
//   history entry, each unmap one num_device_free and one segment_unmap. The segment count
//   does not change (a range is not a segment of memory), nor do the inactive_split counters.
#include "device_allocator.h"

#include "device_api.h"
#include "log.h"

#include <algorithm>

namespace cudacache {
namespace {

std::int64_t as_signed(std::size_t value) { return static_cast<std::int64_t>(value); }

// Free for reuse: not allocated and no stream work pending on it.
bool allocatable(const Block* block) {
  return block != nullptr && !block->allocated && block->pending_events == 0 &&
         block->stream_uses.empty();
}

// Whether `size` bytes fit from `block` on through allocatable neighbours, mapped or not.
bool has_space(const Block* block, std::size_t size) {
  std::size_t bytes = 0;
  for (; bytes < size && allocatable(block); block = block->next) bytes += block->size;
  return bytes >= size;
}

[[noreturn]] void fail_device_call(int device, const char* what, cudaError_t error) {
  const std::string message = std::string("cudacache: ") + what + " on device " +
                              std::to_string(device) + " failed: " +
                              device_api::error_string(error);
  logger().error("{}", message);
  throw Error(CUDACACHE_CUDA_ERROR, message);
}

}  // namespace

Block* DeviceAllocator::allocate_expandable(const Request& request) {
  Block* candidate = find_expandable_block(request);
  if (candidate == nullptr) return nullptr;
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, request.size))) {
    return nullptr;
  }
  while (candidate->size < request.size) {
    Block* next = candidate->next;  // unmapped: has_space() walked through it
    if (!map_block(next, std::min(request.size - candidate->size, next->size))) return nullptr;
    candidate = next;  // it absorbed the old candidate
  }
  request.pool->erase(candidate);
  return candidate;
}

Block* DeviceAllocator::find_expandable_block(const Request& request) {
  BlockPool& pool = *request.pool;
  const auto& unmapped = pool.unmapped_blocks();
  Block key;
  key.stream = request.stream;
  for (auto it = unmapped.lower_bound(&key); it != unmapped.end(); ++it) {
    Block* candidate = *it;
    if (candidate->stream != request.stream) break;
    if (allocatable(candidate->prev)) candidate = candidate->prev;  // a free tail to extend
    if (has_space(candidate, request.size)) return candidate;
  }
  // A new range for this (stream, pool): 1 1/8 x the device's memory, in whole pages.
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (const cudaError_t error = device_api::memory_info(device_, &free_bytes, &total_bytes);
      error != cudaSuccess) {
    fail_device_call(device_, "cudaMemGetInfo", error);
  }
  const std::size_t page = pool.kind() == PoolKind::kSmall ? kSmallPage : kLargePage;
  const std::size_t pages =
      std::max<std::size_t>(1, (total_bytes / 8 * kReservedEighths + page - 1) / page);
  cudaError_t error = cudaSuccess;
  auto range = ExpandableSegment::reserve(*backend_, page, pages, request.stream, &error);
  if (range == nullptr && error == cudaErrorMemoryAllocation) return nullptr;
  if (range == nullptr) fail_device_call(device_, "cuMemAddressReserve", error);

  auto* segment = new Segment;
  segment->base = range->base();
  segment->size = range->size();
  segment->stream = request.stream;
  segment->pool = pool.kind();
  segment->expandable = std::move(range);
  Block* block = pool.new_block();
  block->address = segment->base;
  block->size = segment->size;
  block->stream = request.stream;
  block->segment = segment;
  block->segment_order = ++segments_created_;
  block->mapped = false;
  segment->head = block;
  segments_.emplace(segment->base, segment);
  pool.insert(block);
  logger().trace("device {}: expandable range of {} bytes at {:#x}", device_, segment->size,
                 segment->base);
  return block;
}

bool DeviceAllocator::map_block(Block* block, std::size_t size) {
  BlockPool& pool = pool_of(*block);
  AddressRange mapped;
  const cudaError_t error = block->segment->expandable->map(block->address, size, &mapped);
  if (error == cudaErrorMemoryAllocation) return false;
  if (error != cudaSuccess) fail_device_call(device_, "mapping pages", error);
  pool.erase(block);
  block->mapped = true;
  if (mapped.size < block->size) {  // the rest stays unmapped, after the block
    Block* rest = split_block(block, mapped.size, pool);
    rest->mapped = false;
    pool.insert(rest);
  }
  for (Block* neighbour : {block->prev, block->next}) try_merge(block, neighbour, pool);
  block->gc_count_base = pool.search_count();
  pool.insert(block);

  MemoryStats& stats = stats_.values();
  reserved_total_ += mapped.size;
  DeviceStats::increase(stats.reserved_bytes, pool.kind(), as_signed(mapped.size));
  stats.num_device_alloc += 1;
  record_event(HistoryAction::kSegmentMap, mapped.address, mapped.size, 0, 0, block->stream);
  return true;
}

Block* DeviceAllocator::unmap_block(Block* block) {
  BlockPool& pool = pool_of(*block);
  AddressRange unmapped;
  const cudaError_t error =
      block->segment->expandable->unmap(block->address, block->size, &unmapped);
  if (error != cudaSuccess) {
    logger().error("device {}: unmapping pages at {:#x} failed: {}", device_, block->address,
                   device_api::error_string(error));
  }
  if (unmapped.size == 0) return nullptr;
  pool.erase(block);
  // The partial pages before and after stay mapped, as free blocks.
  if (const std::size_t before = unmapped.address - block->address; before > 0) {
    Block* rest = split_block(block, before, pool);  // block keeps the part before
    rest->gc_count_base = block->gc_count_base;
    pool.insert(block);
    block = rest;
  }
  if (unmapped.size < block->size) {
    Block* after = split_block(block, unmapped.size, pool);
    after->gc_count_base = block->gc_count_base;
    pool.insert(after);
  }
  block->mapped = false;
  for (Block* neighbour : {block->prev, block->next}) try_merge(block, neighbour, pool);
  pool.insert(block);

  MemoryStats& stats = stats_.values();
  reserved_total_ -= unmapped.size;
  DeviceStats::decrease(stats.reserved_bytes, pool.kind(), as_signed(unmapped.size));
  stats.num_device_free += 1;
  record_event(HistoryAction::kSegmentUnmap, unmapped.address, unmapped.size, 0, 0,
               block->stream);
  return block;
}

void DeviceAllocator::release_expandable_segment(Block* block) {
  Segment* segment = block->segment;
  BlockPool& pool = pool_of(*block);
  pool.erase(block);
  logger().trace("device {}: released expandable range at {:#x}", device_, segment->base);
  segments_.erase(segment->base);
  delete segment;  // returns the address range
  pool.recycle(block);
}

}  // namespace cudacache
