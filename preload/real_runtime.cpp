#include "real_runtime.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "dynamic_linker.h"
#include "log.h"

namespace cudacache::preload::real {
namespace {

enum Function : int {
#define CUDACACHE_RUNTIME_FUNCTION(type, name, parameters, arguments) k_##name,
#include "runtime_functions.inc"
#undef CUDACACHE_RUNTIME_FUNCTION
  kFunctionCount
};

constexpr const char* kNames[kFunctionCount] = {
#define CUDACACHE_RUNTIME_FUNCTION(type, name, parameters, arguments) #name,
#include "runtime_functions.inc"
#undef CUDACACHE_RUNTIME_FUNCTION
};

std::atomic<void*> g_functions[kFunctionCount];
std::atomic<void*> g_runtime_handle{nullptr};

struct LoadedRuntime {
  char path[PATH_MAX];
  bool found;
};

int find_loaded_runtime(dl_phdr_info* info, size_t, void* data) {
  const char* path = info->dlpi_name;
  if (path == nullptr || path[0] == '\0') return 0;
  const char* slash = std::strrchr(path, '/');
  const char* base = slash != nullptr ? slash + 1 : path;
  if (std::strncmp(base, "libcudart.so", 12) != 0 || std::strlen(path) >= PATH_MAX) return 0;
  auto* result = static_cast<LoadedRuntime*>(data);
  std::strcpy(result->path, path);
  result->found = true;
  return 1;
}

void* runtime_handle() {
  if (void* handle = g_runtime_handle.load(std::memory_order_acquire)) return handle;
  // Copied out first: dlopen is not called from inside the dl_iterate_phdr callback.
  LoadedRuntime loaded{};
  dl_iterate_phdr(find_loaded_runtime, &loaded);
  void* handle = nullptr;
  if (loaded.found) {
    handle = dlopen(loaded.path, RTLD_LAZY | RTLD_NOLOAD);
    if (handle != nullptr) {
      logger().debug("preload: runtime {} found through dl_iterate_phdr", loaded.path);
    }
  }
  if (handle == nullptr) {
    const char* configured = std::getenv("CUDACACHE_PRELOAD_CUDART");
    const char* name =
        configured != nullptr && configured[0] != '\0' ? configured : "libcudart.so.13";
    handle = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
    logger().debug("preload: no CUDA runtime loaded; opened {} privately: {}", name,
                   handle != nullptr ? "ok" : dlerror());
  }
  if (handle == nullptr) return nullptr;
  void* expected = nullptr;
  if (!g_runtime_handle.compare_exchange_strong(expected, handle)) {
    dlclose(handle);  // another thread won; drop our reference
    return expected;
  }
  return handle;
}

void* find(Function function) {
  if (void* known = g_functions[function].load(std::memory_order_acquire)) return known;
  void* found = real_dlsym(RTLD_NEXT, kNames[function]);
  if (found == nullptr) {
    if (void* handle = runtime_handle()) found = real_dlsym(handle, kNames[function]);
  }
  if (found == nullptr || is_own_address(found)) return nullptr;
  g_functions[function].store(found, std::memory_order_release);
  return found;
}

template <typename T>
T missing() {
  if constexpr (std::is_same_v<T, cudaError_t>) {
    return cudaErrorSharedObjectSymbolNotFound;
  } else {
    return "cudacache: the CUDA runtime was not found";
  }
}

int g_invalid_free_target = 0;  // host memory: no runtime ever allocated it

}  // namespace

#define CUDACACHE_RUNTIME_FUNCTION(type, name, parameters, arguments) \
  type name parameters {                                              \
    void* function = find(k_##name);                                  \
    if (function == nullptr) return missing<type>();                  \
    return reinterpret_cast<type(*) parameters>(function) arguments;  \
  }
#include "runtime_functions.inc"
#undef CUDACACHE_RUNTIME_FUNCTION

void seed_runtime_function(const char* name, void* address) {
  if (address == nullptr || is_own_address(address)) return;
  for (int i = 0; i < kFunctionCount; ++i) {
    if (std::strcmp(kNames[i], name) == 0) {
      void* expected = nullptr;
      g_functions[i].compare_exchange_strong(expected, address);
      return;
    }
  }
}

cudaError_t record_invalid_free() { return cudaFree(&g_invalid_free_target); }

}  // namespace cudacache::preload::real

// The allocator core's runtime calls, redirected here by --wrap (Note [Reentrancy]).
extern "C" {
#define CUDACACHE_RUNTIME_FUNCTION(type, name, parameters, arguments)  \
  __attribute__((visibility("hidden"))) type __wrap_##name parameters; \
  type __wrap_##name parameters { return cudacache::preload::real::name arguments; }
#include "runtime_functions.inc"
#undef CUDACACHE_RUNTIME_FUNCTION
}
