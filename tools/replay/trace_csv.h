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

// Reads a CSV file ("-" = stdin); the trace is named after the file's stem.
Trace read_trace_csv(const std::string& path);

void write_trace_csv(const Trace& trace, std::ostream& out);

// Reads a whole file into memory; throws TraceError naming the path when it cannot (a missing
// file, a directory: "PATH: is a directory").
std::string read_file_bytes(const std::string& path);

// The bytes of a trace or snapshot given on the command line: "-" is stdin, anything else a
// file (read_file_bytes). Throws TraceError for a gzip-compressed input (magic bytes 1f 8b),
// which is to be decompressed first, rather than misreading it as a CSV.
std::string read_trace_bytes(const std::string& path);

// How messages name an input: the path, or "<stdin>" for "-".
std::string input_display_name(const std::string& path);

// "dir/name.csv" -> "name"; "-" -> "stdin".
std::string trace_name_from_path(const std::string& path);

}  // namespace cudacache::replay
