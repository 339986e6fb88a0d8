// Converts a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into a replay trace,
// by the rules that produced the CSVs of ../shared/traces:
//  - rows come from device_traces[device]: `alloc` events, and frees at `free_completed`
//    (the moment memory returns), or at `free_requested` when the trace has no
//    free_completed at all;
//  - addresses become ids: a free closes the id most recently allocated at its address;
//  - recordings that start mid-run get "prelude" alloc rows first, ids 0..P-1: one per free of
//    an address never allocated in the trace (in order of those frees, with the free's size),
//    then one per block that `segments` shows live at the dump but that no trace alloc left
//    open (in segment and block order, with the block's requested size);
//  - streams: 0 stays 0, other stream handles become 1, 2, ... in order of first use;
//  - segment_alloc/segment_free/segment_map/segment_unmap, snapshot and oom events are not
//    rows; they are counted.
#pragma once

#include <cstdint>
#include <string>

#include "pickle_value.h"
#include "trace.h"

namespace cudacache::replay {

struct SnapshotConversion {
  Trace trace;
  std::string free_action;  // "free_completed" or "free_requested"
  std::uint64_t prelude_rows = 0;
  std::uint64_t prelude_freed_in_trace = 0;
  std::uint64_t prelude_live_at_dump = 0;
  std::uint64_t segment_release_events = 0;  // segment_free + segment_unmap
  std::uint64_t oom_events = 0;
  std::uint64_t realloc_without_free = 0;
  std::uint64_t alloc_free_size_mismatches = 0;
  // Allocations the trace leaves open whose address no active block of `segments` has.
  std::uint64_t open_at_end_not_in_segments = 0;
};

// Throws TraceError naming `source` on a snapshot of the wrong shape.
SnapshotConversion convert_snapshot(const PickleValue& snapshot, int device,
                                    const std::string& source);

// Reads a pickle file ("-" = stdin; a gzip file is refused) and converts it; the trace is
// named after the file's stem ("stdin" for "-"), messages name the file or "<stdin>".
SnapshotConversion convert_snapshot_file(const std::string& path, int device = 0);

}  // namespace cudacache::replay
