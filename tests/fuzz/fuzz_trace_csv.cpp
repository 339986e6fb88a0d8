// Fuzzer: the replay trace CSV. Any input either parses or is rejected with TraceError; a trace
// that parses is written back and parses again to the same events and peak.
#include "trace.h"
#include "trace_csv.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

using cudacache::replay::Trace;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  Trace trace;
  try {
    trace = cudacache::replay::parse_trace_csv(text, "fuzz.csv");
  } catch (const cudacache::replay::TraceError&) {
    return 0;
  }
  std::ostringstream written;
  cudacache::replay::write_trace_csv(trace, written);
  const Trace again = cudacache::replay::parse_trace_csv(written.str(), "written.csv");
  if (again.events.size() != trace.events.size() ||
      again.peak_requested_bytes != trace.peak_requested_bytes) {
    std::fprintf(stderr, "fuzz_trace_csv: %zu events (peak %llu) written back as %zu (peak %llu)\n",
                 trace.events.size(), static_cast<unsigned long long>(trace.peak_requested_bytes),
                 again.events.size(), static_cast<unsigned long long>(again.peak_requested_bytes));
    std::abort();
  }
  return 0;
}
