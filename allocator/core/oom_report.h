// Out-of-memory report: the facts of a failed allocation and their one-paragraph message.
#pragma once

#include "options.h"

#include <cudacache/cudacache.hpp>

#include <cstddef>
#include <string>

namespace cudacache {

// PyTorch's format: "N bytes" up to 1024 bytes, else KiB/MiB/GiB with two decimals.
std::string format_size(std::size_t bytes);

// 1 - largest_free_cached / (reserved - allocated); 0 when nothing is cached.
double fragmentation(std::size_t reserved, std::size_t allocated, std::size_t largest_free_cached);

// The what() text of OutOfMemoryError: what failed, the device and cache state, and which
// setting would help.
std::string describe_oom(const OomReport& report, const Options& options);

}  // namespace cudacache
