#include "snapshot_converter.h"

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pickle_reader.h"
#include "trace_csv.h"

namespace cudacache::replay {
namespace {

class ShapeChecker {
 public:
  explicit ShapeChecker(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw TraceError(source_ + ": " + where + ": " + what);
  }

  const PickleValue& field(const PickleValue& dict, const char* key,
                           const std::string& where) const {
    if (!dict.is_dict()) fail(where, std::string("expected a dict, got ") + kind_name(dict.kind));
    const PickleValue* value = dict.find(key);
    if (value == nullptr) fail(where, std::string("missing key '") + key + "'");
    return *value;
  }

  std::int64_t integer(const PickleValue& dict, const char* key, const std::string& where) const {
    const PickleValue& value = field(dict, key, where);
    if (value.kind == PickleValue::Kind::kBigInt) {
      fail(where, std::string("'") + key + "' is an int of more than 64 bits");
    }
    if (value.kind != PickleValue::Kind::kInt) {
      fail(where, std::string("'") + key + "' is a " + kind_name(value.kind) + ", expected an int");
    }
    return value.integer;
  }

  std::uint64_t size(const PickleValue& dict, const char* key, const std::string& where) const {
    std::int64_t value = integer(dict, key, where);
    if (value < 0) fail(where, std::string("negative '") + key + "'");
    return static_cast<std::uint64_t>(value);
  }

  const std::string& text(const PickleValue& dict, const char* key,
                          const std::string& where) const {
    const PickleValue& value = field(dict, key, where);
    if (value.kind != PickleValue::Kind::kString) {
      fail(where, std::string("'") + key + "' is a " + kind_name(value.kind) + ", expected a str");
    }
    return value.text;
  }

  const std::vector<PickleRef>& list(const PickleValue& value, const std::string& where) const {
    if (!value.is_list()) fail(where, std::string("expected a list, got ") + kind_name(value.kind));
    return value.items;
  }

  // A snapshot's events, segments and blocks are each their own object; the pickle memo can
  // list one object many times over, which multiplies the work a few bytes ask for (a 16 KB
  // pickle of one block listed 4,000 times in each of 4,000 segments made 16 M rows and 2.6 GB;
  // 40,000 references to one event of 40,000 keys took 21 s). Refused, as PyTorch never
  // writes them.
  void distinct(const std::vector<PickleRef>& items, std::unordered_set<const PickleValue*>& seen,
                const std::string& where) const {
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!seen.insert(items[i].get()).second) {
        fail(where + "[" + std::to_string(i) + "]",
             "the same object as an earlier entry (the pickle shares objects that a snapshot "
             "never shares)");
      }
    }
  }

 private:
  const std::string& source_;
};

// One row before ids and stream numbers are assigned. `key` identifies the allocation:
// prelude allocations and trace allocations each get their own key.
struct PendingRow {
  TraceOp op;
  std::uint64_t key;
  std::uint64_t size;
  std::int64_t stream_handle;
};

struct OpenAllocation {
  std::uint64_t key;
  std::uint64_t size;
  std::int64_t stream_handle;
};

bool has_action(const std::vector<PickleRef>& events, const char* action) {
  for (const PickleRef& event : events) {
    const PickleValue* value = event->find("action");
    if (value != nullptr && value->kind == PickleValue::Kind::kString && value->text == action)
      return true;
  }
  return false;
}

}  // namespace

SnapshotConversion convert_snapshot(const PickleValue& snapshot, int device,
                                    const std::string& source) {
  ShapeChecker check(source);
  if (!snapshot.is_dict()) {
    check.fail("top level", std::string("wrong top-level type: expected a dict with 'segments' and "
                                        "'device_traces', got ") +
                                kind_name(snapshot.kind));
  }
  const auto& device_traces =
      check.list(check.field(snapshot, "device_traces", "top level"), "device_traces");
  if (device < 0 || static_cast<std::size_t>(device) >= device_traces.size()) {
    check.fail("device_traces", "no trace for device " + std::to_string(device) +
                                    " (the snapshot has " + std::to_string(device_traces.size()) +
                                    ")");
  }
  const std::string trace_where = "device_traces[" + std::to_string(device) + "]";
  const auto& events = check.list(*device_traces[static_cast<std::size_t>(device)], trace_where);
  std::unordered_set<const PickleValue*> seen;
  check.distinct(events, seen, trace_where);

  SnapshotConversion result;
  result.free_action = has_action(events, "free_completed") ? "free_completed" : "free_requested";

  // Keys: trace allocations count up from 0 in trace order; prelude allocations live in a
  // separate key space (high bit set) so that both can be ordered independently.
  constexpr std::uint64_t kPreludeKey = std::uint64_t{1} << 63;
  std::vector<PendingRow> prelude;
  std::vector<PendingRow> body;
  std::unordered_map<std::int64_t, std::vector<OpenAllocation>> open_by_address;
  std::uint64_t next_trace_key = 0;

  for (std::size_t i = 0; i < events.size(); ++i) {
    const std::string where = trace_where + "[" + std::to_string(i) + "]";
    const PickleValue& event = *events[i];
    const std::string& action = check.text(event, "action", where);
    if (action == "alloc") {
      std::int64_t address = check.integer(event, "addr", where);
      OpenAllocation open{next_trace_key++, check.size(event, "size", where),
                          check.integer(event, "stream", where)};
      auto& stack = open_by_address[address];
      if (!stack.empty()) ++result.realloc_without_free;
      stack.push_back(open);
      body.push_back({TraceOp::kAlloc, open.key, open.size, open.stream_handle});
    } else if (action == result.free_action) {
      std::int64_t address = check.integer(event, "addr", where);
      std::uint64_t size = check.size(event, "size", where);
      auto it = open_by_address.find(address);
      if (it == open_by_address.end()) {
        // Allocated before recording started: it needs a prelude alloc row.
        PendingRow row{TraceOp::kAlloc, kPreludeKey | prelude.size(), size,
                       check.integer(event, "stream", where)};
        prelude.push_back(row);
        ++result.prelude_freed_in_trace;
        body.push_back({TraceOp::kFree, row.key, size, row.stream_handle});
        continue;
      }
      OpenAllocation open = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) open_by_address.erase(it);
      if (open.size != size) ++result.alloc_free_size_mismatches;
      // A free repeats its alloc's size and stream, whatever the event says.
      body.push_back({TraceOp::kFree, open.key, open.size, open.stream_handle});
    } else if (action == "segment_free" || action == "segment_unmap") {
      ++result.segment_release_events;
    } else if (action == "oom") {
      ++result.oom_events;
    }
  }

  const auto& segments = check.list(check.field(snapshot, "segments", "top level"), "segments");
  check.distinct(segments, seen, "segments");
  std::unordered_set<std::int64_t> active_block_addresses;
  for (std::size_t s = 0; s < segments.size(); ++s) {
    const std::string where = "segments[" + std::to_string(s) + "]";
    const PickleValue& segment = *segments[s];
    if (check.integer(segment, "device", where) != device) continue;
    std::int64_t stream_handle = check.integer(segment, "stream", where);
    const auto& blocks = check.list(check.field(segment, "blocks", where), where + ".blocks");
    check.distinct(blocks, seen, where + ".blocks");
    for (std::size_t b = 0; b < blocks.size(); ++b) {
      const std::string block_where = where + ".blocks[" + std::to_string(b) + "]";
      const PickleValue& block = *blocks[b];
      const std::string& state = check.text(block, "state", block_where);
      if (state.rfind("active", 0) != 0) continue;  // active_allocated, active_pending_free
      const std::int64_t address = check.integer(block, "address", block_where);
      if (!active_block_addresses.insert(address).second) {
        check.fail(block_where, "a second active block at address " + std::to_string(address));
      }
      if (open_by_address.contains(address)) continue;
      // Snapshots from before PyTorch 2.1 have no requested_size: the block size is all there is.
      const char* size_key = block.find("requested_size") != nullptr ? "requested_size" : "size";
      prelude.push_back({TraceOp::kAlloc, kPreludeKey | prelude.size(),
                         check.size(block, size_key, block_where), stream_handle});
      ++result.prelude_live_at_dump;
    }
  }
  result.prelude_rows = prelude.size();
  for (const auto& [address, open] : open_by_address) {
    if (!active_block_addresses.contains(address))
      result.open_at_end_not_in_segments += open.size();
  }

  Trace& trace = result.trace;
  trace.name = trace_name_from_path(source);
  trace.events.reserve(prelude.size() + body.size());
  std::unordered_map<std::uint64_t, std::uint64_t> id_of_key;
  std::unordered_map<std::int64_t, std::uint32_t> stream_numbers{{0, 0}};
  auto emit = [&](const PendingRow& row) {
    TraceEvent event;
    event.op = row.op;
    event.size = row.size;
    if (row.op == TraceOp::kAlloc) {
      const std::uint64_t next_id = id_of_key.size();
      id_of_key.emplace(row.key, next_id);
    }
    event.id = id_of_key.at(row.key);
    const auto next_stream = static_cast<std::uint32_t>(stream_numbers.size());
    event.stream = stream_numbers.try_emplace(row.stream_handle, next_stream).first->second;
    trace.events.push_back(event);
  };
  for (const PendingRow& row : prelude) emit(row);
  for (const PendingRow& row : body) emit(row);
  finalize_trace(trace);
  return result;
}

SnapshotConversion convert_snapshot_file(const std::string& path, int device) {
  std::string bytes = read_trace_bytes(path);  // "-" is stdin; a gzip file is refused
  const std::string source = input_display_name(path);
  PickleRef snapshot = parse_pickle(bytes, source);
  SnapshotConversion conversion = convert_snapshot(*snapshot, device, source);
  conversion.trace.name = trace_name_from_path(path);
  return conversion;
}

}  // namespace cudacache::replay
