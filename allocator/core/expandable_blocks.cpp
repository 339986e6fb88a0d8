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
//
// Note [Moving pages]: cudacache's policy (policy:cudacache) keeps PyTorch's ranges and best
// fit but differs in where pages come from and where a range grows. A page is physical memory
// that outlives its mapping: whole free pages elsewhere (any stream's range, any pool) can be
// unmapped and mapped again where memory is needed, with no cuMemRelease/cuMemCreate and no
// data moved (an unmap and a map: about 27 us published, against 193 us for a create).
// - While the device has room (a growth leaves kRoomFree32nds/32 of it free), pages are created
//   20 MiB at a time in the large pool, as PyTorch does, so a growing program makes no more
//   device calls than PyTorch; pages are moved only when creating would hold more than
//   kHeldPerMille of the most the program ever had in use, and only pages at least as large
//   as one that would be created and no larger than what is missing (a move must save a
//   create, and free memory left behind where a page lands is memory held twice).
// - Without room, pages are 2 MiB (each can be moved again alone), and every free page that
//   helps is moved before anything is created. When that is not enough, the out-of-memory
//   ladder waits for pending frees and unmaps every whole free page as PyTorch does, but
//   keeps the 2 MiB ones for the request instead of releasing them and creating new ones.
// - A move synchronizes each stream the pages leave once, not once per page.
// - A range grows where the fewest new bytes are needed (the largest free block to extend),
//   not at the lowest address, so that a stretch left by moved pages is not filled with new
//   pages while free memory waits elsewhere.
// So memory a program no longer uses goes where it is needed instead of being held, and a
// steady loop, which finds its blocks free, makes no device call after its first step.
#include "device_allocator.h"

#include "device_api.h"
#include "error_report.h"
#include "log.h"

#include <algorithm>

namespace cudacache {
namespace {

std::int64_t as_signed(std::size_t value) { return static_cast<std::int64_t>(value); }

// See Note [Moving pages]. The device has room while a growth leaves at least
// kRoomFree32nds / 32 of it free (of the per_process_memory_fraction cap, if lower). Large
// pages made while there is room can later hold free memory that cannot move (a page shared
// with allocated blocks), so the room ends early: a program filling the device then has at most
// 5/32 of it in large pages.
constexpr std::size_t kRoomFree32nds = 27;
// With room, pages are created while that keeps what is held within 1.08 x the most the
// program ever used at once (peak active bytes); beyond it they are moved.
constexpr std::size_t kHeldPerMille = 1080;

// Pages created while the device has room are PyTorch's (20 MiB in the large pool, so that a
// growing range needs as few device calls as PyTorch's); without room, 2 MiB pages, which
// can be moved again one by one.
std::size_t growth_page(PoolKind pool, bool room) {
  return pool == PoolKind::kLarge && room ? kLargePage : kSmallPage;
}

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

}  // namespace

Block* DeviceAllocator::allocate_expandable(const Request& request) {
  Block* candidate = find_expandable_block(request);
  if (candidate == nullptr) return nullptr;
  if (moves_pages_) gather_pages(candidate, request.size);
  // Pages moved for this request and not mapped stay in moved_pages_ for the next step of the
  // out-of-memory ladder; find_or_create_block releases what is left.
  Block* found = map_chain(candidate, request.size);
  if (found != nullptr) request.pool->erase(found);
  return found;
}

Block* DeviceAllocator::map_chain(Block* candidate, std::size_t size) {
  if (!candidate->mapped && !map_block(candidate, std::min(candidate->size, size))) {
    return nullptr;
  }
  while (candidate->size < size) {
    Block* next = candidate->next;  // unmapped: has_space() walked through it
    if (!map_block(next, std::min(size - candidate->size, next->size))) return nullptr;
    candidate = next;  // it absorbed the old candidate
  }
  return candidate;
}

Block* DeviceAllocator::find_expandable_block(const Request& request) {
  BlockPool& pool = *request.pool;
  const auto& unmapped = pool.unmapped_blocks();
  Block key;
  key.stream = request.stream;
  // PyTorch: the lowest address with space. cudacache's policy: the place that needs the
  // fewest new bytes (the largest free block to extend), so that a stretch left by moved pages
  // is not filled with new pages while free memory waits elsewhere.
  Block* best = nullptr;
  std::size_t best_free = 0;
  for (auto it = unmapped.lower_bound(&key); it != unmapped.end(); ++it) {
    Block* candidate = *it;
    if (candidate->stream != request.stream) break;
    if (allocatable(candidate->prev)) candidate = candidate->prev;  // a free tail to extend
    if (!has_space(candidate, request.size)) continue;
    if (!moves_pages_) return candidate;
    const std::size_t free_bytes = candidate->mapped ? candidate->size : 0;
    if (best == nullptr || free_bytes > best_free) {
      best = candidate;
      best_free = free_bytes;
    }
  }
  if (best != nullptr) return best;
  // A new range for this (stream, pool): 1 1/8 x the device's memory, in whole pages, and never
  // smaller than the request (the device may have grown since its memory was read; a request
  // larger than the range then ran past its end: found by fuzz_allocator_ops).
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (const cudaError_t error = device_api::memory_info(device_, &free_bytes, &total_bytes);
      error != cudaSuccess) {
    report::cuda_error("cudaMemGetInfo", device_, error);
  }
  const std::size_t page =
      pool.kind() == PoolKind::kSmall || moves_pages_ ? kSmallPage : kLargePage;
  const std::size_t pages =
      std::max<std::size_t>({1, (total_bytes / 8 * kReservedEighths + page - 1) / page,
                             (request.size + page - 1) / page});
  cudaError_t error = cudaSuccess;
  auto range = ExpandableSegment::reserve(*backend_, page, pages, request.stream, &error);
  if (range == nullptr && error == cudaErrorMemoryAllocation) return nullptr;
  if (range == nullptr) report::cuda_error("cuMemAddressReserve", device_, error);

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
  ExpandableSegment& range = *block->segment->expandable;
  AddressRange mapped;
  bool complete = true;
  if (!moves_pages_) {
    const cudaError_t error = range.map(block->address, size, &mapped);
    if (error == cudaErrorMemoryAllocation) return false;
    if (error != cudaSuccess) report::cuda_error("mapping pages", device_, error);
  } else {
    // Room is judged for what a large page would map, so that a small device gets small pages.
    const bool room = device_has_room(round_up(size, kLargePage));
    const std::size_t page = growth_page(block->segment->pool, room);
    const std::size_t need = std::min(block->size, round_up(size, page));
    std::vector<Page> pages;
    complete = take_pages(need, block->size, page, &pages);
    if (pages.empty()) return false;
    const cudaError_t error = range.map_pages(block->address, pages, &mapped);
    if (error != cudaSuccess) {
      release_pages(*backend_, pages);
      report::cuda_error("mapping pages", device_, error);
    }
  }
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
  return complete;
}

bool DeviceAllocator::device_has_room(std::size_t bytes) const {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (device_api::memory_info(device_, &free_bytes, &total_bytes) != cudaSuccess) return false;
  const std::size_t limit = std::min(total_bytes, allowed_maximum_);
  const std::size_t headroom = limit / 32 * kRoomFree32nds;
  const std::size_t available = std::min(free_bytes, limit - std::min(limit, reserved_total_));
  return available >= bytes + headroom;
}

void DeviceAllocator::gather_pages(Block* candidate, std::size_t size) {
  // The unmapped bytes the chain from `candidate` needs, its smallest unmapped stretch (no
  // page may be larger), and the blocks that must not change meanwhile: the chain and its
  // neighbours (an unmapped page next to them would merge into them).
  std::size_t need = 0;
  std::size_t stretch = SIZE_MAX;
  std::vector<const Block*> keep{candidate->prev};
  std::size_t bytes = 0;
  for (const Block* block = candidate; block != nullptr && bytes < size; block = block->next) {
    if (!block->mapped) {
      need += std::min(block->size, size - bytes);
      stretch = std::min(stretch, block->size);
    }
    bytes += block->size;
    keep.push_back(block);
    keep.push_back(block->next);
  }
  if (need == 0) return;
  const bool room = device_has_room(need);
  // With room, pages are moved only when creating would hold more than kHeldPerMille allows.
  const auto active = std::max<std::size_t>(
      static_cast<std::size_t>(stats_.values().active_bytes[kAllPools].current) + size,
      peak_active_bytes_);
  if (room && (reserved_total_ + need) * 1000 <= active * kHeldPerMille) return;
  const std::size_t page = growth_page(candidate->segment->pool, room);
  need = std::min(round_up(need, page), stretch);
  // With room, a move must save a create: only pages at least as large as one are moved.
  const std::size_t smallest = room ? std::min(page, need) : 0;
  struct Candidate {
    Block* block;
    std::uintptr_t address;
    std::size_t size;
  };
  std::vector<Candidate> candidates;
  for (BlockPool* pool : {&large_pool_, &small_pool_}) {
    for (Block* block : pool->free_blocks()) {
      if (std::find(keep.begin(), keep.end(), block) != keep.end()) continue;
      for (const auto& [address, found] :
           block->segment->expandable->pages_inside(block->address, block->size)) {
        if (found.size <= stretch && found.size >= smallest) {
          candidates.push_back({block, address, found.size});
        }
      }
    }
  }
  // The largest pages first, none larger than what is left: free memory a page would leave
  // here is memory held twice (when the device is full, the out-of-memory ladder releases
  // free pages instead).
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.size > b.size; });
  std::vector<Candidate> chosen;
  std::size_t covered = 0;
  for (const Candidate& found : candidates) {
    if (covered == need) break;
    if (found.size > need - covered) continue;
    covered += found.size;
    chosen.push_back(found);
  }
  // Later pages of a block first: unmapping one keeps the block the part before it.
  std::sort(chosen.begin(), chosen.end(),
            [](const Candidate& a, const Candidate& b) { return a.address > b.address; });
  // One synchronize per stream whose pages move, not one per page.
  std::vector<cudaStream_t> synchronized;
  for (const Candidate& move : chosen) {
    const cudaStream_t stream = move.block->segment->expandable->stream();
    if (std::find(synchronized.begin(), synchronized.end(), stream) != synchronized.end()) continue;
    if (device_api::synchronize_stream(device_, stream) == cudaSuccess) {
      synchronized.push_back(stream);
    }
  }
  for (const Candidate& move : chosen) {
    const cudaStream_t stream = move.block->segment->expandable->stream();
    const bool done =
        std::find(synchronized.begin(), synchronized.end(), stream) != synchronized.end();
    unmap_block(move.block, move.address, move.size, &moved_pages_, done);
  }
}

bool DeviceAllocator::take_pages(std::size_t need, std::size_t limit, std::size_t page_size,
                                 std::vector<Page>* pages) {
  std::size_t covered = 0;
  for (auto it = moved_pages_.begin(); it != moved_pages_.end() && covered < need;) {
    if (covered + it->size > limit) {
      ++it;
      continue;
    }
    covered += it->size;
    pages->push_back(*it);
    it = moved_pages_.erase(it);
  }
  if (covered >= need) return true;
  // The pages left cannot serve here: the device gets them back before pages are created.
  release_pages(*backend_, moved_pages_);
  moved_pages_.clear();
  const cudaError_t error = create_pages(*backend_, need - covered, page_size, pages);
  if (error == cudaErrorMemoryAllocation) return false;
  if (error != cudaSuccess) {
    release_pages(*backend_, *pages);
    pages->clear();
    report::cuda_error("cuMemCreate", device_, error);
  }
  return true;
}

Block* DeviceAllocator::unmap_block(Block* block, std::vector<Page>* kept) {
  return unmap_block(block, block->address, block->size, kept);
}

Block* DeviceAllocator::unmap_block(Block* block, std::uintptr_t address, std::size_t size,
                                    std::vector<Page>* kept, bool stream_synchronized) {
  BlockPool& pool = pool_of(*block);
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
