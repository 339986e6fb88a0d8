// DeviceAllocator: the allocator of one device, composing the shared parts (pools and free
// index: block_pool.h; segments and blocks: segment.h; stream events, stats, history) with the
// placement policy chosen by configuration, one file each:
//
//   policy_cudacache.cpp          cudacache's own (the default): pages moved where needed
//   policy_pytorch_expandable.cpp PyTorch's expandable segments (and the page machinery)
//   policy_pytorch_native.cpp     PyTorch's native CUDACachingAllocator (rounding, pools, fit,
//                                 split and merge rules: the summary at its top)
//
// What every policy shares, here:
// - Streams: record_stream adds a stream to a block; at free an event is recorded on each
//   such stream and the block stays active until all complete. Completed events are polled,
//   without blocking, at the start of the next allocation. A same-stream cache hit makes no
//   CUDA call.
// - Ladder when no cached block fits (grow = the policy's new memory): [native: garbage
//   collection if garbage_collection_threshold and per_process_memory_fraction are set] ->
//   grow -> [native: release cached oversize blocks, grow] -> wait for all pending events,
//   release the policy's free memory (free segments, or free pages), grow (counted in
//   num_alloc_retries) -> search the pool again (Note [Search after release]) -> retry hooks,
//   up to CUDACACHE_MAX_RETRY_ROUNDS rounds, each followed by the whole ladder ->
//   OutOfMemoryError (num_ooms). per_process_memory_fraction caps reserved memory at fraction
//   x total; a growth beyond it fails like cudaMalloc.
// - empty_cache: waits for pending events and releases the policy's free memory.
// - History (record_history; history.h): every event is appended to a bounded ring in
//   PyTorch's trace vocabulary; when off, each costs one branch under the lock already held.
//
// Note [Search after release]: waiting for pending events can return blocks to the pool and
// merge them with their neighbours; PyTorch does not look at the pool again and fails a
// request that an immediate retry satisfies (pytorch issue 189504). We look again.
//
// Locking: mutex_ guards all mutable state. Public functions take it; private helpers marked
// REQUIRES run with it held. It is released only around retry hooks.
#include "device_allocator.h"

#include "device_api.h"
#include "error_report.h"
#include "history_csv.h"
#include "log.h"
#include "oom_report.h"
#include "size_policy.h"
#include "stats_publisher.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <new>
#include <vector>

namespace cudacache {
namespace {

using report::pointer_text;

std::int64_t as_signed(std::size_t value) { return static_cast<std::int64_t>(value); }

}  // namespace

DeviceAllocator::DeviceAllocator(int device, const Options& options,
                                 std::shared_ptr<RetryHooks> hooks,
                                 std::unique_ptr<SegmentBackend> backend)
    : device_(device),
      options_(options),
      hooks_(hooks ? std::move(hooks) : std::make_shared<RetryHooks>()) {
  const int count = device_api::device_count();
  if (device < 0 || device >= count) {
    report::invalid_device(device, count);
  }
  if (backend != nullptr && backend->device() != device) {
    report::invalid_argument("cudacache: a segment backend of device " +
                             std::to_string(backend->device()) +
                             " handed to the allocator of device " + std::to_string(device));
  }
  backend_ = backend ? std::move(backend) : make_segment_backend(device, options_.wants_pages());
  if (!options_.wants_pages() || backend_->page_granularity() == 0) {
    policy_ = PlacementPolicy::kPyTorchNative;  // also cudacache's, without VMM support
  } else if (options_.policy.is_cudacache()) {
    policy_ = PlacementPolicy::kCudacache;
  } else {
    policy_ = PlacementPolicy::kPyTorchExpandable;
  }
  if (options_.per_process_memory_fraction.is_set()) {
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    const cudaError_t error = device_api::memory_info(device_, &free_bytes, &total_bytes);
    if (error != cudaSuccess) {
      report::cuda_error("cudaMemGetInfo", device_, error);
    }
    // Clamped before the cast: a simulated device of 2^64 - 1 bytes rounds to 2^64 as a double.
    const double allowed =
        options_.per_process_memory_fraction.value * static_cast<double>(total_bytes);
    allowed_maximum_ = allowed >= 0x1p64 ? SIZE_MAX : static_cast<std::size_t>(allowed);
  }
  stats_.values().max_split_size = static_cast<std::int64_t>(options_.max_split_size());
  {
    MutexLock lock(mutex_);  // not yet shared; the lock is for the analysis
    spare_allocated_nodes_.reserve(kSpareAllocatedNodes);
    if (options_.record_history.max_entries > 0) {
      history_.start(options_.record_history.max_entries);
      history_stacks_ = options_.record_stacks.kind;
    }
    if (options_.detect_growth.rising_steps > 0) {
      growth_.watch(options_.detect_growth.rising_steps, 0);
      // Sites need stacks: the configured ones, C++ frames when none are.
      growth_stacks_ = options_.record_stacks.kind != StackKind::kNone ? options_.record_stacks.kind
                                                                       : StackKind::kCpp;
    }
    update_capture_kind();
  }
  if (options_.publish_stats.enabled) {
    stats_slot_ = stats_publisher::claim(device_, count);  // no lock needed: not yet shared
    if (stats_slot_) {
      write_stats_slot();
      // A busy allocator (in a device call, a synchronize) is skipped until the next round:
      // the publisher never waits for one.
      stats_publisher::add_source(this, [](void* self) {
        auto* allocator = static_cast<DeviceAllocator*>(self);
        if (!allocator->mutex_.try_lock()) return;
        allocator->write_stats_slot();
        allocator->mutex_.unlock();
      });
    }
  }
  logger().debug("device {}: allocator created ({})", device_, options_.to_config_string());
}

DeviceAllocator::~DeviceAllocator() {
  // First, without mutex_: the publisher's thread takes its own lock, then mutex_.
  if (options_.publish_stats.enabled) stats_publisher::remove_source(this);
  MutexLock lock(mutex_);
  // The callbacks of events_ run inside its calls, with mutex_ held; clang's analysis cannot
  // follow a lambda there, hence NO_THREAD_SAFETY_ANALYSIS on each. Without host memory for the
  // frees' insertions, the blocks stay where they are: the teardown below deletes them with
  // their segments anyway, and a destructor must not throw.
  bool reserved = true;
  try {
    reserve_host_memory(events_.pending());
  } catch (const std::bad_alloc&) {
    reserved = false;
  }
  events_.synchronize_all([this, reserved](Block* block) CUDACACHE_NO_THREAD_SAFETY_ANALYSIS {
    if (reserved) free_block(block);
  });
  if (!allocated_.empty()) {
    logger().warn("device {}: allocator destroyed with {} live allocations", device_,
                  allocated_.size());
  }
  for (auto& [base, segment] : segments_) {
    for (Block* block = segment->head; block != nullptr;) {
      Block* next = block->next;
      delete block;
      block = next;
    }
    if (segment->expandable == nullptr) {  // an expandable one unmaps its pages when deleted
      const cudaError_t error = backend_->release(segment->base, segment->size);
      if (error != cudaSuccess) {
        logger().error("device {}: cudaFree failed: {}", device_, device_api::error_string(error));
      }
    }
    delete segment;
  }
  if (stats_slot_) stats_slot_->release();
}

void* DeviceAllocator::allocate(std::size_t size, cudaStream_t stream) {
  if (size == 0) return nullptr;
  if (size > kMaxRequestBytes) {
    report::invalid_argument("cudacache: requested size " + std::to_string(size) +
                             " bytes is larger than the maximum " +
                             std::to_string(kMaxRequestBytes));
  }
  // Captured before the lock: a Python frames provider waits for the GIL (stack_table.h).
  const auto capture = static_cast<StackKind>(capture_kind_.load(std::memory_order_relaxed));
  const StackId stack =
      capture == StackKind::kNone ? 0 : capture_stack(capture, __builtin_return_address(0));
  MutexLock lock(mutex_);
  validate_stream(stream);
  if (events_.pending() != 0) process_events();

  Request request;
  request.stack = stack;
  request.requested = size;
  request.size = round_size(size, options_.roundup_power2_divisions);
  request.stream = stream;
  request.pool = &pool_for_request(request.size);
  // Note [Host memory runs out]. A growth's maps and moves' unmaps reserve their own pool's.
  request.pool->reserve_host_memory_for_allocation();
  // Note [Lifetime classes]: only the large pool's blocks are placed by lifetime.
  if (policy_ == PlacementPolicy::kCudacache && request.pool == &large_pool_) {
    request.context = lifetimes_.context(request.size, stream);
    request.lifetime = lifetimes_.predict(request.context);
  }

  Block* block = find_or_create_block(request);
  for (int round = 0; block == nullptr && round < CUDACACHE_MAX_RETRY_ROUNDS; ++round) {
    // A hook's own allocation that fails does not run the hooks again (retry_hooks.h).
    if (hooks_->empty() || RetryHooks::running_on_this_thread()) break;
    const OomContext context = make_context(request, round);
    lock.unlock();
    const bool retry = hooks_->run(context);
    lock.lock();
    if (!retry) break;
    if (events_.pending() != 0) process_events();
    block = find_or_create_block(request);
  }
  if (block == nullptr) {
    stats_.values().num_ooms += 1;
    const OomReport report = make_report(request);
    record_event(HistoryAction::kOom, report.device_free_bytes, request.size, 0, request.requested,
                 request.stream, request.stack);
    std::string message = describe_oom(report, options_);
    logger().warn("{}", message);
    throw OutOfMemoryError(report, std::move(message));
  }
  return finish_allocation(block, request);
}

Block* DeviceAllocator::find_or_create_block(Request& request) {
  // Pages unmapped for this request (moved, or released by the ladder) and not mapped go back
  // to the device when the search ends, however it ends.
  struct ReleaseMovedPages {
    DeviceAllocator& allocator;
    ~ReleaseMovedPages() {
      if (allocator.moved_pages_.empty()) return;  // the common case: nothing moved
      release_pages(*allocator.backend_, allocator.moved_pages_);
      allocator.moved_pages_.clear();
    }
  } release_moved_pages{*this};
  if (Block* block = take_cached(request)) return block;
  if (policy_ == PlacementPolicy::kCudacache) {
    // Note [Blocks under a granule], then Note [New pages first].
    if (Block* block = take_hole_under_granule(request)) return block;
    if (Block* block = grow_in_new_pages(request)) return block;
  }
  const bool native = policy_ == PlacementPolicy::kPyTorchNative;
  if (native && options_.per_process_memory_fraction.is_set() &&
      options_.garbage_collection_threshold.value > 0.0) {
    garbage_collect();
  }
  if (Block* block = grow(request, false)) return block;
  if (native && release_oversize_blocks(request)) {
    if (Block* block = grow(request, false)) return block;
  }
  release_cached_blocks(/*keep_pages=*/policy_ == PlacementPolicy::kCudacache);
  if (Block* block = grow(request, true)) return block;
  if (Block* block = take_cached(request)) return block;  // Note [Search after release]
  return policy_ == PlacementPolicy::kCudacache ? take_other_pools_hole(request) : nullptr;
}

Block* DeviceAllocator::take_cached(const Request& request) {
  Block* block = take_best_fit(request);
  // Nearly every hit cuts no page: fit_own_pages() only where one may be cut.
  if (block == nullptr || policy_ != PlacementPolicy::kCudacache || !may_cut_page(block, request)) {
    return block;
  }
  return fit_own_pages(block, request);
}

Block* DeviceAllocator::take_best_fit(const Request& request) {
  const FitRule rule =
      policy_ == PlacementPolicy::kPyTorchNative ? FitRule::kSmallest : FitRule::kLeastGrowable;
  const Lifetime lifetime = placement_lifetime(request);
  return request.pool->take_best_fit(request.stream, request.size, options_.max_split_size(), rule,
                                     lifetime);
}

Block* DeviceAllocator::grow(Request& request, bool is_retry) {
  if (is_retry) stats_.values().num_alloc_retries += 1;
  // The cap is checked against a whole segment's size also for expandable segments (PyTorch).
  if (reserved_total_ + segment_size(request.size) > allowed_maximum_) {
    request.fraction_cap_hit = true;
    return nullptr;
  }
  return expandable() ? allocate_expandable(request) : allocate_segment(request);
}

void DeviceAllocator::release_cached_blocks(bool keep_pages) {
  if (events_.pending() != 0) {
    reserve_host_memory(events_.pending());  // as in process_events
    const cudaError_t error = events_.synchronize_all(
        [this](Block* block) CUDACACHE_NO_THREAD_SAFETY_ANALYSIS { free_block(block); });
    if (error != cudaSuccess) {
      logger().error("device {}: waiting for stream events failed: {}", device_,
                     device_api::error_string(error));
    }
  }
  stats_.values().num_sync_all_streams += 1;
  if (!expandable()) {
    release_free_segments();
    return;
  }
  // The pages kept are unmapped and in no index: a std::bad_alloc on the way gives them back to
  // the device (Note [Host memory runs out]); the loop that sorts them allocates nothing.
  std::vector<Page> kept;
  std::vector<Page> released;
  try {
    release_free_pages(keep_pages ? &kept : nullptr);
    released.reserve(kept.size());
    moved_pages_.reserve(moved_pages_.size() + kept.size());
  } catch (...) {
    release_pages(*backend_, kept);
    throw;
  }
  const std::size_t first_moved = moved_pages_.size();
  for (const Page& page : kept) {
    (page.size <= kSmallPage || page.exclusive ? moved_pages_ : released).push_back(page);
  }
  log_pages("moved", moved_pages_, first_moved, "the out-of-memory ladder");
  release_pages(*backend_, released);
}
void DeviceAllocator::process_events() {
  // Every block whose event completed is freed in this one call: spares for as many
  // insertions, reserved before the first event leaves its queue (Note [Host memory runs out]).
  reserve_host_memory(events_.pending());
  const cudaError_t error = events_.process_ready(
      [this](Block* block) CUDACACHE_NO_THREAD_SAFETY_ANALYSIS { free_block(block); });
  if (error != cudaSuccess) {
    logger().error("device {}: cudaEventQuery failed: {}", device_,
                   device_api::error_string(error));
  }
}

void* DeviceAllocator::finish_allocation(Block* block, const Request& request) {
  // The entry first (Note [Host memory runs out]): it is the one host allocation left here (a
  // node when no free left one, or a rehash), and when it throws, the block goes back to its
  // pool, whose reserve lets that allocate nothing. The split keeps the block's address.
  try {
    if (!spare_allocated_node_.empty()) {
      spare_allocated_node_.key() = block->pointer();
      spare_allocated_node_.mapped() = block;
      allocated_.insert(std::move(spare_allocated_node_));  // on a throw the node stays ours
      spare_allocated_node_ = {};
    } else if (!spare_allocated_nodes_.empty()) {
      auto& node = spare_allocated_nodes_.back();
      node.key() = block->pointer();
      node.mapped() = block;
      allocated_.insert(std::move(node));  // on a throw the node stays among the spares
      spare_allocated_nodes_.pop_back();
    } else {
      allocated_.emplace(block->pointer(), block);
    }
  } catch (...) {
    pool_of(*block).insert(block);
    throw;
  }
  MemoryStats& stats = stats_.values();
  BlockPool& pool = *request.pool;
  const PoolKind kind = pool.kind();
  // PyTorch does not keep the inactive_split counters for expandable segments.
  const bool track_splits = !expandable();
  const bool already_split = block->is_split();
  if (should_split(kind, block->size, request.size, options_.max_split_size(), expandable())) {
    Block* remainder = split_block(block, request.size, pool);
    remainder->gc_count_base = pool.search_count();
    pool.insert(remainder);
    if (track_splits && already_split) {
      DeviceStats::decrease(stats.inactive_split_bytes, kind, as_signed(block->size));
    } else if (track_splits) {
      DeviceStats::increase(stats.inactive_split_bytes, kind, as_signed(remainder->size));
      DeviceStats::increase(stats.inactive_split, kind, 1);
    }
  } else if (track_splits && already_split) {
    DeviceStats::decrease(stats.inactive_split_bytes, kind, as_signed(block->size));
    DeviceStats::decrease(stats.inactive_split, kind, 1);
  }
  block->allocated = true;
  block->requested_size = request.requested;
  block->stack = request.stack;
  block->step = growth_.step();
  // Every allocation counts in lifetimes and contexts, only the large pool's get one.
  block->context = request.context;
  if (policy_ == PlacementPolicy::kCudacache) block->born = lifetimes_.allocated(request.size);

  DeviceStats::increase(stats.allocation, kind, 1);
  DeviceStats::increase(stats.allocated_bytes, kind, as_signed(block->size));
  DeviceStats::increase(stats.active, kind, 1);
  DeviceStats::increase(stats.active_bytes, kind, as_signed(block->size));
  peak_active_bytes_ =
      std::max(peak_active_bytes_, static_cast<std::size_t>(stats.active_bytes[kAllPools].current));
  DeviceStats::increase(stats.requested_bytes, kind, as_signed(block->requested_size));
  if (block->size >= options_.max_split_size())
    DeviceStats::increase(stats.oversize_allocations, 1);
  record_event(HistoryAction::kAlloc, block->address, block->requested_size, block->size, 0,
               block->stream, block->stack);
  return block->pointer();
}

void DeviceAllocator::deallocate(void* ptr) { deallocate_checked(ptr, std::nullopt); }

void DeviceAllocator::deallocate(void* ptr, std::size_t requested_size) {
  deallocate_checked(ptr, requested_size);
}

bool DeviceAllocator::deallocate_if_owned(void* ptr) {
  MutexLock lock(mutex_);
  const auto it = allocated_.find(ptr);
  if (it == allocated_.end()) return false;
  pool_of(*it->second).reserve_host_memory();
  release_allocation(take_allocated(it));
  return true;
}

void DeviceAllocator::deallocate_checked(void* ptr, std::optional<std::size_t> requested_size) {
  if (ptr == nullptr) return;
  MutexLock lock(mutex_);
  const auto it = allocated_.find(ptr);
  if (it == allocated_.end()) {
    report::unknown_pointer("cudacache: free of " + pointer_text(ptr) +
                            ", which is not allocated on device " + std::to_string(device_) +
                            " (never allocated, or already freed)");
  }
  Block* block = it->second;
  if (requested_size && *requested_size != block->requested_size) {
    report::invalid_argument("cudacache: free of " + pointer_text(ptr) + " with size " +
                             std::to_string(*requested_size) +
                             " bytes, but it was allocated with " +
                             std::to_string(block->requested_size) + " bytes");
  }
  pool_of(*block).reserve_host_memory();
  release_allocation(take_allocated(it));
}

void DeviceAllocator::reserve_host_memory(std::size_t insertions) {
  small_pool_.reserve_host_memory(insertions);
  large_pool_.reserve_host_memory(insertions);
}

Block* DeviceAllocator::take_allocated(std::unordered_map<void*, Block*>::iterator it) {
  Block* block = it->second;
  auto node = allocated_.extract(it);
  // Kept for the next allocations while there is room (a push within it never allocates);
  // beyond it, the node is freed here.
  if (spare_allocated_node_.empty()) {
    spare_allocated_node_ = std::move(node);
  } else if (spare_allocated_nodes_.size() < spare_allocated_nodes_.capacity()) {
    spare_allocated_nodes_.push_back(std::move(node));
  }
  return block;
}

void DeviceAllocator::release_allocation(Block* block) {
  MemoryStats& stats = stats_.values();
  const PoolKind kind = block->segment->pool;
  block->allocated = false;
  // What it leaves behind is a long-lived hole if it lived long (Note [Lifetime classes]): a
  // mark only the large pool places by (a large request in a small-pool hole still teaches).
  const bool lived_long = block->context != 0 && lifetimes_.freed(block->context, block->born);
  block->long_lived_hole = lived_long && kind == PoolKind::kLarge;
  record_event(HistoryAction::kFreeRequested, block->address, block->requested_size, block->size, 0,
               block->stream);
  DeviceStats::decrease(stats.allocation, kind, 1);
  DeviceStats::decrease(stats.allocated_bytes, kind, as_signed(block->size));
  if (block->size >= options_.max_split_size())
    DeviceStats::decrease(stats.oversize_allocations, 1);
  // Note [Per-thread default streams]: cudaStreamPerThread is one handle, and so one pool key,
  // for every thread's own stream. A block freed on it waits, like a record_stream use, for an
  // event on the freeing thread's stream, so that no other thread reuses it while that
  // thread's work on it is still queued.
  if (block->stream == cudaStreamPerThread &&
      std::find(block->stream_uses.begin(), block->stream_uses.end(), cudaStreamPerThread) ==
          block->stream_uses.end()) {
    try {
      block->stream_uses.push_back(cudaStreamPerThread);
    } catch (const std::bad_alloc&) {
      // No room to wait by event, and the block is in no map: the device's work is waited for
      // now instead.
      device_api::synchronize(device_);
      block->stream_uses.clear();
      free_block(block);
      return;
    }
  }
  if (block->stream_uses.empty()) {
    free_block(block);
    return;
  }
  cudaError_t error = cudaSuccess;
  try {
    error = events_.record(device_, block);
  } catch (const std::bad_alloc&) {  // the block is in no map and no pool: not to be lost
    error = cudaErrorMemoryAllocation;
  }
  if (error != cudaSuccess) {
    // Without events the only safe fallback is to wait for all work on the device.
    logger().error("device {}: recording stream events failed ({}); synchronizing the device",
                   device_, device_api::error_string(error));
    device_api::synchronize(device_);
    block->stream_uses.clear();
    free_block(block);
  }
}

void DeviceAllocator::free_block(Block* block) {
  MemoryStats& stats = stats_.values();
  BlockPool& pool = pool_of(*block);
  const PoolKind kind = pool.kind();
  const std::size_t original_size = block->size;
  const std::size_t requested = block->requested_size;
  record_event(HistoryAction::kFreeCompleted, block->address, requested, original_size, 0,
               block->stream);
  std::int64_t split_blocks_change = 0;
  std::int64_t split_bytes_change = 0;
  for (Block* neighbour : {block->prev, block->next}) {
    const std::size_t absorbed = try_merge(block, neighbour, pool);
    if (absorbed > 0) {
      split_blocks_change -= 1;
      split_bytes_change -= as_signed(absorbed);
    }
  }
  block->requested_size = 0;
  block->gc_count_base = pool.search_count();
  pool.insert(block);
  if (block->is_split()) {
    split_blocks_change += 1;
    split_bytes_change += as_signed(block->size);
  }
  if (expandable()) split_blocks_change = split_bytes_change = 0;  // not kept (PyTorch)
  if (split_blocks_change > 0)
    DeviceStats::increase(stats.inactive_split, kind, split_blocks_change);
  if (split_blocks_change < 0)
    DeviceStats::decrease(stats.inactive_split, kind, -split_blocks_change);
  if (split_bytes_change > 0)
    DeviceStats::increase(stats.inactive_split_bytes, kind, split_bytes_change);
  if (split_bytes_change < 0)
    DeviceStats::decrease(stats.inactive_split_bytes, kind, -split_bytes_change);
  DeviceStats::decrease(stats.active, kind, 1);
  DeviceStats::decrease(stats.active_bytes, kind, as_signed(original_size));
  DeviceStats::decrease(stats.requested_bytes, kind, as_signed(requested));
}

void DeviceAllocator::record_stream(void* ptr, cudaStream_t stream) {
  if (!record_stream_if_owned(ptr, stream)) {
    report::unknown_pointer("cudacache: record_stream on " + pointer_text(ptr) +
                            ", which is not allocated on device " + std::to_string(device_));
  }
}

bool DeviceAllocator::record_stream_if_owned(void* ptr, cudaStream_t stream) {
  MutexLock lock(mutex_);
  const auto it = allocated_.find(ptr);
  if (it == allocated_.end()) return false;
  validate_stream(stream);
  Block* block = it->second;
  if (stream == block->stream) return true;
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
  return true;
}

void DeviceAllocator::empty_cache() {
  MutexLock lock(mutex_);
  reserve_host_memory();
  const std::size_t reserved_before = reserved_total_;
  release_cached_blocks();
  record_event(HistoryAction::kEmptyCache, 0, reserved_before - reserved_total_, 0, 0, nullptr);
}

MemoryStats DeviceAllocator::stats() const {
  MutexLock lock(mutex_);
  return stats_.values();
}

void DeviceAllocator::reset_peak_stats() {
  MutexLock lock(mutex_);
  stats_.reset_peaks();
}

void DeviceAllocator::reset_accumulated_stats() {
  MutexLock lock(mutex_);
  stats_.reset_accumulated();
}

MemorySnapshot DeviceAllocator::snapshot() const {
  MutexLock lock(mutex_);
  MemorySnapshot snapshot;
  snapshot.segments.reserve(segments_.size());
  for (const auto& [base, segment] : segments_) add_segment_snapshots(*segment, snapshot);
  snapshot.trace = history_.entries();
  return snapshot;
}

// A cudaMalloc segment is one snapshot segment; an expandable segment is one per mapped run
// (PyTorch's convention; unmapped stretches are not memory).
void DeviceAllocator::add_segment_snapshots(const Segment& segment,
                                            MemorySnapshot& snapshot) const {
  SegmentSnapshot* out = nullptr;
  for (const Block* block = segment.head; block != nullptr; block = block->next) {
    if (!block->mapped) {
      out = nullptr;
      continue;
    }
    if (out == nullptr) {
      out = &snapshot.segments.emplace_back();
      out->device = device_;
      out->address = block->address;
      out->stream = reinterpret_cast<std::uintptr_t>(segment.stream);
      out->segment_type = segment.pool == PoolKind::kSmall ? "small" : "large";
      out->is_expandable = segment.expandable != nullptr;
    }
    out->total_size += block->size;
    BlockSnapshot& entry = out->blocks.emplace_back();
    entry.address = block->address;
    entry.size = block->size;
    entry.requested_size = block->requested_size;
    if (block->allocated) {
      entry.state = "active_allocated";
      out->allocated_size += block->size;
    } else if (block->pending_events > 0) {
      entry.state = "active_pending_free";
    } else {
      entry.state = "inactive";
    }
    if (block->allocated || block->pending_events > 0) {
      entry.stack = block->stack;
      out->active_size += block->size;
      out->requested_size += block->requested_size;
    }
  }
}

std::string DeviceAllocator::snapshot_json() const { return snapshot_to_json(snapshot()); }

void DeviceAllocator::record_history(std::size_t max_entries, StackKind stacks) {
  if (max_entries > kMaxHistoryEntries) {
    report::invalid_argument("cudacache: record_history of " + std::to_string(max_entries) +
                             " entries is above the maximum " + std::to_string(kMaxHistoryEntries) +
                             " (0 stops recording)");
  }
  MutexLock lock(mutex_);
  if (max_entries == 0) {
    history_.stop();
    history_stacks_ = StackKind::kNone;
    logger().info("device {}: history recording stopped ({} entries kept)", device_,
                  history_.size());
  } else {
    history_.start(max_entries);
    history_stacks_ = stacks;
    logger().info("device {}: recording history, at most {} entries, stacks: {}", device_,
                  max_entries, stack_kind_name(stacks));
  }
  update_capture_kind();
}

void DeviceAllocator::update_capture_kind() {
  const auto history = history_.recording() ? static_cast<std::uint8_t>(history_stacks_) : 0;
  const auto growth = growth_.watching() ? static_cast<std::uint8_t>(growth_stacks_) : 0;
  capture_kind_.store(static_cast<std::uint8_t>(history | growth), std::memory_order_relaxed);
}

void DeviceAllocator::watch_growth(unsigned rising_steps, StackKind stacks, bool quiet) {
  MutexLock lock(mutex_);
  growth_.watch(rising_steps,
                static_cast<std::size_t>(stats_.values().allocated_bytes[kAllPools].current));
  growth_stacks_ = rising_steps > 0 ? stacks : StackKind::kNone;
  growth_quiet_ = quiet;
  update_capture_kind();
  logger().info("device {}: growth watch {} ({} rising steps, stacks: {})", device_,
                rising_steps > 0 ? "started" : "stopped", rising_steps, stack_kind_name(stacks));
}

bool DeviceAllocator::mark_step() {
  MutexLock lock(mutex_);
  const auto allocated =
      static_cast<std::size_t>(stats_.values().allocated_bytes[kAllPools].current);
  if (!growth_.end_step(allocated)) return false;
  std::vector<GrowingBlock> live;
  live.reserve(allocated_.size());
  for (const auto& [pointer, block] : allocated_) {
    live.push_back({block->stack, block->step, block->size});
  }
  std::vector<StackTally> tallies = growth_.tally(live);
  const GrowthReport rise = growth_.report(device_);
  const std::uint64_t step = growth_.step();
  // Sites are told apart by their frames, and naming frames takes the dynamic linker's lock:
  // not under ours.
  lock.unlock();
  GrowthReport report = make_growth_report(device_, rise, std::move(tallies));
  lock.lock();
  // Another step ended or a new watch began meanwhile: this report is not theirs.
  if (growth_.step() != step || !growth_.record(report)) return false;
  const bool quiet = growth_quiet_;
  lock.unlock();
  const std::string message = describe_growth(report);
  logger().warn("{}", message);
  // The user asked for this warning (detect_growth, watch_growth): it is printed whatever the
  // log level, unless the caller reports it itself.
  if (!quiet) std::fprintf(stderr, "%s\n", message.c_str());
  return true;
}

GrowthReport DeviceAllocator::growth_report() const {
  MutexLock lock(mutex_);
  return growth_.report(device_);
}

std::vector<HistoryEntry> DeviceAllocator::history() const {
  MutexLock lock(mutex_);
  return history_.entries();
}

std::string DeviceAllocator::history_csv() const {
  std::vector<HistoryEntry> entries;
  std::vector<LiveBlock> live;
  {
    MutexLock lock(mutex_);
    entries = history_.entries();
    for (const auto& [base, segment] : segments_) {
      for (const Block* block = segment->head; block != nullptr; block = block->next) {
        if (block->allocated || block->pending_events > 0) {
          live.push_back({block->address, block->requested_size,
                          reinterpret_cast<std::uintptr_t>(block->stream)});
        }
      }
    }
  }
  return history_to_csv(entries, live);
}

void DeviceAllocator::validate_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return;
  // Checked at every use, not remembered: a destroyed stream must stay rejected, and CUDA hands
  // a destroyed stream's handle to the next stream created, maybe on another device. One
  // host-side lookup (cudaStreamGetDevice), no device work.
  int stream_device = -1;
  const cudaError_t error = device_api::stream_device(stream, &stream_device);
  if (error != cudaSuccess) {
    report::invalid_argument("cudacache: " + pointer_text(stream) +
                             " is not a valid CUDA stream (cudaStreamGetDevice: " +
                             device_api::error_string(error) + ")");
  }
  if (stream_device != device_) {
    report::wrong_device("cudacache: stream " + pointer_text(stream) + " belongs to device " +
                         std::to_string(stream_device) + ", not to device " +
                         std::to_string(device_));
  }
}

void DeviceAllocator::write_stats_slot() {
  using namespace stats_page;
  const MemoryStats& stats = stats_.values();
  const auto current = [](const StatArray& array) {
    return static_cast<std::uint64_t>(array[kAllPools].current);
  };
  std::uint64_t values[kNumFields];
  values[kAllocatedBytes] = current(stats.allocated_bytes);
  values[kReservedBytes] = current(stats.reserved_bytes);
  values[kRequestedBytes] = current(stats.requested_bytes);
  values[kPeakAllocatedBytes] = static_cast<std::uint64_t>(stats.allocated_bytes[kAllPools].peak);
  values[kPeakReservedBytes] = static_cast<std::uint64_t>(stats.reserved_bytes[kAllPools].peak);
  values[kLargestFreeBlockBytes] =
      std::max(small_pool_.largest_free_block(), large_pool_.largest_free_block());
  values[kAllocations] = current(stats.allocation);
  values[kSegments] = current(stats.segment);
  values[kOoms] = static_cast<std::uint64_t>(stats.num_ooms);
  values[kAllocRetries] = static_cast<std::uint64_t>(stats.num_alloc_retries);
  values[kDeviceAllocs] = static_cast<std::uint64_t>(stats.num_device_alloc);
  values[kDeviceFrees] = static_cast<std::uint64_t>(stats.num_device_free);
  values[kUpdates] = ++stats_updates_;
  stats_slot_->publish(values);
}

OomReport DeviceAllocator::make_report(const Request& request) const {
  OomReport report;
  report.device = device_;
  report.requested_bytes = request.requested;
  const cudaError_t error =
      device_api::memory_info(device_, &report.device_free_bytes, &report.device_total_bytes);
  if (error != cudaSuccess) {
    logger().error("device {}: cudaMemGetInfo failed: {}", device_,
                   device_api::error_string(error));
    // The total from the device's properties when it was read; 0 says "unknown" (oom_report).
    report.device_total_bytes = device_total_bytes_;
    report.device_free_bytes = 0;
  }
  report.allocated_bytes =
      static_cast<std::size_t>(stats_.values().allocated_bytes[kAllPools].current);
  report.reserved_bytes = reserved_total_;
  report.reserved_unallocated_bytes = reserved_total_ - report.allocated_bytes;
  report.largest_free_cached_block =
      std::max(small_pool_.largest_free_block(), large_pool_.largest_free_block());
  report.fragmentation = fragmentation(report.reserved_bytes, report.allocated_bytes,
                                       report.largest_free_cached_block);
  report.fraction_cap_hit = request.fraction_cap_hit;
  report.address_range_refused_bytes = request.address_range_refused;
  for (const BlockPool* pool : {&large_pool_, &small_pool_}) {
    pool->for_each_free([&](const Block* block) {
      if (block->stream != request.stream) report.free_on_other_streams_bytes += block->size;
    });
  }
  report.pages = expandable();
  if (report.pages) {
    const PartialPageBytes partial = free_in_partial_pages();
    report.free_in_partial_pages_bytes = partial.in_partial_pages;
    report.free_beside_in_use_bytes = partial.beside_in_use;
  }
  return report;
}

DeviceAllocator::PartialPageBytes DeviceAllocator::free_in_partial_pages() const {
  PartialPageBytes bytes;
  for (const BlockPool* pool : {&large_pool_, &small_pool_}) {
    pool->for_each_free([&](const Block* block) {
      bytes.in_partial_pages += block->size;
      block->segment->expandable->for_each_page_inside(
          block->address, block->size,
          [&](std::uintptr_t, const Page& page) { bytes.in_partial_pages -= page.size; });
      // A free block ends mid-granule only beside a block in use (free neighbours merge): the
      // granules at its two ends, where they are not wholly its own.
      const std::uintptr_t end = block->address + block->size;
      const std::uintptr_t head_end =
          std::min<std::uintptr_t>(end, round_up(block->address, kSmallPage));
      const std::uintptr_t tail_start =
          std::max<std::uintptr_t>(head_end, end / kSmallPage * kSmallPage);
      bytes.beside_in_use += (head_end - block->address) + (end - tail_start);
    });
  }
  return bytes;
}

std::size_t DeviceAllocator::releasable_bytes() const {
  MutexLock lock(mutex_);
  std::size_t bytes = 0;
  for (const BlockPool* pool : {&large_pool_, &small_pool_}) {
    pool->for_each_free([&](const Block* block) {
      if (!expandable()) {
        if (!block->is_split()) bytes += block->size;
        return;
      }
      block->segment->expandable->for_each_page_inside(
          block->address, block->size,
          [&](std::uintptr_t, const Page& page) { bytes += page.size; });
    });
  }
  return bytes;
}

OomContext DeviceAllocator::make_context(const Request& request, int round) const {
  OomContext context{};
  context.device = device_;
  context.round = round;
  context.requested_bytes = request.requested;
  context.allocated_bytes =
      static_cast<std::size_t>(stats_.values().allocated_bytes[kAllPools].current);
  context.reserved_bytes = reserved_total_;
  device_api::memory_info(device_, &context.device_free_bytes, &context.device_total_bytes);
  return context;
}

BlockPool& DeviceAllocator::pool_of(const Block& block) {
  return block.segment->pool == PoolKind::kSmall ? small_pool_ : large_pool_;
}

}  // namespace cudacache
