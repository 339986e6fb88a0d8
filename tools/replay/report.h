// Output of cudacache-replay: one comparison table per trace on stdout, and the same figures
// as JSON (--json).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "replayer.h"
#include "trace.h"

namespace cudacache::replay {

struct TraceReport {
  std::string name;
  std::size_t events = 0;
  std::uint64_t allocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t empty_cache_calls = 0;
  std::uint32_t streams = 0;
  std::uint64_t peak_requested_bytes = 0;
  bool min_capacity_searched = false;
  std::vector<ReplayResult> results;

  static TraceReport describe(const Trace& trace);
};

void print_table(const TraceReport& report, std::ostream& out);

// {"traces": [{"name", "events", "peak_requested_bytes", ..., "results": [{"allocator",
// "peak_allocated_bytes", "peak_reserved_bytes", "min_capacity_bytes", "device_mallocs",
// "device_frees", "device_calls": {"malloc": N, "free": N, ...}, "estimated_device_call_seconds",
// "oom", "seconds", ...}]}]}; figures that do not exist are null.
void write_json(const std::vector<TraceReport>& reports, std::ostream& out);

// "21.77 GiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

}  // namespace cudacache::replay
