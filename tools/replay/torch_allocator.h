// torch-native and torch-expandable: PyTorch's own CUDA caching allocator (with its defaults,
// and with expandable_segments:True), replayed by tools/torch_replay/torch_replay.py in a
// separate Python process on cudasim. Unlike the in-process adapters (replay_allocator.h) the
// whole replay happens there; this file writes the trace as a CSV, runs the driver and reads
// the figures back from its JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "replayer.h"
#include "trace.h"

namespace cudacache::replay {

bool is_torch_allocator(const std::string& name);

// Throws std::invalid_argument with a clear message when PyTorch is not importable by the
// driver's Python (CUDACACHE_PYTHON, default python3) or the driver script is missing.
void check_torch_available(const std::string& name);

// Replays `trace` through PyTorch on a simulated device of `capacity_bytes`; with
// `min_capacity`, also searches the smallest device up to that size (find_min_capacity's
// rules), one replay per probe. Throws std::runtime_error when the driver fails.
ReplayResult replay_with_torch(const Trace& trace, const std::string& name,
                               std::uint64_t capacity_bytes, bool min_capacity);

}  // namespace cudacache::replay
