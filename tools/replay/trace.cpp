#include "trace.h"

#include <cstdint>

#include <unordered_map>

namespace cudacache::replay {

void finalize_trace(Trace& trace, const std::function<std::string(std::size_t)>& where) {
  struct LiveAllocation {
    std::uint32_t slot;
    std::uint64_t size;
    std::uint32_t stream;
  };
  std::unordered_map<std::uint64_t, LiveAllocation> live;
  std::uint64_t live_bytes = 0;
  std::uint32_t highest_stream = 0;
  trace.alloc_count = 0;
  trace.peak_requested_bytes = 0;
  trace.empty_cache_count = 0;

  for (std::size_t i = 0; i < trace.events.size(); ++i) {
    TraceEvent& event = trace.events[i];
    if (event.stream > kMaxStreamNumber) {
      throw TraceError(where(i) + ": stream " + std::to_string(event.stream) +
                       " is above the supported maximum " + std::to_string(kMaxStreamNumber));
    }
    switch (event.op) {
      case TraceOp::kAlloc: {
        auto [it, inserted] =
            live.try_emplace(event.id, LiveAllocation{trace.alloc_count, event.size, event.stream});
        if (!inserted) {
          throw TraceError(where(i) + ": alloc of id " + std::to_string(event.id) +
                           ", which is already live");
        }
        event.slot = trace.alloc_count++;
        if (event.size > UINT64_MAX - live_bytes) {
          throw TraceError(where(i) + ": the live requested bytes exceed 2^64");
        }
        live_bytes += event.size;
        if (live_bytes > trace.peak_requested_bytes) trace.peak_requested_bytes = live_bytes;
        break;
      }
      case TraceOp::kFree: {
        auto it = live.find(event.id);
        if (it == live.end()) {
          throw TraceError(where(i) + ": free of id " + std::to_string(event.id) +
                           ", which is not live (never allocated, or already freed)");
        }
        if (it->second.size != event.size) {
          throw TraceError(where(i) + ": free of id " + std::to_string(event.id) + " with size " +
                           std::to_string(event.size) + ", but it was allocated with size " +
                           std::to_string(it->second.size));
        }
        if (it->second.stream != event.stream) {
          throw TraceError(where(i) + ": free of id " + std::to_string(event.id) + " on stream " +
                           std::to_string(event.stream) + ", but it was allocated on stream " +
                           std::to_string(it->second.stream));
        }
        event.slot = it->second.slot;
        live_bytes -= event.size;
        live.erase(it);
        break;
      }
      case TraceOp::kEmptyCache: ++trace.empty_cache_count; break;
    }
    if (event.stream > highest_stream) highest_stream = event.stream;
  }
  trace.stream_count = highest_stream + 1;
}

void finalize_trace(Trace& trace) {
  finalize_trace(trace,
                 [&trace](std::size_t i) { return trace.name + ": event " + std::to_string(i); });
}

}  // namespace cudacache::replay
