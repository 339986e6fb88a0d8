// Output of cudacache-replay: one comparison table per trace on stdout, and the same figures
// as JSON (--json).
#pragma once

#include <cstdint>
#include <optional>
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

// One allocator compared, as the JSON context describes it.
struct AllocatorContext {
  std::string name;    // as given: "cudacache:max_split_size_mb:128"
  std::string kind;    // "cudacache", "cub", "nocache" or "torch"
  std::string config;  // its effective configuration (allocator_config_string)
};

// How the figures were made, as in Google Benchmark's JSON "context": written first in the
// JSON so that a result file says which tool, inputs and allocator settings produced it.
struct RunContext {
  std::string tool = "cudacache-replay";
  std::string version;  // tool_version()
  std::string date;     // ISO 8601, UTC: "2025-01-31T12:34:56Z"
  std::string host_name;
  unsigned num_cpus = 0;
  std::string cuda_runtime;  // "cudasim" (and its CUDASIM_MALLOC_PAGE), or "cuda" with --real-gpu
  std::vector<std::string> inputs;  // trace paths as given ("-" = stdin), "synthetic:SPEC"
  std::vector<AllocatorContext> allocators;
  std::optional<std::uint64_t> capacity_bytes;  // --capacity
  std::optional<double> capacity_factor;        // --capacity-factor
  bool min_capacity = false;                    // --min-capacity
};

// The current time as ISO 8601 in UTC ("2025-01-31T12:34:56Z"), the host name and the number
// of CPUs (std::thread::hardware_concurrency, at least 1) in `context`.
void fill_host_context(RunContext& context);

// {"context": {"tool", "version", "date", "host_name", "num_cpus", "cuda_runtime", "inputs",
// "allocators": [{"name", "kind", "config"}], "capacity_bytes", "capacity_factor",
// "min_capacity"}, "traces": [{"name", "events", "peak_requested_bytes", ..., "results":
// [{"allocator", "peak_allocated_bytes", "peak_reserved_bytes", "min_capacity_bytes",
// "device_mallocs", "device_frees", "device_calls": {"malloc": N, "free": N, ...},
// "estimated_device_call_seconds", "oom", "seconds", ...}]}]}; figures that do not exist are
// null. Without a context there is no "context" key.
void write_json(const std::vector<TraceReport>& reports, std::ostream& out);
void write_json(const RunContext& context, const std::vector<TraceReport>& reports,
                std::ostream& out);

// "21.77 GiB", "512 B".
std::string format_bytes(std::uint64_t bytes);

}  // namespace cudacache::replay
