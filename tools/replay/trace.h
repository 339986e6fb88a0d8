// The replay trace: an ordered list of alloc/free/empty_cache events, as in the CSVs of
// ../shared/traces (header `op,id,size,stream`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudacache::replay {

// Any malformed trace or snapshot. The message names the file and the line (CSV) or byte
// offset (pickle); main turns it into exit code 2.
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class TraceOp : std::uint8_t { kAlloc, kFree, kEmptyCache };

struct TraceEvent {
  TraceOp op = TraceOp::kAlloc;
  std::uint64_t id = 0;      // the id as written in the trace
  std::uint64_t size = 0;    // requested bytes; a free repeats its alloc's size
  std::uint32_t stream = 0;  // 0 = legacy default stream
  // Dense index of the allocation this event creates or ends (the alloc's ordinal), so that a
  // replay keeps its pointers in a vector instead of a map keyed by id.
  std::uint32_t slot = 0;
};

struct Trace {
  std::string name;
  std::vector<TraceEvent> events;
  std::uint32_t alloc_count = 0;   // number of alloc events == number of slots
  std::uint32_t stream_count = 1;  // highest stream number + 1
  std::uint64_t peak_requested_bytes = 0;
  std::uint64_t empty_cache_count = 0;
};

// Streams become real cudaStream_t objects during a replay: numbers above this are refused.
inline constexpr std::uint32_t kMaxStreamNumber = 1023;

// Checks and completes a trace whose events carry op, id, size and stream: assigns slots,
// counts streams, computes the peak of live requested bytes. `where(i)` names event i in an
// error message ("file.csv:12"). Throws TraceError on an alloc of a live id, a free of an
// unknown id, a free whose size or stream differs from its alloc, or a stream above
// kMaxStreamNumber (also from a converted snapshot, whose stream handles are numbered in turn).
void finalize_trace(Trace& trace, const std::function<std::string(std::size_t)>& where);

// Same, for events built in code: errors name the trace and the event index.
void finalize_trace(Trace& trace);

}  // namespace cudacache::replay
