// What an allocator looked like after a replay, in the schema of torch.cuda.memory._snapshot()
// (segments at the end, and the trace of what happened), so that --memory-viz can write it as a
// pickle that PyTorch's memory_viz opens. Plain data, independent of the allocator library.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cudacache::replay {

struct SnapshotBlock {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t requested_size = 0;
  std::string state;  // active_allocated | active_pending_free | inactive
};

struct SnapshotSegment {
  std::uint64_t address = 0;
  std::uint64_t total_size = 0;
  std::uint64_t allocated_size = 0;
  std::uint64_t active_size = 0;
  std::uint64_t requested_size = 0;
  std::uint64_t stream = 0;
  std::string segment_type = "large";  // small | large
  bool is_expandable = false;
  std::vector<SnapshotBlock> blocks;  // in address order, tiling the segment
};

// One device_traces entry. `size` has PyTorch's meaning: requested bytes for alloc and frees,
// segment bytes for segment events.
struct SnapshotEntry {
  std::string action;  // alloc, free_requested, free_completed, segment_alloc, ...
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t stream = 0;
  std::int64_t time_us = 0;
};

struct ReplaySnapshot {
  std::vector<SnapshotSegment> segments;  // in address order
  std::vector<SnapshotEntry> trace;       // oldest first
};

// Microseconds since the Unix epoch, the clock of the entries the adapters record themselves.
std::int64_t snapshot_time_us();

}  // namespace cudacache::replay

namespace cudacache::replay {

// The trace an adapter without a history of its own keeps (cub, nocache): nothing until
// start(), then at most `max_entries`, the oldest dropped first as in PyTorch's ring.
class SnapshotTrace {
 public:
  void start(std::size_t max_entries);
  bool recording() const { return max_entries_ != 0; }
  void record(const char* action, std::uint64_t address, std::uint64_t size, std::uint64_t stream);
  std::vector<SnapshotEntry> entries() const;

 private:
  std::size_t max_entries_ = 0;
  std::size_t first_ = 0;  // index of the oldest entry once the ring is full
  std::vector<SnapshotEntry> ring_;
};

}  // namespace cudacache::replay
