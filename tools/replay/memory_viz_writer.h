// --memory-viz DIR: each allocator's replay as a snapshot pickle in the schema of
// torch.cuda.memory._snapshot() ({"segments": [...], "device_traces": [[...]]}, empty frames),
// which PyTorch's memory_viz opens (timeline and segment views) and cudacache-replay reads
// back as a trace.
#pragma once

#include <string>

#include "replay_snapshot.h"

namespace cudacache::replay {

// The pickle's bytes (protocol 2; see pickle_writer.h). Every segment is on device 0.
std::string snapshot_pickle(const ReplaySnapshot& snapshot);

// "DIR/<trace>.<allocator>.pickle", with every run of characters other than letters, digits,
// '.', '-' and '_' in the two names replaced by one '_', none at the end
// ("cudacache:max_split_size_mb:128" -> "cudacache_max_split_size_mb_128").
std::string memory_viz_path(const std::string& directory, const std::string& trace_name,
                            const std::string& allocator_name);

// Creates DIR when missing; throws std::runtime_error naming it when it is not a directory or
// cannot be created or written into.
void prepare_memory_viz_directory(const std::string& directory);

// Writes the pickle; throws std::runtime_error naming the path on failure.
void write_snapshot_pickle(const std::string& path, const ReplaySnapshot& snapshot);

}  // namespace cudacache::replay
