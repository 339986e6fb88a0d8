// What cudacache-replay does once its command line is parsed.
#pragma once

#include <ostream>
#include <string>

#include "command_line.h"
#include "report.h"
#include "trace.h"

namespace cudacache::replay {

// A snapshot pickle when the file starts with 0x80 (PROTO), otherwise a CSV; a file named
// .pickle/.pkl that is not a pickle is an error. "-" reads stdin (the trace is named "stdin");
// a directory or a gzip-compressed file is a TraceError that says so.
Trace load_trace(const std::string& path, int device);

// The JSON "context" of a run with this command line: tool, version, date, host, CPUs,
// runtime, inputs and each allocator's kind and effective configuration.
RunContext make_run_context(const CommandLine& line);

// cudacache's options under $CUDACACHE_CONF (--print-config). Throws std::invalid_argument
// for a bad configuration, UsageError when the tool was built without cudacache.
std::string print_config_text();

// Runs the replays (or the conversion) and prints to `out` (stdout): the tables, or with
// `--json -` the JSON (the tables then go to stderr), or with `--convert X -o -` the CSV.
// Returns the exit status. Throws
// TraceError for malformed input and UsageError for options this runtime cannot honour.
int run_replay_tool(const CommandLine& line, std::ostream& out);

}  // namespace cudacache::replay
