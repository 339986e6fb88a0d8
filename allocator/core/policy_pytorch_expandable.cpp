// PyTorch's expandable segments (policy:pytorch,expandable_segments:True), and the page
// machinery cudacache's own policy (policy_cudacache.cpp) shares. The page rules are in
// expandable_segment.h (Note [Expandable segments]); this file keeps the blocks, the pools and
// the statistics in step with them, as PyTorch does:
// - One virtual range per (stream, pool), 1 1/8 x the device's memory. An allocation that no
//   free block serves takes the lowest-addressed unmapped stretch of its (stream, pool) whose
//   free neighbour before it plus itself (and what follows) is large enough, and maps just
//   enough pages (2 MiB in the small pool, 20 MiB in the large); it is served from the start
//   of the merged block. Only when no stretch is large enough is a new range reserved.
// - Fit (FitRule::kLeastGrowable): best fit, but among blocks large enough those that cannot
//   grow first, so the block at the growing end of a range is kept for requests nothing else
//   serves. Any remainder of 512 B or more is split off.
// - empty_cache and the ladder's release step unmap the whole pages of every free block; a
//   range with nothing mapped is returned.
// - reserved_bytes counts mapped bytes; each map is one num_device_alloc and one segment_map
//   history entry, each unmap one num_device_free and one segment_unmap. The segment count
//   does not change (a range is not a segment of memory), nor do the inactive_split counters.
#include "device_allocator.h"

#include "device_api.h"
#include "error_report.h"
#include "log.h"
#include "scoped_flag.h"

#include <algorithm>
#include <memory>

namespace cudacache {
namespace {

std::int64_t as_signed(std::size_t value) { return static_cast<std::int64_t>(value); }

}  // namespace

Block* DeviceAllocator::allocate_expandable(Request& request) {
  Block* candidate = find_expandable_block(request);
  if (candidate == nullptr) return nullptr;
  // Note [Blocks under a granule]; reset also when the growth throws.
  const ScopedFlag under_granule(growth_under_granule_,
                                 request.pool == &small_pool_ && request.size > kSmallSize);
  if (policy_ == PlacementPolicy::kCudacache) gather_pages(candidate, request.size);
  // Pages moved for this request and not mapped stay in moved_pages_ for the next step of the
  // out-of-memory ladder; find_or_create_block releases what is left.
  Block* found = map_chain(candidate, request.size);
  if (found == nullptr) return nullptr;
  return fit_own_pages(found, request);  // the growth may have merged with a free block after it
}

Block* DeviceAllocator::map_chain(Block* candidate, std::size_t size) {
  BlockPool& pool = pool_of(*candidate);
  // The mapping that completes the chain leaves its block out of the pool.
  bool out_of_pool = false;
  if (!candidate->mapped) {
    out_of_pool = candidate->size >= size;
    if (!map_block(candidate, std::min(candidate->size, size), out_of_pool)) return nullptr;
  }
  while (candidate->size < size) {
    if (out_of_pool) {
      // Not reached (a complete last mapping ends the chain); kept so that a failure below
      // never leaves a free block out of its pool.
      pool.insert(candidate);
      out_of_pool = false;
    }
    Block* next = candidate->next;  // unmapped: has_space() walked through it
    const bool last = candidate->size + next->size >= size;
    if (!map_block(next, std::min(size - candidate->size, next->size), last)) return nullptr;
    candidate = next;  // it absorbed the old candidate
    out_of_pool = last;
  }
  if (!out_of_pool) pool.erase(candidate);
  return candidate;
}

Block* DeviceAllocator::find_expandable_block(Request& request) {
  Block* found = nullptr;
  if (policy_ == PlacementPolicy::kCudacache) {
    found = most_free_growth_site(request);
  } else {
    // PyTorch: the lowest address with space.
    request.pool->for_each_unmapped(request.stream, [&](Block* stretch) {
      Block* candidate = allocatable(stretch->prev) ? stretch->prev : stretch;  // a free tail
      if (has_space(candidate, request.size)) found = candidate;
      return found == nullptr;
    });
  }
  return found != nullptr ? found : reserve_range(request);
}

cudaError_t DeviceAllocator::read_device_memory() {
  if (device_total_bytes_ != 0) return cudaSuccess;
  const cudaError_t error = device_api::total_memory(device_, &device_total_bytes_);
  if (error != cudaSuccess) device_total_bytes_ = 0;
  return error;
}

Block* DeviceAllocator::reserve_range(Request& request) {
  BlockPool& pool = *request.pool;
  // A new range for this (stream, pool): 1 1/8 x the device's memory, in whole pages, and never
  // smaller than the request (the device may have grown since its memory was read; a request
  // larger than the range then ran past its end: found by fuzz_allocator_ops). The size is read
  // once, from the device's properties, as PyTorch does.
  if (const cudaError_t error = read_device_memory(); error != cudaSuccess) {
    report::cuda_error("cudaGetDeviceProperties", device_, error);
  }
  const std::size_t total_bytes = device_total_bytes_;
  const std::size_t page = pool.kind() == PoolKind::kSmall || policy_ == PlacementPolicy::kCudacache
                               ? kSmallPage
                               : kLargePage;
  // Saturating: a simulated device near 2^64 bytes would wrap 9/8 of itself.
  const std::size_t eighths = total_bytes / 8;
  const std::size_t reserved =
      eighths > (SIZE_MAX - page) / kReservedEighths ? SIZE_MAX - page : eighths * kReservedEighths;
  const std::size_t pages =
      std::max<std::size_t>({1, (reserved + page - 1) / page, (request.size + page - 1) / page});
  // Host memory before the addresses (Note [Host memory runs out] in device_allocator.h): what
  // throws after the reservation gives it back (the range's destructor).
  pool.reserve_host_memory_for_pages();
  auto owned_segment = std::make_unique<Segment>();
  cudaError_t error = cudaSuccess;
  auto range = ExpandableSegment::reserve(*backend_, page, pages, request.stream, &error);
  if (range == nullptr && error == cudaErrorMemoryAllocation) {
    // Address space, not device memory, ran out (each (stream, pool) holds 9/8 of the device):
    // the out-of-memory report says so.
    request.address_range_refused = page * pages;
    return nullptr;
  }
  if (range == nullptr) report::cuda_error("cuMemAddressReserve", device_, error);
  request.address_range_refused = 0;                      // a retry of the ladder got it
  segments_.emplace(range->base(), owned_segment.get());  // a throw frees `range` and the segment

  Segment* segment = owned_segment.release();
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
  pool.insert(block);
  logger().trace("device {}: expandable range of {} bytes at {:#x}", device_, segment->size,
                 segment->base);
  return block;
}

bool DeviceAllocator::map_block(Block* block, std::size_t size, bool keep_out_of_pool) {
  BlockPool& pool = pool_of(*block);
  pool.reserve_host_memory_for_pages();  // before the pages: nothing below allocates
  ExpandableSegment& range = *block->segment->expandable;
  AddressRange mapped;
  bool complete = true;
  if (policy_ == PlacementPolicy::kCudacache) {
    if (!map_gathered_pages(block, size, &mapped, &complete)) return false;
  } else {
    const cudaError_t error = range.map(block->address, size, &mapped);
    if (error == cudaErrorMemoryAllocation) return false;
    if (error != cudaSuccess) report::cuda_error("mapping pages", device_, error);
  }
  block->long_lived_hole = false;   // new memory (merged below with what is next to it)
  if (mapped.size < block->size) {  // the rest stays unmapped, after the block, in its place
    Block* rest = split_block(block, mapped.size, pool);
    pool.replace_unmapped(block, rest);
  } else {
    pool.erase(block);
  }
  block->mapped = true;
  for (Block* neighbour : {block->prev, block->next}) try_merge(block, neighbour, pool);
  block->gc_count_base = pool.search_count();
  if (!keep_out_of_pool || !complete) pool.insert(block);

  MemoryStats& stats = stats_.values();
  reserved_total_ += mapped.size;
  DeviceStats::increase(stats.reserved_bytes, pool.kind(), as_signed(mapped.size));
  stats.num_device_alloc += 1;
  record_event(HistoryAction::kSegmentMap, mapped.address, mapped.size, 0, 0, block->stream);
  return complete;
}

Block* DeviceAllocator::unmap_block(Block* block, std::vector<Page>* kept) {
  return unmap_block(block, block->address, block->size, kept);
}

Block* DeviceAllocator::unmap_block(Block* block, std::uintptr_t address, std::size_t size,
                                    std::vector<Page>* kept, bool stream_synchronized) {
  BlockPool& pool = pool_of(*block);
  pool.reserve_host_memory_for_pages();  // before the unmap: nothing below allocates
  AddressRange unmapped;
  const cudaError_t error =
      block->segment->expandable->unmap(address, size, &unmapped, kept, stream_synchronized);
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
  record_event(HistoryAction::kSegmentUnmap, unmapped.address, unmapped.size, 0, 0, block->stream);
  return block;
}

void DeviceAllocator::release_free_pages(std::vector<Page>* kept) {
  for (BlockPool* pool : {&large_pool_, &small_pool_}) {
    std::vector<Block*> victims;
    pool->for_each_free([&](Block* block) { victims.push_back(block); });
    for (Block* block : victims) {
      Block* unmapped = unmap_block(block, kept);
      if (unmapped != nullptr && !unmapped->is_split()) release_expandable_segment(unmapped);
    }
  }
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
