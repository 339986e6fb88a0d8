// Allocation history: a bounded ring of allocator events in PyTorch's trace vocabulary
// (torch.cuda.memory._record_memory_history), exported in the snapshot's device_traces and as
// a replay CSV (history_csv.h).
//
// Actions and what their fields mean (PyTorch's meaning of `size`):
//   alloc            block handed out          addr = block, size = requested bytes
//   free_requested   the caller freed it       addr = block, size = requested bytes
//   free_completed   reusable (stream events   addr = block, size = requested bytes
//                    done; at once without)
//   segment_alloc    cudaMalloc of a segment   addr = segment, size = segment bytes
//   segment_free     cudaFree of a segment     addr = segment, size = segment bytes
//   segment_map      pages mapped into an      addr = first page, size = bytes mapped
//                    expandable segment
//   segment_unmap    pages unmapped from one   addr = first page, size = bytes unmapped
//   oom              an allocation failed      addr = bytes free on the device (PyTorch's
//                                              `device_free`), size = rounded request
//   empty_cache      empty_cache() returned    addr = 0, size = segment bytes it released
//                    (a cudacache extension; its segment_free entries come before it)
// alloc and oom entries carry the allocation's stack (`frames`) when stacks are captured
// (record_stacks, stack_table.h); the others have none.
// Every entry also keeps the rounded block size (`block_size`, alloc and free entries) and the
// caller's size (`requested_size`, oom), the stream handle, and the time in microseconds since
// the Unix epoch (a monotonic clock read, shifted by the wall-clock offset taken at start).
//
// Not thread safe: the owning DeviceAllocator calls it under its mutex.
#pragma once

#include "stack_table.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cudacache {

enum class HistoryAction : std::uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,    // expandable segments: pages mapped
  kSegmentUnmap,  // expandable segments: pages unmapped
  kOom,
  kEmptyCache,
};

// "alloc", "free_requested", ...: the `action` string of the snapshot schema.
const char* history_action_name(HistoryAction action);

struct HistoryEntry {
  HistoryAction action = HistoryAction::kAlloc;
  StackId stack = 0;               // alloc and oom: the allocation's stack, when captured
  std::uintptr_t address = 0;      // device_free bytes for oom, 0 for empty_cache
  std::size_t size = 0;            // PyTorch's `size`, see the table above
  std::size_t block_size = 0;      // rounded block size (alloc, free_*), else 0
  std::size_t requested_size = 0;  // caller's size (oom), else 0
  std::uintptr_t stream = 0;       // cudaStream_t handle as an integer (0 = legacy default)
  std::int64_t time_us = 0;        // microseconds since the Unix epoch
};

// Upper bound of record_history: 100 million entries (56 bytes each: 5.6 GB when full; the
// ring grows as it fills, so a large bound costs nothing until used).
inline constexpr std::size_t kMaxHistoryEntries = 100'000'000;

class AllocationHistory {
 public:
  // Starts a new recording of at most max_entries entries (1..kMaxHistoryEntries; the caller
  // validates) and drops what was recorded before.
  void start(std::size_t max_entries);
  // Stops recording; the entries stay readable until the next start().
  void stop() { capacity_ = 0; }
  bool recording() const { return capacity_ != 0; }

  // Appends an entry, overwriting the oldest when the ring is full. Requires recording().
  void record(HistoryAction action, std::uintptr_t address, std::size_t size,
              std::size_t block_size, std::size_t requested_size, std::uintptr_t stream,
              StackId stack = 0);

  // The entries, oldest first.
  std::vector<HistoryEntry> entries() const;
  std::size_t size() const { return ring_.size(); }
  // Entries overwritten since start() because the ring was full.
  std::uint64_t dropped() const { return dropped_; }

 private:
  std::vector<HistoryEntry> ring_;  // grows up to capacity, then wraps at next_
  std::size_t capacity_ = 0;        // 0 = not recording
  std::size_t next_ = 0;            // slot of the next entry once the ring is full
  std::uint64_t dropped_ = 0;
  std::int64_t wall_offset_ns_ = 0;  // system_clock - steady_clock, taken at start()
};

}  // namespace cudacache
