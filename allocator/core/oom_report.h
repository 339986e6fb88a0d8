// Out-of-memory report: the facts of a failed allocation and their one-paragraph message.
#pragma once

#include "memory_figures.h"  // format_size, fragmentation
#include "options.h"

#include <cudacache/cudacache.hpp>

#include <cstddef>
#include <string>

namespace cudacache {

// The what() text of OutOfMemoryError: what failed, the device and cache state, and which
// setting would help.
std::string describe_oom(const OomReport& report, const Options& options);

}  // namespace cudacache
