#include "history.h"

#include <new>

#include <chrono>

namespace cudacache {
namespace {

std::int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t system_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

const char* history_action_name(HistoryAction action) {
  switch (action) {
    case HistoryAction::kAlloc: return "alloc";
    case HistoryAction::kFreeRequested: return "free_requested";
    case HistoryAction::kFreeCompleted: return "free_completed";
    case HistoryAction::kSegmentAlloc: return "segment_alloc";
    case HistoryAction::kSegmentFree: return "segment_free";
    case HistoryAction::kSegmentMap: return "segment_map";
    case HistoryAction::kSegmentUnmap: return "segment_unmap";
    case HistoryAction::kOom: return "oom";
    case HistoryAction::kEmptyCache: return "empty_cache";
  }
  return "unknown";
}

void AllocationHistory::start(std::size_t max_entries) {
  ring_ = {};  // also returns the memory of a larger earlier recording
  capacity_ = max_entries;
  next_ = 0;
  dropped_ = 0;
  // Entries read the monotonic clock (cheap, never jumps); this offset turns them into Unix
  // time as PyTorch reports it. Taking it once keeps the entries of a recording ordered.
  wall_offset_ns_ = system_ns() - steady_ns();
}

void AllocationHistory::record(HistoryAction action, std::uintptr_t address, std::size_t size,
                               std::size_t block_size, std::size_t requested_size,
                               std::uintptr_t stream, StackId stack) {
  const HistoryEntry entry{
      action,     stack,          address, size,
      block_size, requested_size, stream,  (steady_ns() + wall_offset_ns_) / 1000};
  if (ring_.size() < capacity_) {
    // A diagnostic never fails the call it records: without host memory for the ring to grow,
    // the entry is dropped (counted as such), not thrown.
    try {
      ring_.push_back(entry);
    } catch (const std::bad_alloc&) {
      ++dropped_;
    }
    return;
  }
  ring_[next_] = entry;
  next_ = next_ + 1 == capacity_ ? 0 : next_ + 1;
  ++dropped_;
}

std::vector<HistoryEntry> AllocationHistory::entries() const {
  std::vector<HistoryEntry> ordered;
  ordered.reserve(ring_.size());
  ordered.insert(ordered.end(), ring_.begin() + static_cast<std::ptrdiff_t>(next_), ring_.end());
  ordered.insert(ordered.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(next_));
  return ordered;
}

}  // namespace cudacache
