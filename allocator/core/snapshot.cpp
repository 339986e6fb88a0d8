#include "snapshot.h"

#include "json_writer.h"

namespace cudacache {
namespace {

// PyTorch's trace entry keys (torch/csrc/cuda/memory_snapshot.cpp): action, addr (device_free
// for oom), size, stream, time_us, frames; plus cudacache's block_size / requested_size.
void write_trace_entry(JsonWriter& json, const HistoryEntry& entry) {
  json.begin_object();
  json.field("action", history_action_name(entry.action));
  json.field(entry.action == HistoryAction::kOom ? "device_free" : "addr",
             static_cast<std::uint64_t>(entry.address));
  json.field("size", static_cast<std::uint64_t>(entry.size));
  switch (entry.action) {
    case HistoryAction::kAlloc:
    case HistoryAction::kFreeRequested:
    case HistoryAction::kFreeCompleted:
      json.field("block_size", static_cast<std::uint64_t>(entry.block_size));
      break;
    case HistoryAction::kOom:
      json.field("requested_size", static_cast<std::uint64_t>(entry.requested_size));
      break;
    default: break;
  }
  json.field("stream", static_cast<std::uint64_t>(entry.stream));
  json.field("time_us", entry.time_us);
  json.key("frames");
  write_frames(json, entry.stack);
  json.end_object();
}

void write_segments(JsonWriter& json, const MemorySnapshot& snapshot) {
  for (const SegmentSnapshot& segment : snapshot.segments) {
    json.begin_object();
    json.field("device", static_cast<std::int64_t>(segment.device));
    json.field("address", static_cast<std::uint64_t>(segment.address));
    json.field("total_size", static_cast<std::uint64_t>(segment.total_size));
    json.field("allocated_size", static_cast<std::uint64_t>(segment.allocated_size));
    json.field("active_size", static_cast<std::uint64_t>(segment.active_size));
    json.field("requested_size", static_cast<std::uint64_t>(segment.requested_size));
    json.field("stream", static_cast<std::uint64_t>(segment.stream));
    json.field("segment_type", segment.segment_type);
    json.field("is_expandable", segment.is_expandable);
    json.key("frames");
    json.begin_array();
    json.end_array();
    json.key("blocks");
    json.begin_array();
    for (const BlockSnapshot& block : segment.blocks) {
      json.begin_object();
      json.field("address", static_cast<std::uint64_t>(block.address));
      json.field("size", static_cast<std::uint64_t>(block.size));
      json.field("requested_size", static_cast<std::uint64_t>(block.requested_size));
      json.field("state", block.state);
      json.key("frames");
      write_frames(json, block.stack);
      json.end_object();
    }
    json.end_array();
    json.end_object();
  }
}

}  // namespace

std::string snapshot_to_json(const MemorySnapshot& snapshot) {
  return snapshots_to_json({snapshot});
}

std::string snapshots_to_json(const std::vector<MemorySnapshot>& snapshots) {
  JsonWriter json;
  json.begin_object();
  json.key("segments");
  json.begin_array();
  for (const MemorySnapshot& snapshot : snapshots) write_segments(json, snapshot);
  json.end_array();
  json.key("device_traces");
  json.begin_array();
  for (const MemorySnapshot& snapshot : snapshots) {
    json.begin_array();
    for (const HistoryEntry& entry : snapshot.trace) write_trace_entry(json, entry);
    json.end_array();
  }
  json.end_array();
  json.end_object();
  return json.str();
}

}  // namespace cudacache
