// Reads and writes the replay CSV of ../shared/traces:
//   op,id,size,stream
//   alloc,0,41472,0
//   free,0,41472,0
//   empty_cache,,,
#pragma once

#include <ostream>
#include <string>
#include <string_view>

#include "trace.h"

namespace cudacache::replay {

// Parses CSV text; `source` names the input in error messages ("trace.csv:12: ...").
// Throws TraceError on any malformed line.
Trace parse_trace_csv(std::string_view text, const std::string& source);

// Reads a CSV file; the trace is named after the file's stem.
Trace read_trace_csv(const std::string& path);

void write_trace_csv(const Trace& trace, std::ostream& out);

// Reads a whole file into memory; throws TraceError naming the path when it cannot.
std::string read_file_bytes(const std::string& path);

// "dir/name.csv" -> "name".
std::string trace_name_from_path(const std::string& path);

}  // namespace cudacache::replay
