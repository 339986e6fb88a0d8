#pragma once

#include <memory>
#include <string>

#include "replay_allocator.h"

namespace cudacache::replay {

// PyTorch's native default policy, spelled out (cudacache's default is its own policy).
inline constexpr const char* kPyTorchNativeConfig =
    "policy:pytorch,max_split_size_mb:unlimited,roundup_power2_divisions:1,"
    "expandable_segments:False";

// PyTorch's policy with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: the `pytorch-expandable`
// allocator, to be compared with PyTorch's own (`torch-expandable`).
inline constexpr const char* kPyTorchExpandableConfig =
    "policy:pytorch,max_split_size_mb:unlimited,roundup_power2_divisions:1,"
    "expandable_segments:True";

// cudacache::DeviceAllocator on device 0 with Options parsed from `config` (CUDACACHE_CONF
// syntax; "" = cudacache's defaults). Throws std::invalid_argument on a bad config string.
std::unique_ptr<ReplayAllocator> make_cudacache_allocator(const std::string& config);

// Parses `config` only; throws std::invalid_argument with cudacache's message when it is bad.
void validate_cudacache_config(const std::string& config);

// Every option's effective value under `config` as a CUDACACHE_CONF string
// (cudacache::Options::to_config_string), for the JSON context. Throws like validate.
std::string cudacache_config_string(const std::string& config);

// Every cudacache option with its effective value under `config`, its default and its
// documentation: the text of cudacache_config_help(), from the same options table.
std::string describe_cudacache_config(const std::string& config);

}  // namespace cudacache::replay
