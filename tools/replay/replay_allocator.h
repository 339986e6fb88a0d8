// The narrow interface every allocator under comparison is replayed through. One small
// adapter file per allocator implements it (nocache_allocator.cpp, cub_allocator.cpp,
// cudacache_allocator.cpp); allocator_factory.cpp maps names to adapters.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "replay_snapshot.h"

namespace cudacache::replay {

// The allocator could not get device memory for a request: the replay records the event and
// stops. Any other failure is a std::runtime_error and aborts the tool.
class ReplayOutOfMemory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Peaks as the allocator itself counts them; absent where it keeps no such figure.
struct AllocatorFigures {
  std::optional<std::uint64_t> peak_allocated_bytes;  // bytes handed out (after its rounding)
  std::optional<std::uint64_t> peak_reserved_bytes;   // bytes it holds from the device
};

// The same figures now (for the timeline of --html), with the same meaning.
struct CurrentFigures {
  std::optional<std::uint64_t> allocated_bytes;
  std::optional<std::uint64_t> reserved_bytes;
};

class ReplayAllocator {
 public:
  virtual ~ReplayAllocator() = default;

  // Throws ReplayOutOfMemory when device memory runs out.
  virtual void* allocate(std::size_t size, cudaStream_t stream) = 0;
  virtual void free(void* ptr) = 0;
  virtual void empty_cache() = 0;
  virtual AllocatorFigures figures() const = 0;
  virtual CurrentFigures current() const = 0;

  // Starts keeping what snapshot() returns (--memory-viz): at most `max_entries` trace
  // entries. Off by default, so that a plain replay measures the allocator alone.
  virtual void record_history(std::size_t max_entries) = 0;
  // Segments now and the trace recorded since record_history().
  virtual ReplaySnapshot snapshot() const = 0;
};

struct AllocatorSpec {
  std::string name;         // as given on the command line: "cudacache:max_split_size_mb:128"
  std::string description;  // one line for --help and the table legend
};

// Builds the allocator that `name` names: nocache, cub, cudacache, cudacache:CONF, pytorch,
// pytorch-expandable.
// Throws std::invalid_argument naming the valid names when it names none.
std::unique_ptr<ReplayAllocator> make_replay_allocator(const std::string& name);

// Checks a name without building anything (command-line validation).
void validate_allocator_name(const std::string& name);

// The allocators a plain run compares, in table order.
std::vector<std::string> default_allocator_names();

// Every known allocator kind with a description, for --help.
std::vector<AllocatorSpec> known_allocators();

// What the JSON context says of allocator `name`: its kind ("cudacache" for cudacache,
// cudacache:CONF, pytorch and pytorch-expandable; "cub"; "nocache"; "torch" for torch-native
// and torch-expandable) and its effective configuration: every cudacache option as a
// CUDACACHE_CONF string, CUB's bins, PyTorch's PYTORCH_CUDA_ALLOC_CONF ("" = its defaults),
// "" for nocache. Throws std::invalid_argument like make_replay_allocator.
std::string allocator_kind(const std::string& name);
std::string allocator_config_string(const std::string& name);

// True when this build includes the cudacache adapter (CUDACACHE_REPLAY_WITH_CUDACACHE).
bool cudacache_adapter_built();

}  // namespace cudacache::replay
