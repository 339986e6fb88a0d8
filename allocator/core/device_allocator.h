// DeviceAllocator: the caching allocator of one device. Everything else (C API, C++ API,
// tools) is a client of this class. Policy summary: device_allocator.cpp.
//
// Thread safety: every public member function may be called from any thread; each takes
// mutex_ (one per instance). Retry hooks run with mutex_ released.
#pragma once

#include "block_pool.h"
#include "device_stats.h"
#include "growth_detector.h"
#include "history.h"
#include "lifetime_predictor.h"
#include "mutex.h"
#include "options.h"
#include "retry_hooks.h"
#include "segment.h"
#include "segment_backend.h"
#include "snapshot.h"
#include "stack_table.h"
#include "stats_page.h"
#include "stream_events.h"
#include "thread_annotations.h"

#include <cudacache/cudacache.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cudacache {

// Where memory comes from and what goes back: chosen once, from the options and the backend
// (policy_*.cpp, one file each; summary at the top of device_allocator.cpp).
enum class PlacementPolicy {
  kPyTorchNative,      // policy:pytorch, or any policy without VMM support: cudaMalloc segments
  kPyTorchExpandable,  // policy:pytorch,expandable_segments:True: pages at a range's end
  kCudacache,          // policy:cudacache (the default): pages moved where memory is needed
};

class DeviceAllocator {
 public:
  // `hooks` is shared with other allocators (the C API's process-wide list); null = own list.
  // `backend` obtains and returns device memory (segment_backend.h); null =
  // make_segment_backend(device, options.wants_pages()).
  DeviceAllocator(int device, const Options& options, std::shared_ptr<RetryHooks> hooks = nullptr,
                  std::unique_ptr<SegmentBackend> backend = nullptr);
  // Waits for pending stream events and returns every segment to CUDA, live blocks included.
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // nullptr for size 0. Throws OutOfMemoryError, or Error for bad input (state unchanged).
  void* allocate(std::size_t size, cudaStream_t stream) CUDACACHE_EXCLUDES(mutex_);
  // Throws Error (UNKNOWN_POINTER) for a pointer that is not allocated here. nullptr: no-op.
  void deallocate(void* ptr) CUDACACHE_EXCLUDES(mutex_);
  // Also checks that requested_size is the size passed at allocation (INVALID_ARGUMENT).
  void deallocate(void* ptr, std::size_t requested_size) CUDACACHE_EXCLUDES(mutex_);
  // Frees ptr and returns true if this allocator owns it; false (nothing done) otherwise.
  bool deallocate_if_owned(void* ptr) CUDACACHE_EXCLUDES(mutex_);
  // Throws Error (UNKNOWN_POINTER) for a pointer that is not allocated here, or for a bad
  // stream (INVALID_ARGUMENT, INVALID_DEVICE).
  void record_stream(void* ptr, cudaStream_t stream) CUDACACHE_EXCLUDES(mutex_);
  // The ownership query: records the use and returns true if this allocator owns ptr; false
  // (nothing done, nothing logged) otherwise. A bad stream still throws.
  bool record_stream_if_owned(void* ptr, cudaStream_t stream) CUDACACHE_EXCLUDES(mutex_);
  void empty_cache() CUDACACHE_EXCLUDES(mutex_);
  // Cached memory that empty_cache() would give back to the device now: free blocks that are
  // whole segments, or with pages the whole pages inside free blocks. Not the free part of a
  // segment or page that also holds a live block, which stays reserved.
  std::size_t releasable_bytes() const CUDACACHE_EXCLUDES(mutex_);

  MemoryStats stats() const CUDACACHE_EXCLUDES(mutex_);
  void reset_peak_stats() CUDACACHE_EXCLUDES(mutex_);
  void reset_accumulated_stats() CUDACACHE_EXCLUDES(mutex_);
  MemorySnapshot snapshot() const CUDACACHE_EXCLUDES(mutex_);
  std::string snapshot_json() const;

  // Allocation history (history.h). max_entries > 0 starts a new recording (earlier entries
  // are dropped) that keeps the newest max_entries entries; 0 stops recording and keeps the
  // entries for export until the next start. Throws Error (INVALID_ARGUMENT) above
  // kMaxHistoryEntries. The record_history option starts a recording at construction.
  // `stacks`: which frames each alloc and oom entry carries (stack_table.h).
  void record_history(std::size_t max_entries, StackKind stacks = StackKind::kNone)
      CUDACACHE_EXCLUDES(mutex_);
  std::vector<HistoryEntry> history() const CUDACACHE_EXCLUDES(mutex_);
  // The history as a replay CSV "op,id,size,stream" (rules in history_csv.h).
  std::string history_csv() const CUDACACHE_EXCLUDES(mutex_);

  // The growth detector (Note [Growth detection] in growth_detector.h). watch_growth starts a
  // watch (rising_steps 0 stops it) whose blocks carry `stacks`; `quiet`: the warning is only
  // logged, not printed on stderr (the caller reports it). mark_step ends a step: true when
  // growth was found at this boundary (then said once, unless quiet).
  void watch_growth(unsigned rising_steps, StackKind stacks, bool quiet) CUDACACHE_EXCLUDES(mutex_);
  bool mark_step() CUDACACHE_EXCLUDES(mutex_);
  GrowthReport growth_report() const CUDACACHE_EXCLUDES(mutex_);

  int device() const { return device_; }
  const Options& options() const { return options_; }
  PlacementPolicy policy() const { return policy_; }
  // True when segments are expandable (cudacache's policy, or PyTorch's with
  // expandable_segments:True) and the backend has pages.
  bool expandable() const { return policy_ != PlacementPolicy::kPyTorchNative; }
  RetryHooks& retry_hooks() { return *hooks_; }

 private:
  struct Request {
    std::size_t requested = 0;  // caller's size
    std::size_t size = 0;       // rounded block size
    cudaStream_t stream = nullptr;
    BlockPool* pool = nullptr;
    bool fraction_cap_hit = false;
    // A new address range for the request's (stream, pool) that the driver refused (bytes).
    std::size_t address_range_refused = 0;
    StackId stack = 0;  // where the caller is, when stacks are captured
    // cudacache's policy: the request's context and what it predicts (lifetime_predictor.h).
    std::uint32_t context = 0;
    Lifetime lifetime = Lifetime::kUnknown;
  };

  // The composer (device_allocator.cpp): the ladder and what every policy shares.
  Block* find_or_create_block(Request& request) CUDACACHE_REQUIRES(mutex_);
  // The cached block that serves the request, taken out of its pool (the policy's FitRule;
  // take_cached also cuts a page of one block at the request's end: fit_own_pages).
  Block* take_cached(const Request& request) CUDACACHE_REQUIRES(mutex_);
  Block* take_best_fit(const Request& request) CUDACACHE_REQUIRES(mutex_);
  // Note [Lifetime classes] in policy_cudacache.cpp: a request's predicted lifetime places it
  // while this allocator holds at most kSeparateLifetimes32nds / 32 of the memory it may use
  // (inline: on every large-pool allocation).
  static constexpr std::size_t kSeparateLifetimes32nds = 24;
  Lifetime placement_lifetime(const Request& request) const CUDACACHE_REQUIRES(mutex_) {
    if (request.lifetime == Lifetime::kUnknown) return Lifetime::kUnknown;
    const std::size_t limit =
        std::min(device_total_bytes_ == 0 ? SIZE_MAX : device_total_bytes_, allowed_maximum_);
    return reserved_total_ <= limit / 32 * kSeparateLifetimes32nds ? request.lifetime
                                                                   : Lifetime::kUnknown;
  }
  // Note [Blocks under a granule] in policy_cudacache.cpp: cudacache's policy serves a request
  // larger than the small pool's 1 MiB but under one 2 MiB granule from the small pool.
  BlockPool& pool_for_request(std::size_t rounded_size) CUDACACHE_REQUIRES(mutex_) {
    const bool under_granule = policy_ == PlacementPolicy::kCudacache && rounded_size < kSmallPage;
    return pool_for(rounded_size) == PoolKind::kSmall || under_granule ? small_pool_ : large_pool_;
  }
  // New device memory for the request: a segment, or pages of an expandable segment.
  Block* grow(Request& request, bool is_retry) CUDACACHE_REQUIRES(mutex_);
  // Waits for pending stream events, then returns every free segment, or with pages every
  // whole free page: released; with `keep_pages` the 2 MiB ones and the pages of one block are
  // kept, unmapped, in moved_pages_, so that the request being served maps them again instead of
  // creating pages (other ones are released: the device makes smaller pages of them as needed).
  void release_cached_blocks(bool keep_pages = false) CUDACACHE_REQUIRES(mutex_);

  // PyTorch's native policy (policy_pytorch_native.cpp).
  Block* allocate_segment(Request& request) CUDACACHE_REQUIRES(mutex_);
  void release_segment(Block* block) CUDACACHE_REQUIRES(mutex_);
  bool release_oversize_blocks(const Request& request) CUDACACHE_REQUIRES(mutex_);
  void release_free_segments() CUDACACHE_REQUIRES(mutex_);  // every unsplit free segment
  void garbage_collect() CUDACACHE_REQUIRES(mutex_);

  // PyTorch's expandable segments and the page machinery (policy_pytorch_expandable.cpp,
  // Note [Expandable segments] in expandable_segment.h).
  Block* allocate_expandable(Request& request) CUDACACHE_REQUIRES(mutex_);
  // Where the request's range grows (the policy decides), or a new range; nullptr when full.
  Block* find_expandable_block(Request& request) CUDACACHE_REQUIRES(mutex_);
  Block* reserve_range(Request& request) CUDACACHE_REQUIRES(mutex_);
  // Reads device_total_bytes_ from the device's properties once, as PyTorch does; the error
  // leaves it 0.
  cudaError_t read_device_memory() CUDACACHE_REQUIRES(mutex_);
  // Maps `size` bytes at the start of an unmapped block, which then merges with the free blocks
  // beside it; false when less was mapped. The merged block goes back to its pool, unless
  // `keep_out_of_pool` and all was mapped (the caller takes it: no insert then erase).
  bool map_block(Block* block, std::size_t size, bool keep_out_of_pool = false)
      CUDACACHE_REQUIRES(mutex_);
  // Maps the unmapped blocks of the chain from `candidate` until it holds `size` bytes, and
  // returns the chain's block taken out of its pool (nullptr, and nothing taken, on a failure).
  Block* map_chain(Block* candidate, std::size_t size) CUDACACHE_REQUIRES(mutex_);
  // Unmaps the whole pages inside [address, address + size) of a free block (all of it by
  // default), releasing them or handing them to *kept; returns the unmapped block, or nullptr.
  Block* unmap_block(Block* block, std::vector<Page>* kept = nullptr) CUDACACHE_REQUIRES(mutex_);
  Block* unmap_block(Block* block, std::uintptr_t address, std::size_t size,
                     std::vector<Page>* kept, bool stream_synchronized = false)
      CUDACACHE_REQUIRES(mutex_);
  // Unmaps the whole pages of every free block (into *kept, or released); returns empty ranges.
  void release_free_pages(std::vector<Page>* kept) CUDACACHE_REQUIRES(mutex_);
  void release_expandable_segment(Block* block) CUDACACHE_REQUIRES(mutex_);

  // cudacache's policy (policy_cudacache.cpp, Note [Moving pages]).
  // Without room, a growth in new pages only, when the device can give them (Note [New pages
  // first]); nullptr otherwise.
  Block* grow_in_new_pages(Request& request) CUDACACHE_REQUIRES(mutex_);
  // Without room, a request under a granule that the small pool cannot serve takes a large-pool
  // hole it nearly fills (Note [Blocks under a granule]); request.pool becomes the large pool.
  Block* take_hole_under_granule(Request& request) CUDACACHE_REQUIRES(mutex_);
  // The ladder's last rung: a request that nothing else serves takes the smallest free block of
  // the other pool on its stream that may serve it (Note [The other pool's holes]);
  // request.pool becomes that pool.
  Block* take_other_pools_hole(Request& request) CUDACACHE_REQUIRES(mutex_);
  // `hole`, a free block of `pool` (not the request's own), for the request: request.pool
  // becomes `pool` while a block is returned (a page it ends inside may be cut first).
  Block* take_hole_of(BlockPool& pool, Block* hole, Request& request) CUDACACHE_REQUIRES(mutex_);
  // The unmapped stretch whose growth needs the fewest new bytes, or nullptr.
  Block* most_free_growth_site(const Request& request) CUDACACHE_REQUIRES(mutex_);
  // Unmaps whole free pages elsewhere into moved_pages_ for the chain from `candidate` (when
  // moving pays), ...
  void gather_pages(Block* candidate, std::size_t size) CUDACACHE_REQUIRES(mutex_);
  // ... maps pages under `block` for `size` bytes: moved ones first, then new ones (*complete
  // false when the device could not give all); false when nothing was mapped ...
  bool map_gathered_pages(Block* block, std::size_t size, AddressRange* mapped, bool* complete)
      CUDACACHE_REQUIRES(mutex_);
  // (map_gathered_pages' work; it gives the gathered pages back when this throws.)
  bool gather_and_map_pages(Block* block, std::size_t size, AddressRange* mapped, bool* complete)
      CUDACACHE_REQUIRES(mutex_);
  // ... taking `need` bytes of pages (together no larger than `limit`), from moved_pages_
  // first (a page of one block only where it ends within `whole`, the bytes before the granule
  // that holds the block's end), created as pages of `page_size` for the rest (moved pages left
  // over go back to the device first); false when the device is full (*pages has what was
  // found).
  bool take_pages(std::size_t need, std::size_t limit, std::size_t page_size, std::size_t whole,
                  std::vector<Page>* pages, const char* reason) CUDACACHE_REQUIRES(mutex_);
  // Creates pages of `page_size` for `bytes`, appended to *pages: false when the device is full
  // (its last reading is then stale); any other CUDA error gives *pages back to the device and
  // throws. What is created is logged at trace level with `reason` (Note [Why pages are
  // created] in policy_cudacache.cpp).
  bool create_growth_pages(std::size_t bytes, std::size_t page_size, std::vector<Page>* pages,
                           const char* reason) CUDACACHE_REQUIRES(mutex_);
  // The trace log line of pages[first..], just `created` or `moved` for `reason` (Note [Why
  // pages are created]); nothing while the log is below trace level.
  void log_pages(const char* done, const std::vector<Page>& pages, std::size_t first,
                 const char* reason) const;
  // Pages of one block (pages_of_one_block.cpp, Note [Pages of one block]).
  // A growth without room for a block of at least kOwnPageMinPages pages of the size it would
  // otherwise create maps the granules before the block's end as pages of one block.
  static constexpr std::size_t kOwnPageMinPages = 4;
  // The bytes of a growth of `size` bytes (the block's end among them) that pages of one block
  // map, when pages of `page` bytes would be created otherwise: 0 for a small block.
  static std::size_t own_page_bytes(std::size_t size, std::size_t page);
  // Free memory left, in pages of a size, under which a shared page larger than one made now
  // is cut where a request would end inside it (Note [Pages of one block]).
  static constexpr std::size_t kNearFullPages = 2;
  // Whether a shared page of `size` bytes is cut: the device has less than kNearFullPages
  // times `size` left and a page made now would be smaller (Note [Pages of one block]).
  // growth_page() is asked only with a valid reading (2 MiB otherwise).
  bool page_too_large_near_full(std::size_t size) const CUDACACHE_REQUIRES(mutex_) {
    return device_reading_.valid && estimated_available() < kNearFullPages * size &&
           size > growth_page(PoolKind::kLarge, /*room=*/false);
  }
  // cut_pages:True (Note [Cut pages] in pages_of_one_block.cpp): without room, a free page of
  // the large pool larger than a granule is cut where a request would end inside it.
  bool cuts_free_pages() const CUDACACHE_REQUIRES(mutex_) {
    return options_.cut_pages.enabled && !room_before_growth();
  }
  // Whether serving `request` from the free block `block` may cut a page (page_to_cut says
  // which): a block of more than one granule that is split, in a range with pages of one block,
  // or in the large pool near a full device or with cut_pages:True. Inline: asked on every
  // cache hit, and false on nearly all of them.
  bool may_cut_page(const Block* block, const Request& request) const CUDACACHE_REQUIRES(mutex_) {
    if (block->size < 2 * kSmallPage || block->segment->expandable == nullptr ||
        !should_split(request.pool->kind(), block->size, request.size, options_.max_split_size(),
                      /*expandable=*/true)) {
      return false;  // served whole: nothing to cut
    }
    return block->segment->expandable->has_exclusive_pages() ||
           (request.pool->kind() == PoolKind::kLarge &&
            (page_too_large_near_full(largest_room_page()) || cuts_free_pages()));
  }
  // The page (its address and itself) that serving `request` from the free block `block` would
  // cut: one wholly inside the block that the request would end inside, a page of one block, a
  // page too large near a full device, or with cut_pages:True any larger than a granule. None for
  // most blocks (no page lookup on a cache hit).
  std::optional<std::pair<std::uintptr_t, Page>> page_to_cut(const Block* block,
                                                             const Request& request) const
      CUDACACHE_REQUIRES(mutex_);
  // Far from the limit (at least 1/kShareFarDivisor of the memory this allocator may use
  // left), a request predicted short-lived that would cut a page of one block, leaving at most
  // 1/kShareRestDivisor of its own size free in the page after its end, takes the page uncut:
  // it becomes a shared page (Note [Pages of one block]).
  static constexpr std::size_t kShareFarDivisor = 4;
  static constexpr std::size_t kShareRestDivisor = 2;
  bool shares_page_uncut(const Block* block, const Request& request, std::uintptr_t address,
                         const Page& page) const CUDACACHE_REQUIRES(mutex_);
  // Near a full device (less than 1/kAvoidCutDivisor of the memory this allocator may use
  // left), a request that would cut a page takes instead the smallest of the next kAvoidCutScan
  // free blocks large enough that needs no cut (Note [Pages of one block]).
  static constexpr std::size_t kAvoidCutDivisor = 16;
  static constexpr std::size_t kAvoidCutScan = 64;
  // That block (still in its pool), or nullptr: far from the limit, or none found.
  Block* block_without_cut(const Request& request) const CUDACACHE_REQUIRES(mutex_);
  // `block`, taken from its pool for `request`, or, when the request would cut a page
  // (page_to_cut), a block that needs no cut (block_without_cut), or else the best fit taken
  // again after that page was cut at the request's end.
  Block* fit_own_pages(Block* block, const Request& request) CUDACACHE_REQUIRES(mutex_);
  // Replaces the page at [address, address + size) inside the free block `block` (in its pool)
  // by new pages of the sizes in `parts` (zeros skipped), mapped from `address`; what they do
  // not cover, or what the device cannot give, stays unmapped. False when nothing was unmapped.
  bool cut_own_page(Block* block, std::uintptr_t address, std::size_t size,
                    const std::array<std::size_t, 3>& parts) CUDACACHE_REQUIRES(mutex_);
  // map_gathered_pages' pages while a page is cut: one new page per planned_pages_ entry.
  bool create_planned_pages(std::vector<Page>* pages) CUDACACHE_REQUIRES(mutex_);
  // A growth's `need` bytes without room: `whole` bytes of pages of one block (moved ones that
  // fit, then one new page), then 2 MiB granules (moved, then new) for the block's end.
  bool take_own_pages(std::size_t need, std::size_t whole, std::vector<Page>* pages)
      CUDACACHE_REQUIRES(mutex_);
  // A growth in the small pool for a request larger than 1 MiB (Note [Blocks under a granule]):
  // the bytes it maps for `size` (at least `need`) and the size of the pages it creates.
  std::pair<std::size_t, std::size_t> under_granule_growth(const Block* block, std::size_t size,
                                                           bool room, std::size_t need) const
      CUDACACHE_REQUIRES(mutex_);
  // Whether a growth of `bytes` leaves the device room (Note [Room without asking]).
  bool device_has_room(std::size_t bytes) CUDACACHE_REQUIRES(mutex_);
  // Whether the device has room before any growth, on the last reading and this allocator's
  // changes since (no reading is taken).
  bool room_before_growth() const CUDACACHE_REQUIRES(mutex_);
  // Whether holding `need` more bytes for a request of `size` bytes would hold more than
  // kHeldPerMille of the most in use at once (the request counted in).
  bool beyond_held_limit(std::size_t need, std::size_t size) const CUDACACHE_REQUIRES(mutex_);
  // The most in use at once, counting a request of `size` bytes in: the limits' measure.
  std::size_t most_in_use(std::size_t size) const CUDACACHE_REQUIRES(mutex_);
  // Whether less than 1/kWholePageShare of the large pool's free memory lies in whole pages
  // (Note [Moves need whole pages]).
  bool free_memory_mostly_in_shared_pages() const CUDACACHE_REQUIRES(mutex_);
  // The size of the pages a growth in `pool` creates, with room or without (Note [Pages shrink
  // as the device fills]).
  std::size_t growth_page(PoolKind pool, bool room) const CUDACACHE_REQUIRES(mutex_);
  // The largest page this policy may create (max_page_size_mb; SIZE_MAX when unlimited).
  std::size_t max_page() const { return options_.max_page_size_mb.bytes; }
  // The largest page a growth in the large pool creates with room, and so the largest page that
  // may hold a block and free memory beside it (Note [Fewer pages with room]): worked out by
  // largest_room_page_within() when the memory limit changes, kept for the cache hits that ask.
  std::size_t largest_room_page() const CUDACACHE_REQUIRES(mutex_) {
    const std::size_t limit = memory_limit();
    if (limit != room_page_limit_) {
      room_page_ = std::min(largest_room_page_within(limit), max_page());
      room_page_limit_ = limit;
    }
    return room_page_;
  }
  static std::size_t largest_room_page_within(std::size_t limit);
  // Note [Mapping ahead with room]: what a growth with room in the large pool maps, `need` (its
  // 20 MiB steps) or a whole page of largest_room_page() when what is held stays within
  // kAheadPerMille of the most in use.
  static constexpr std::size_t kAheadPerMille = 1020;
  std::size_t with_pages_ahead(const Block* block, std::size_t size, std::size_t need)
      CUDACACHE_REQUIRES(mutex_);
  // The memory this allocator may use (the device, or the per_process_memory_fraction cap),
  // and what of it is free now, on the last reading of the device and the allocator's own
  // changes since (Note [Room without asking]). Inline, as bytes_held(): may_cut_page() asks
  // on every cache hit.
  std::size_t memory_limit() const CUDACACHE_REQUIRES(mutex_) {
    return std::min(device_reading_.total_bytes, allowed_maximum_);
  }
  std::size_t estimated_available() const CUDACACHE_REQUIRES(mutex_) {
    const DeviceReading& reading = device_reading_;
    const std::size_t free_or_ours = reading.free_bytes + reading.held_bytes;
    const std::size_t free_bytes =
        std::min(reading.total_bytes, free_or_ours - std::min(bytes_held(), free_or_ours));
    const std::size_t limit = memory_limit();
    return std::min(free_bytes, limit - std::min(limit, reserved_total_));
  }
  // Device memory this allocator holds: its mapped pages and the pages being moved.
  std::size_t bytes_held() const CUDACACHE_REQUIRES(mutex_) {
    std::size_t held = reserved_total_;
    for (const Page& page : moved_pages_) held += page.size;
    return held;
  }

  void add_segment_snapshots(const Segment& segment, MemorySnapshot& snapshot) const
      CUDACACHE_REQUIRES(mutex_);
  void process_events() CUDACACHE_REQUIRES(mutex_);
  // Note [Host memory runs out]: host memory runs out as std::bad_alloc from any operator new
  // the allocator makes. The calls that take blocks out of the pools and put them back
  // (allocate, deallocate, empty_cache) first allocate what their splits, merges and index
  // insertions will need (spare blocks and nodes, BlockPool::reserve_host_memory), so that a
  // bad_alloc comes before any change, and the growths undo their device calls when their
  // bookkeeping throws: the call fails with bad_alloc, and no block or device memory is lost.
  // Each insertion may split a full leaf of the free index, and any number of leaves may be
  // full: the reserve counts its insertions (FreeIndex::splits_for; until 2026-12-07 it kept one
  // spare leaf for up to 62, and an allocation reserved for one insertion where it may make two).
  void reserve_host_memory(std::size_t insertions = 1) CUDACACHE_REQUIRES(mutex_);
  void* finish_allocation(Block* block, const Request& request) CUDACACHE_REQUIRES(mutex_);
  void release_allocation(Block* block) CUDACACHE_REQUIRES(mutex_);
  void free_block(Block* block) CUDACACHE_REQUIRES(mutex_);
  void deallocate_checked(void* ptr, std::optional<std::size_t> requested_size)
      CUDACACHE_EXCLUDES(mutex_);
  void validate_stream(cudaStream_t stream) CUDACACHE_REQUIRES(mutex_);
  Block* take_allocated(std::unordered_map<void*, Block*>::iterator it) CUDACACHE_REQUIRES(mutex_);
  // Free bytes of expandable segments in pages that also hold allocated memory, and how many of
  // them share a 2 MiB granule with memory in use (OomReport).
  struct PartialPageBytes {
    std::size_t in_partial_pages = 0;
    std::size_t beside_in_use = 0;
  };
  PartialPageBytes free_in_partial_pages() const CUDACACHE_REQUIRES(mutex_);
  OomReport make_report(const Request& request) const CUDACACHE_REQUIRES(mutex_);
  OomContext make_context(const Request& request, int round) const CUDACACHE_REQUIRES(mutex_);
  BlockPool& pool_of(const Block& block) CUDACACHE_REQUIRES(mutex_);
  // Writes the counters into this device's slot of the stats page (publish_stats,
  // stats_publisher.h): at construction, then from the publisher's thread, every
  // stats_publisher::kInterval, never on the allocation path.
  void write_stats_slot() CUDACACHE_REQUIRES(mutex_);
  // Off: one predictable branch on a member under the lock already held.
  void record_event(HistoryAction action, std::uintptr_t address, std::size_t size,
                    std::size_t block_size, std::size_t requested_size, cudaStream_t stream,
                    StackId stack = 0) CUDACACHE_REQUIRES(mutex_) {
    if (history_.recording()) {
      history_.record(action, address, size, block_size, requested_size,
                      reinterpret_cast<std::uintptr_t>(stream), stack);
    }
  }
  // What allocate() captures before taking the lock: the history's stacks and the growth
  // watch's, together.
  void update_capture_kind() CUDACACHE_REQUIRES(mutex_);

  const int device_;
  const Options options_;
  const std::shared_ptr<RetryHooks> hooks_;
  std::unique_ptr<SegmentBackend> backend_;                   // set once, in the constructor
  PlacementPolicy policy_ = PlacementPolicy::kPyTorchNative;  // set once
  std::size_t allowed_maximum_ = SIZE_MAX;  // per_process_memory_fraction cap; set once

  mutable Mutex mutex_;
  BlockPool small_pool_ CUDACACHE_GUARDED_BY(mutex_){PoolKind::kSmall};
  BlockPool large_pool_ CUDACACHE_GUARDED_BY(mutex_){PoolKind::kLarge};
  std::unordered_map<void*, Block*> allocated_ CUDACACHE_GUARDED_BY(mutex_);
  // Nodes of allocated_ kept for the next allocations: no host malloc or free on a cache hit
  // (the one spare node, used first: the cheapest for a free followed by an allocation), nor
  // after a burst of frees (a program freeing a layer's tensors at once: up to
  // kSpareAllocatedNodes more, whose room is reserved when the allocator is made, so that
  // keeping a node never allocates).
  static constexpr std::size_t kSpareAllocatedNodes = 256;
  std::unordered_map<void*, Block*>::node_type spare_allocated_node_ CUDACACHE_GUARDED_BY(mutex_);
  std::vector<std::unordered_map<void*, Block*>::node_type> spare_allocated_nodes_
      CUDACACHE_GUARDED_BY(mutex_);
  std::map<std::uintptr_t, Segment*> segments_ CUDACACHE_GUARDED_BY(mutex_);
  StreamEvents events_ CUDACACHE_GUARDED_BY(mutex_);
  DeviceStats stats_ CUDACACHE_GUARDED_BY(mutex_);
  std::size_t reserved_total_ CUDACACHE_GUARDED_BY(mutex_) = 0;
  std::uint64_t segments_created_ CUDACACHE_GUARDED_BY(mutex_) = 0;  // Block::segment_order
  std::vector<Page> moved_pages_ CUDACACHE_GUARDED_BY(mutex_);       // during one allocation only
  std::vector<std::size_t> planned_pages_ CUDACACHE_GUARDED_BY(mutex_);  // while a page is cut
  // map_gathered_pages' list of pages to map, kept between growths (no host malloc per growth).
  std::vector<Page> growth_pages_ CUDACACHE_GUARDED_BY(mutex_);
  // A whole free page gather_pages may move: where it is, and since when its block is free.
  struct PageCandidate {
    Block* block;
    std::uintptr_t address;
    std::size_t size;
    bool exclusive;
    std::uint64_t free_since;  // the block's gc_count_base: its pool's searches when it was freed
  };
  // gather_pages' lists, kept between growths as growth_pages_ is.
  struct GatherLists {
    std::vector<const Block*> keep;          // blocks whose pages stay
    std::vector<PageCandidate> candidates;   // pages that may move
    std::vector<PageCandidate> chosen;       // pages that move
    std::vector<cudaStream_t> synchronized;  // streams synchronized for them
    void clear() {
      keep.clear();
      candidates.clear();
      chosen.clear();
      synchronized.clear();
    }
  };
  GatherLists gather_lists_ CUDACACHE_GUARDED_BY(mutex_);
  // take_own_pages' and cut_own_page's lists, kept between growths as growth_pages_ is.
  struct OwnPageLists {
    std::vector<Page> large;             // moved pages of one block that fit
    std::vector<Page> granules;          // moved 2 MiB pages that fit
    std::vector<Page> left_over;         // moved pages that do not
    std::vector<Page> created_large;     // the new page of one block
    std::vector<Page> created_granules;  // the new 2 MiB pages
    std::vector<Page> cut;               // the page being cut
    void clear() {  // all but `cut` (a cut's growth takes pages while the cut is under way)
      for (std::vector<Page>* list :
           {&large, &granules, &left_over, &created_large, &created_granules}) {
        list->clear();
      }
    }
  };
  OwnPageLists own_page_lists_ CUDACACHE_GUARDED_BY(mutex_);
  bool new_pages_only_ CUDACACHE_GUARDED_BY(mutex_) = false;  // during grow_in_new_pages
  // During allocate_expandable for a request larger than 1 MiB in the small pool.
  bool growth_under_granule_ CUDACACHE_GUARDED_BY(mutex_) = false;
  // The most bytes ever in use (allocated or pending) at once; not reset with the peak stats.
  std::size_t peak_active_bytes_ CUDACACHE_GUARDED_BY(mutex_) = 0;
  // The device's memory as cudaMemGetInfo last said (or as assumed before the first reading),
  // and what this allocator held then (Note [Room without asking] in policy_cudacache.cpp).
  struct DeviceReading {
    bool valid = false;
    bool measured = false;  // read from the device (else assumed from its memory size)
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    std::size_t held_bytes = 0;
    unsigned decisions = 0;  // taken on it without reading again
    unsigned lifetime = 0;   // decisions it serves before it is old (Note [Room without asking])
  };
  DeviceReading device_reading_ CUDACACHE_GUARDED_BY(mutex_);
  // largest_room_page() for the memory limit room_page_limit_ (2 MiB for a limit of 0).
  mutable std::size_t room_page_limit_ CUDACACHE_GUARDED_BY(mutex_) = 0;
  mutable std::size_t room_page_ CUDACACHE_GUARDED_BY(mutex_) = kSmallPage;
  // The device's memory size (its properties), read once by read_device_memory() at the first
  // range or room decision; 0 until then.
  std::size_t device_total_bytes_ CUDACACHE_GUARDED_BY(mutex_) = 0;
  AllocationHistory history_ CUDACACHE_GUARDED_BY(mutex_);
  StackKind history_stacks_ CUDACACHE_GUARDED_BY(mutex_) = StackKind::kNone;
  GrowthDetector growth_ CUDACACHE_GUARDED_BY(mutex_);
  StackKind growth_stacks_ CUDACACHE_GUARDED_BY(mutex_) = StackKind::kNone;
  bool growth_quiet_ CUDACACHE_GUARDED_BY(mutex_) = false;
  // A StackKind, read without the lock on every allocation (one relaxed load when off).
  std::atomic<std::uint8_t> capture_kind_{0};
  std::optional<stats_page::SlotWriter> stats_slot_ CUDACACHE_GUARDED_BY(mutex_);
  std::uint64_t stats_updates_ CUDACACHE_GUARDED_BY(mutex_) = 0;
  LifetimePredictor lifetimes_ CUDACACHE_GUARDED_BY(mutex_);  // cudacache's policy only
};

}  // namespace cudacache
