// PyTorch's native policy (policy:pytorch): PyTorch's CUDACachingAllocator, exactly. Each
// cudaMalloc is a segment; segments are returned whole. The composer (device_allocator.cpp)
// runs the ladder and keeps blocks and stats; this file decides where memory comes from and
// what goes back. Constants in size_policy.h.
//
// - Rounding: a request rounds up to 512 B, or to the next 1/N power-of-two step with
//   roundup_power2_divisions. Size 0 returns nullptr.
// - Pools: rounded sizes <= 1 MiB use the small pool, carved from 2 MiB segments. Larger ones
//   use the large pool: a new segment is 20 MiB below 10 MiB, else the size rounded to 2 MiB.
// - Fit (FitRule::kSmallest): best fit on the request's stream, free blocks ordered by
//   (stream, size, segment order, address): among equal sizes the oldest segment's block wins
//   (PyTorch's allocation-order counter, block_pool.h), then the lowest address within it.
//   A block belongs to its allocation stream for life. Oversize blocks (>= max_split_size)
//   never serve requests below max_split_size nor requests 20 MiB or more smaller.
// - Split: small pool when the remainder is >= 512 B; large pool when the remainder is
//   > 1 MiB and the request is below max_split_size. Merge: a freed block absorbs free
//   neighbours of its segment (not allocated, no pending events).
// - Ladder steps of this policy: [garbage collection if garbage_collection_threshold and
//   per_process_memory_fraction are set] -> cudaMalloc -> release cached oversize blocks,
//   cudaMalloc -> release every fully free segment, cudaMalloc.
// - empty_cache returns every fully free segment.
#include "device_allocator.h"

#include "device_api.h"
#include "error_report.h"
#include "log.h"
#include "size_policy.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace cudacache {
namespace {

std::int64_t as_signed(std::size_t value) { return static_cast<std::int64_t>(value); }

}  // namespace

Block* DeviceAllocator::allocate_segment(Request& request) {
  MemoryStats& stats = stats_.values();
  const std::size_t bytes = segment_size(request.size);
  // Host memory before the device's (Note [Host memory runs out] in device_allocator.h): a
  // std::bad_alloc comes before cudaMalloc, or gives its memory back.
  auto owned_segment = std::make_unique<Segment>();
  Block* block = request.pool->new_block();
  std::uintptr_t base = 0;
  const cudaError_t error = backend_->allocate(bytes, &base);
  if (error != cudaSuccess) {
    request.pool->recycle(block);
    if (error == cudaErrorMemoryAllocation) return nullptr;
    report::cuda_error("cudaMalloc of " + std::to_string(bytes) + " bytes", device_, error);
  }
  try {
    segments_.emplace(base, owned_segment.get());
  } catch (...) {
    backend_->release(base, bytes);
    request.pool->recycle(block);
    throw;
  }
  Segment* segment = owned_segment.release();
  segment->base = base;
  segment->size = bytes;
  segment->stream = request.stream;
  segment->pool = request.pool->kind();
  block->address = base;
  block->size = bytes;
  block->stream = request.stream;
  block->segment = segment;
  block->segment_order = ++segments_created_;
  segment->head = block;

  reserved_total_ += bytes;
  DeviceStats::increase(stats.segment, segment->pool, 1);
  DeviceStats::increase(stats.reserved_bytes, segment->pool, as_signed(bytes));
  if (bytes >= options_.max_split_size()) DeviceStats::increase(stats.oversize_segments, 1);
  stats.num_device_alloc += 1;
  record_event(HistoryAction::kSegmentAlloc, base, bytes, 0, 0, request.stream);
  logger().trace("device {}: segment of {} bytes at {:#x}", device_, bytes, base);
  return block;
}

void DeviceAllocator::release_segment(Block* block) {
  Segment* segment = block->segment;
  BlockPool& pool = pool_of(*block);
  pool.erase(block);
  const cudaError_t error = backend_->release(segment->base, segment->size);
  if (error != cudaSuccess) {
    logger().error("device {}: cudaFree of segment {:#x} failed: {}", device_, segment->base,
                   device_api::error_string(error));
  }
  MemoryStats& stats = stats_.values();
  reserved_total_ -= segment->size;
  DeviceStats::decrease(stats.segment, segment->pool, 1);
  DeviceStats::decrease(stats.reserved_bytes, segment->pool, as_signed(segment->size));
  if (segment->size >= options_.max_split_size()) DeviceStats::decrease(stats.oversize_segments, 1);
  stats.num_device_free += 1;
  record_event(HistoryAction::kSegmentFree, segment->base, segment->size, 0, 0, segment->stream);
  logger().trace("device {}: released segment of {} bytes at {:#x}", device_, segment->size,
                 segment->base);
  segments_.erase(segment->base);
  delete segment;
  pool.recycle(block);
}

bool DeviceAllocator::release_oversize_blocks(const Request& request) {
  const std::size_t max_split = options_.max_split_size();
  if (max_split == SplitSizeLimit::kUnlimited) return false;
  BlockPool& pool = *request.pool;
  const std::size_t wanted = std::max(request.size, max_split);
  if (Block* fit = pool.smallest_fit(request.stream, wanted); fit != nullptr && !fit->is_split()) {
    release_segment(fit);
    return true;
  }
  // No single block is large enough: release oversize blocks from the largest down.
  std::vector<Block*> victims;
  std::size_t total = 0;
  pool.for_each_smaller(request.stream, wanted, [&](Block* block) {
    if (total >= wanted || block->size < max_split) return false;
    if (!block->is_split()) {
      victims.push_back(block);
      total += block->size;
    }
    return true;
  });
  for (Block* block : victims) release_segment(block);
  return total >= wanted;
}

void DeviceAllocator::release_free_segments() {
  for (BlockPool* pool : {&large_pool_, &small_pool_}) {
    std::vector<Block*> victims;
    pool->for_each_free([&](Block* block) {
      if (!block->is_split()) victims.push_back(block);
    });
    for (Block* block : victims) release_segment(block);
  }
}

void DeviceAllocator::garbage_collect() {
  // PyTorch's garbage collector: once reserved memory exceeds threshold x allowed maximum,
  // release unsplit free large blocks older than the average age, repeating until enough is
  // reclaimed. Age = free-index searches since the block became free.
  const auto threshold = static_cast<std::size_t>(options_.garbage_collection_threshold.value *
                                                  static_cast<double>(allowed_maximum_));
  if (reserved_total_ <= threshold) return;
  const std::size_t target = reserved_total_ - threshold;
  const std::uint64_t now = large_pool_.search_count();
  auto age = [now](const Block* block) { return now - block->gc_count_base; };
  std::uint64_t total_age = 0;
  std::size_t candidates = 0;
  large_pool_.for_each_free([&](const Block* block) {
    if (!block->is_split()) {
      total_age += age(block);
      ++candidates;
    }
  });
  std::size_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && candidates > 0) {
    const double average_age = static_cast<double>(total_age) / static_cast<double>(candidates);
    freed = false;
    std::vector<Block*> victims;
    large_pool_.for_each_free([&](Block* block) {
      if (!block->is_split() && static_cast<double>(age(block)) >= average_age) {
        victims.push_back(block);
      }
    });
    for (Block* block : victims) {
      freed = true;
      reclaimed += block->size;
      total_age -= age(block);
      --candidates;
      release_segment(block);
    }
  }
}

}  // namespace cudacache
