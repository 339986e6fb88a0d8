// What cudacache-replay does once its command line is parsed.
#pragma once

#include <ostream>
#include <string>

#include "command_line.h"
#include "trace.h"

namespace cudacache::replay {

// A snapshot pickle when the file starts with 0x80 (PROTO), otherwise a CSV; a file named
// .pickle/.pkl that is not a pickle is an error.
Trace load_trace(const std::string& path, int device);

// cudacache's options under $CUDACACHE_CONF (--print-config). Throws std::invalid_argument
// for a bad configuration, UsageError when the tool was built without cudacache.
std::string print_config_text();

// Runs the replays (or the conversion) and prints to `out`. Returns the exit status. Throws
// TraceError for malformed input and UsageError for options this runtime cannot honour.
int run_replay_tool(const CommandLine& line, std::ostream& out);

}  // namespace cudacache::replay
