#pragma once

#include <memory>
#include <string>

#include "replay_allocator.h"

namespace cudacache::replay {

// cub::CachingDeviceAllocator from the CUDA toolkit with its default bins (growth 8, bins
// 8^3 = 512 B .. 8^7 = 2 MiB) and no limit on cached bytes: requests above 2 MiB are
// cudaMalloc'd exactly and cudaFree'd on release; smaller ones are cached per bin forever
// (until empty_cache or a failed cudaMalloc, after which CUB frees its cache and retries once).
std::unique_ptr<ReplayAllocator> make_cub_allocator();

// Those settings, as the JSON context reports them:
// "bin_growth:8,min_bin:3,max_bin:7,max_cached_bytes:unlimited".
std::string cub_config_string();

}  // namespace cudacache::replay
