// Maps allocator names to adapters. The cudacache adapter is compiled in only when CMake
// found the allocator library (CUDACACHE_REPLAY_WITH_CUDACACHE).
#include <stdexcept>
#include <string_view>

#include "cub_allocator.h"
#include "nocache_allocator.h"
#include "replay_allocator.h"
#include "torch_allocator.h"
#if CUDACACHE_REPLAY_WITH_CUDACACHE
#include "cudacache_allocator.h"
#endif

namespace cudacache::replay {
namespace {

constexpr std::string_view kCudacachePrefix = "cudacache:";

[[noreturn]] void unknown_allocator(const std::string& name) {
  std::string valid;
  for (const AllocatorSpec& spec : known_allocators())
    valid += (valid.empty() ? "" : ", ") + spec.name;
  throw std::invalid_argument("unknown allocator '" + name + "' (valid: " + valid + ")");
}

[[noreturn, maybe_unused]] void cudacache_not_built(const std::string& name) {
  throw std::invalid_argument("allocator '" + name +
                              "' is not in this build: cudacache-replay was configured with "
                              "CUDACACHE_REPLAY_WITH_CUDACACHE=OFF");
}

bool is_cudacache_name(const std::string& name) {
  return name == "cudacache" || name == "pytorch" || name == "pytorch-expandable" ||
         name.starts_with(kCudacachePrefix);
}

#if CUDACACHE_REPLAY_WITH_CUDACACHE
// The CUDACACHE_CONF string behind a cudacache-based name (is_cudacache_name).
std::string cudacache_options_of(const std::string& name) {
  if (name == "cudacache") return "";
  if (name == "pytorch") return kPyTorchNativeConfig;
  if (name == "pytorch-expandable") return kPyTorchExpandableConfig;
  return name.substr(kCudacachePrefix.size());
}
#endif

}  // namespace

bool cudacache_adapter_built() { return CUDACACHE_REPLAY_WITH_CUDACACHE != 0; }

std::vector<AllocatorSpec> known_allocators() {
  return {
      {"cudacache", "cudacache::DeviceAllocator with its default options"},
      {"cudacache:CONF",
       "cudacache with a CUDACACHE_CONF string, e.g. cudacache:max_split_size_mb:128"},
      {"pytorch", "cudacache configured explicitly as PyTorch's native default policy"},
      {"pytorch-expandable",
       "cudacache configured as PyTorch's policy with expandable_segments:True"},
      {"cub",
       "cub::CachingDeviceAllocator, default bins (512 B..2 MiB, growth 8), unlimited cache"},
      {"nocache", "one cudaMalloc/cudaFree per request"},
      {"torch-native",
       "PyTorch's own caching allocator (needs torch; replayed by tools/torch_replay)"},
      {"torch-expandable", "PyTorch's own allocator with expandable_segments:True"},
  };
}

std::vector<std::string> default_allocator_names() {
  if (cudacache_adapter_built()) return {"cudacache", "pytorch", "cub", "nocache"};
  return {"cub", "nocache"};
}

void validate_allocator_name(const std::string& name) {
  if (name == "nocache" || name == "cub") return;
  if (is_torch_allocator(name)) return check_torch_available(name);
  if (!is_cudacache_name(name)) unknown_allocator(name);
#if CUDACACHE_REPLAY_WITH_CUDACACHE
  validate_cudacache_config(cudacache_options_of(name));
#else
  cudacache_not_built(name);
#endif
}

std::string allocator_kind(const std::string& name) {
  if (name == "nocache" || name == "cub") return name;
  if (is_torch_allocator(name)) return "torch";
  if (!is_cudacache_name(name)) unknown_allocator(name);
  return "cudacache";
}

std::string allocator_config_string(const std::string& name) {
  if (name == "nocache") return "";
  if (name == "cub") return cub_config_string();
  if (name == "torch-native") return "";
  if (name == "torch-expandable") return "expandable_segments:True";
  if (!is_cudacache_name(name)) unknown_allocator(name);
#if CUDACACHE_REPLAY_WITH_CUDACACHE
  return cudacache_config_string(cudacache_options_of(name));
#else
  cudacache_not_built(name);
#endif
}

std::unique_ptr<ReplayAllocator> make_replay_allocator(const std::string& name) {
  if (name == "nocache") return make_nocache_allocator();
  if (name == "cub") return make_cub_allocator();
  if (!is_cudacache_name(name)) unknown_allocator(name);
#if CUDACACHE_REPLAY_WITH_CUDACACHE
  return make_cudacache_allocator(cudacache_options_of(name));
#else
  cudacache_not_built(name);
#endif
}

}  // namespace cudacache::replay
