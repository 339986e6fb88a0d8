// Memory snapshot in the schema of torch.cuda.memory._snapshot():
// {"segments": [...], "device_traces": [[...]]}. device_traces holds one list, this device's
// allocation history (history.h; empty unless record_history was on), oldest entry first.
#pragma once

#include "history.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cudacache {

struct BlockSnapshot {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::size_t requested_size = 0;
  const char* state = "inactive";  // active_allocated | active_pending_free | inactive
  StackId stack = 0;               // where it was allocated (allocated or pending blocks)
};

struct SegmentSnapshot {
  int device = 0;
  std::uintptr_t address = 0;
  std::size_t total_size = 0;
  std::size_t allocated_size = 0;  // blocks allocated now
  std::size_t active_size = 0;     // allocated or pending free
  std::size_t requested_size = 0;  // requested bytes of active blocks
  std::uintptr_t stream = 0;
  const char* segment_type = "large";  // small | large
  bool is_expandable = false;
  std::vector<BlockSnapshot> blocks;
};

struct MemorySnapshot {
  std::vector<SegmentSnapshot> segments;  // in address order
  std::vector<HistoryEntry> trace;        // oldest first
};

std::string snapshot_to_json(const MemorySnapshot& snapshot);
// Several devices in one document: every segment, and one device_traces list per snapshot in
// the order given (torch.cuda.memory._snapshot() of the whole process).
std::string snapshots_to_json(const std::vector<MemorySnapshot>& snapshots);

}  // namespace cudacache
