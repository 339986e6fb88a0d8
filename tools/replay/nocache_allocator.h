#pragma once

#include <memory>

#include "replay_allocator.h"

namespace cudacache::replay {

// One cudaMalloc and one cudaFree per request: the baseline without any caching.
std::unique_ptr<ReplayAllocator> make_nocache_allocator();

}  // namespace cudacache::replay
