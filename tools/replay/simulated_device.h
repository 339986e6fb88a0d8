// Everything the tool asks of cudasim, the simulated CUDA runtime (tools/cudasim): whether it
// is loaded, the simulated capacity of device 0, and its allocation counters. On NVIDIA's
// runtime every query answers "not available" and capacity changes are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "device_call_costs.h"

namespace cudacache::replay {

struct DeviceCounters {
  std::uint64_t mallocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t peak_bytes = 0;
};

bool running_on_simulator();

// Throws std::runtime_error when not on the simulator (a real GPU cannot be shrunk).
void set_simulated_capacity(std::uint64_t bytes);
std::optional<std::uint64_t> simulated_capacity();

std::optional<DeviceCounters> device_counters();
// Every device call by kind, failed ones too (cudasim_get_call_counts); absent on a real GPU
// and on a cudasim too old to count them.
std::optional<DeviceCalls> device_call_counts();
// Nanoseconds the calling thread has spent inside cudasim's device calls so far
// (cudasim_thread_call_ns); absent on a real GPU and on a cudasim too old to time them.
std::optional<std::uint64_t> thread_device_call_ns();
// Peak := in use, call counters (both kinds above) := 0. No-op on a real GPU.
void reset_device_counters();

// When this process is not on cudasim, re-executes it with cudasim's directory (`sim_dir`)
// first on LD_LIBRARY_PATH, once (an environment marker stops a loop). Returns only when no
// re-exec happened: already on cudasim, already tried, or sim_dir missing.
void reexec_on_simulator(const char* sim_dir, char** argv);

// cudasim's directory for this executable: <prefix>/lib*/cudacache/cudasim when it runs
// installed in <prefix>/bin, else `build_dir` (where the build put cudasim).
std::string cudasim_dir(const std::string& build_dir);

}  // namespace cudacache::replay
