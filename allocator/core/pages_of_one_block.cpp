// Pages of one block: how cudacache's policy (policy_cudacache.cpp) backs a large block when the
// device has no room.
//
// Note [Pages of one block]: a cuMemCreate costs about the same whatever the page's size (about
// 193 us), so a program that fills the device in 2-20 MiB pages pays one create per page, where
// PyTorch's expandable segments pay one per 20 MiB. A large page is only a risk when it holds a
// block and free memory beside it (the free part can be neither moved nor released). So, without
// room, in the large pool:
// - A growth for a block of at least kOwnPageMinPages pages (of the size it would otherwise
//   create) maps the granules wholly before the block's end as pages of one block (moved ones
//   first, then a single new page) and the granule that holds the block's end as a 2 MiB page.
// - A page of one block never holds more than one block. When a block would end inside one (a
//   free block reused by a smaller request, a growth that merged with the free block after it),
//   the page is cut there: unmapped, released and replaced by up to three pages, mapped where it
//   was: the granules before the end granule (a page of one block), the end granule (2 MiB) and
//   the rest (a page of one block). No memory changes hands, and no data moves (the page was
//   free).
// - A move that needs less than a free page of one block cuts off what it needs from the page's
//   end (the page's block keeps its front, as with any move).
// Pages of one block move whole like any page, and are never split by a fit. A training loop
// reuses each page with a block of the same size, so it cuts nothing after its first step.
// The cost: one unmap, one release and up to three creates per cut, paid only when memory is
// reused by a block of another size while the device has no room.
// - Near the limit (less than 1/kAvoidCutDivisor of the memory this allocator may use left), a
//   request whose best fit would be cut takes instead the smallest of the next kAvoidCutScan
//   free blocks large enough that needs no cut, if any: the page stays whole (and movable) for
//   a request of its size. Over the 11 real traces, estimated calls on devices of 1.005 / 1.02 /
//   1.05 x their peak fell from 2,051 / 1,903 / 1,890 ms to 1,795 / 1,643 / 1,402 (`cs336_medium`
//   384 -> 237 and `qwen7b` 328 -> 229 at 1.02 x; `nca3d` 73 -> 94 at 1.005 x), holding the same
//   or less but at 1.1 x (1,562 -> 1,558 ms, `qwen7b` 54 -> 66 ms, `nca3d` holding 1.070 -> 1.072
//   x); `qwen7b`'s smallest device grew by one 2 MiB step (1.0025 -> 1.0030 x its peak,
//   CUB 1.0010), the others are unchanged; from 1.2 x on nothing changed. Far from the limit
//   (taking such a block whenever a cut would be made) the calls fell as much, but what was held
//   on devices of 1.2-2 x the peak grew (`qwen7b` 1.096 -> 1.19-1.28 x, `nca3d` 1.07 -> 1.14-1.27
//   x): a larger block taken leaves its own page free while the next growth creates pages.
// - Far from the limit (at least 1/kShareFarDivisor of the memory this allocator may use
//   left), a request predicted short-lived (Note [Lifetime classes]) whose end would cut a page
//   of one block, leaving at most 1/kShareRestDivisor of its own size free in the page after
//   it, takes the page uncut; the page becomes a shared one (the bullet below bounds those near
//   the limit). A program whose shapes change with every request (dynamic shapes: bench/
//   variants' `variable_length_inference`) reuses its pages with blocks of other sizes all the
//   time, and each reuse was a cut. Measured side by side (cudacache-replay, the 11 real traces
//   and bench/variants.sh's 15): that variant's estimated calls on devices of 1.2 / 2 / 4 x its
//   peak fell from 156 / 135 / 80 to 115 / 76 / 40 ms (PyTorch's expandable segments: 14.7)
//   and at 1.02 x from 198 to 167 (48.0); the 26 traces' calls at 1.2-4 x from 8,220 to 7,933
//   ms in all, at 1.02 x from 4,153 to 4,117; no smallest device and nothing held changed, on
//   any device size. Measured and not kept: leaving up to the block's own size free (1/1),
//   `dit`'s smallest device grew from 1.0002 to 1.0037 x its peak (pages of 190 MiB shared with
//   96 MiB blocks, their rests then taken by blocks that outlived them); up to 1/4 or 1/8 of it,
//   less gain (at 1.02 x the 26 traces' calls even rose, to 4,183 ms at 1/4); any request, not
//   only a short-lived one (and filling at least 3/4 of the page), `nca3d` 1.0019 -> 1.0657 and
//   `qwen7b` 1.0020 -> 1.0478 and out of memory at 1.02 x; from half the memory left, less gain
//   (8,077 ms at 1.2-4 x); from an eighth, `nca3d` 1.0019 -> 1.0028 and the variant 1.0021 ->
//   1.0037.
// - A shared page (made while the device had room, up to 1/1024 of it: Note [Fewer pages with
//   room]; or when more was free) that is larger than one made now is cut the same way where a
//   request would end inside it, once the device has less than kNearFullPages times the page's
//   size left: a block's end would strand the rest of the page just when memory runs out (Note
//   [Pages shrink as the device fills] bounds what a new page can strand; this bounds the old
//   ones near the limit). On the smallest devices of the real traces, such pages held 15 MiB of
//   a 16 MiB page beside the last 1.5 MiB of a 129.5 MiB block (`qwen7b`: 1.0083 -> 1.0025 x
//   the peak, CUB 1.0010; `cs336_small` 1.0025 -> 1.0019, CUB 1.0003). At 1 x the page's size
//   left `cs336_small` kept its 1.0025; at 4 x, a device of 1.02 x its peak took 197 ms of
//   estimated calls instead of 137 (187 at 2 x) and `qwen7b`'s 443 instead of 328 (328 at 2 x).
//
// Note [Cut pages]: with cut_pages:True, once the device has no room (room_before_growth()), a
// free page of the large pool larger than a granule that a request would end inside is cut
// there as a page of one block is, whatever made it. By default such a page stays whole, and
// what is left of it after the block's end can be neither moved nor unmapped while the block
// lives: on a device of 51 GiB every page is 20 MiB, and one training step of a 2.7B model
// placed each gradient in part of the memory its freed activations left, so that 1.64 GiB lay
// in such rests when AdamW's states needed it (1.0321 x its peak, CUB 1.0002; cut, 1.0056; with
// max_page_size_mb:2, 1.0048). Not the default, for its calls near the limit: on the real traces
// at 1.02 x their peak, 1,687 -> 4,401 ms of estimated calls (cuts cascade: each rest is a page
// of one block, cut again at its next reuse by a smaller block), where pages of one granule
// cost 14,180; while the device has room it changes nothing (bench/POLICY.md, "Cut pages").
#include "device_allocator.h"

#include "error_report.h"
#include "log.h"
#include "size_policy.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <optional>
#include <utility>

namespace cudacache {
namespace {

// Rounds a page of one block may take for one request: each cut splits the page at the
// request's end, so the next fit needs no cut there; a few rounds are for the fits that pick
// another block with a page of one block at its end.
constexpr int kMaxCutRounds = 8;

}  // namespace

std::size_t DeviceAllocator::own_page_bytes(std::size_t size, std::size_t page) {
  const std::size_t whole = size / kSmallPage * kSmallPage;
  return whole >= kOwnPageMinPages * page ? whole : 0;
}

std::optional<std::pair<std::uintptr_t, Page>> DeviceAllocator::page_to_cut(
    const Block* block, const Request& request) const {
  // A page that may be cut is whole 2 MiB granules, more than one (a page of one block is; a
  // shared one is larger than a page made now), wholly inside the block; with no page of one
  // block in the range and far from a full device (a shared page is at most
  // largest_room_page()) there is none: no page lookup on a cache hit.
  if (!may_cut_page(block, request)) return std::nullopt;
  // The page, wholly inside the free block, that the request would end inside: cut if it is a
  // page of one block, or a page too large for a device this full.
  const auto cut = block->segment->expandable->page_across(block->address + request.size);
  if (!cut || cut->first < block->address ||
      cut->first + cut->second.size > block->address + block->size) {
    return std::nullopt;
  }
  // A shared page: near a full device when larger than one made now, and with cut_pages:True
  // without room when larger than a granule (Note [Cut pages]).
  if (!cut->second.exclusive && !page_too_large_near_full(cut->second.size) &&
      !(cut->second.size > kSmallPage && request.pool->kind() == PoolKind::kLarge &&
        cuts_free_pages())) {
    return std::nullopt;
  }
  return cut;
}

bool DeviceAllocator::shares_page_uncut(const Block* block, const Request& request,
                                        std::uintptr_t address, const Page& page) const {
  // The page's rest after the request's end stays free beside a block that is predicted to be
  // freed soon, and is at most half of what the block takes; far from the limit nothing is
  // short of that memory meanwhile, and the block's free makes the page whole and free again.
  const std::uintptr_t end = block->address + request.size;
  const std::size_t rest = address + page.size - end;
  return page.exclusive && request.lifetime == Lifetime::kShort && device_reading_.valid &&
         estimated_available() >= memory_limit() / kShareFarDivisor &&
         rest <= request.size / kShareRestDivisor;
}

Block* DeviceAllocator::block_without_cut(const Request& request) const {
  // Far from the limit a cut costs little against what a larger block would hold (what is
  // held stays near what is used); near it, each cut is calls that an existing block saves.
  if (!device_reading_.valid || estimated_available() >= memory_limit() / kAvoidCutDivisor) {
    return nullptr;
  }
  // Gathered first and judged outside the callback (page_to_cut needs the lock the analysis
  // does not see a lambda hold).
  std::array<Block*, kAvoidCutScan> fits{};
  std::size_t count = 0;
  request.pool->for_each_fit(request.stream, request.size, [&](Block* other) {
    fits[count++] = other;
    return count < fits.size();
  });
  for (std::size_t i = 0; i < count; ++i) {
    if (may_serve(fits[i]->size, request.size, options_.max_split_size()) &&
        !page_to_cut(fits[i], request)) {
      return fits[i];
    }
  }
  return nullptr;
}

Block* DeviceAllocator::fit_own_pages(Block* block, const Request& request) {
  if (policy_ != PlacementPolicy::kCudacache) return block;
  for (int round = 0; block != nullptr && round < kMaxCutRounds; ++round) {
    const auto cut = page_to_cut(block, request);
    if (!cut) return block;
    if (shares_page_uncut(block, request, cut->first, cut->second)) {
      block->segment->expandable->share_page(cut->first);
      return block;
    }
    if (Block* other = block_without_cut(request)) {
      request.pool->erase(other);
      request.pool->insert(block);
      return other;
    }
    const auto [address, page] = *cut;
    const std::uintptr_t end = block->address + request.size;
    const std::size_t head = (end - address) / kSmallPage * kSmallPage;
    const std::size_t granule = (end - address) % kSmallPage != 0 ? kSmallPage : 0;
    request.pool->insert(block);
    cut_own_page(block, address, page.size, {head, granule, page.size - head - granule});
    block = take_best_fit(request);
  }
  return block;
}

bool DeviceAllocator::cut_own_page(Block* block, std::uintptr_t address, std::size_t size,
                                   const std::array<std::size_t, 3>& parts) {
  BlockPool& pool = pool_of(*block);
  // Room for the planned pages before the page goes: nothing below allocates host memory for
  // them (Note [Host memory runs out]).
  planned_pages_.reserve(parts.size());
  std::vector<Page>& cut = own_page_lists_.cut;
  cut.clear();
  Block* unmapped = unmap_block(block, address, size, &cut);
  release_pages(*backend_, cut);
  cut.clear();
  if (unmapped == nullptr) return false;
  if (unmapped->address < address) {  // it merged with an unmapped stretch before the page
    pool.erase(unmapped);
    Block* at = split_block(unmapped, address - unmapped->address, pool);
    pool.insert(unmapped);
    pool.insert(at);
    unmapped = at;
  }
  const std::size_t bytes = std::accumulate(parts.begin(), parts.end(), std::size_t{0});
  if (bytes == 0) return true;
  struct PlannedPages {  // cleared also when the map throws: a later growth must not map them
    std::vector<std::size_t>& sizes;
    ~PlannedPages() { sizes.clear(); }
  } scope{planned_pages_};
  planned_pages_.clear();
  for (const std::size_t part : parts) {
    if (part != 0) planned_pages_.push_back(part);  // within the room reserved above
  }
  // A full device leaves the rest unmapped: the device has it. When nothing was mapped, the
  // stretch split off above joins the one before it again: a range with nothing mapped must be
  // one block for empty_cache to give it back.
  map_block(unmapped, bytes);
  if (!unmapped->mapped && unmapped->prev != nullptr && !unmapped->prev->mapped) {
    Block* before = unmapped->prev;
    pool.erase(before);
    try_merge(before, unmapped, pool);
    pool.insert(before);
  }
  return true;
}

bool DeviceAllocator::create_planned_pages(std::vector<Page>* pages) {
  for (const std::size_t size : planned_pages_) {
    if (!create_growth_pages(size, size, pages, "a page of one block cut")) return false;
    pages->back().exclusive = size > kSmallPage;
  }
  return true;
}

bool DeviceAllocator::take_own_pages(std::size_t need, std::size_t whole,
                                     std::vector<Page>* pages) {
  // Moved pages larger than a granule go first, as far as they end within `whole`; 2 MiB ones
  // after them. What is left over goes back to the device before anything is created.
  std::sort(moved_pages_.begin(), moved_pages_.end(),
            [](const Page& a, const Page& b) { return a.size > b.size; });
  OwnPageLists& lists = own_page_lists_;
  lists.clear();
  std::vector<Page>& large = lists.large;
  std::vector<Page>& granules = lists.granules;
  std::vector<Page>& left_over = lists.left_over;
  std::size_t large_bytes = 0;
  std::size_t granule_bytes = 0;
  for (const Page& page : moved_pages_) {
    if (page.size > kSmallPage && large_bytes + page.size <= whole) {
      large.push_back(page);
      large_bytes += page.size;
    } else if (page.size <= kSmallPage && large_bytes + granule_bytes + page.size <= need) {
      granules.push_back(page);
      granule_bytes += page.size;
    } else {
      left_over.push_back(page);
    }
  }
  // One new page of one block for the rest of `whole`, 2 MiB granules for the end.
  std::size_t new_large = whole - std::min(whole, large_bytes + granule_bytes);
  if (new_large <= kSmallPage) new_large = 0;
  const std::size_t new_granules = need - std::min(need, large_bytes + granule_bytes + new_large);
  std::vector<Page>& created_large = lists.created_large;
  std::vector<Page>& created_granules = lists.created_granules;
  // Every vector gets its room while the moved pages are still in moved_pages_ (released by
  // find_or_create_block if this throws): from their clear on, nothing here allocates host
  // memory, so none of them can be lost on the way (Note [Host memory runs out]).
  const std::size_t granule_count = (new_granules + kSmallPage - 1) / kSmallPage;
  const std::size_t large_count = new_large > 0 ? 1 : 0;
  created_large.reserve(large_count);
  created_granules.reserve(granule_count);
  pages->reserve(pages->size() + large.size() + granules.size() + large_count + granule_count);
  moved_pages_.clear();
  release_pages(*backend_, left_over);
  cudaError_t error = create_pages(*backend_, new_large, new_large, &created_large);
  if (error == cudaSuccess) {
    error = create_pages(*backend_, new_granules, kSmallPage, &created_granules);
  }
  for (Page& page : created_large) page.exclusive = true;
  pages->insert(pages->end(), large.begin(), large.end());
  if (error == cudaErrorMemoryAllocation) {  // map what was moved; the device has the rest
    release_pages(*backend_, created_large);
    pages->insert(pages->end(), granules.begin(), granules.end());
    device_reading_.valid = false;
    return false;
  }
  if (error != cudaSuccess) {
    for (const std::vector<Page>* group : {&created_large, &granules}) {
      release_pages(*backend_, *group);
    }
    release_pages(*backend_, *pages);
    pages->clear();
    report::cuda_error("cuMemCreate", device_, error);
  }
  log_pages("created", created_large, 0, "a page of one block");
  log_pages("created", created_granules, 0, "the end granule of a page of one block");
  pages->insert(pages->end(), created_large.begin(), created_large.end());
  pages->insert(pages->end(), granules.begin(), granules.end());
  pages->insert(pages->end(), created_granules.begin(), created_granules.end());
  return true;
}

}  // namespace cudacache
