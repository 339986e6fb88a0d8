// The C ABI (include/cudacache/cudacache.h): exceptions become status codes and a
// thread-local message.
#include "device_stats.h"
#include "error_report.h"
#include "log.h"
#include "process_allocators.h"
#include "snprintf_copy.h"

#include <cudacache/cudacache.h>
#include <cudacache/cudacache.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <string_view>

namespace cudacache {
namespace {

// The message of the last failure on this thread. A plain array, not a std::string: it has no
// destructor, so a failing call from an exit handler, after the thread's thread_local objects
// were destroyed, still finds it (found in review: a std::string here was written after its
// destruction), and recording a failure allocates nothing, so a std::bad_alloc is reported
// as one rather than thrown from the handler that reports it.
constexpr std::size_t kLastErrorBytes = 8192;
constexpr std::string_view kTruncated = " [...]";
thread_local char last_error[kLastErrorBytes] = "";

cudacache_status record_failure(cudacache_status status, std::string_view message) noexcept {
  std::size_t n = message.size();
  if (n >= kLastErrorBytes) {  // the end says it was cut
    n = kLastErrorBytes - 1 - kTruncated.size();
    std::memmove(last_error, message.data(), n);  // memmove: a message may be this buffer's
    std::memcpy(last_error + n, kTruncated.data(), kTruncated.size());
    last_error[n + kTruncated.size()] = '\0';
    return status;
  }
  std::memmove(last_error, message.data(), n);
  last_error[n] = '\0';
  return status;
}

// Runs fn and maps what it throws to a status; every failure leaves a message.
template <typename Fn>
cudacache_status guarded(Fn&& fn) noexcept {
  try {
    fn();
    return CUDACACHE_OK;
  } catch (const OutOfMemoryError& error) {
    return record_failure(CUDACACHE_OUT_OF_MEMORY, error.what());
  } catch (const Error& error) {
    return record_failure(error.status(), error.what());
  } catch (const std::bad_alloc&) {
    return record_failure(CUDACACHE_INTERNAL, "cudacache: host memory exhausted");
  } catch (const std::exception& error) {
    logger().error("internal error: {}", error.what());
    char message[kLastErrorBytes];
    std::snprintf(message, sizeof message, "cudacache: internal error: %s", error.what());
    return record_failure(CUDACACHE_INTERNAL, message);
  } catch (...) {
    return record_failure(CUDACACHE_INTERNAL, "cudacache: unknown internal error");
  }
}

// An invalid argument, its message made inside guarded(): building it may throw too.
template <typename MakeMessage>
cudacache_status invalid_argument(MakeMessage&& make_message) noexcept {
  return guarded([&] { report::invalid_argument(make_message()); });
}
cudacache_status invalid_argument(const char* message) noexcept {
  return guarded([&] { report::invalid_argument(message); });
}

// snprintf's contract (snprintf_copy.h); -1 with the reason as the last error otherwise.
int copy_out(const char* function, const std::string& text, char* buf, std::size_t len) noexcept {
  int length = -1;
  const cudacache_status status = guarded([&] {
    std::string error;
    length = snprintf_copy(text, buf, len, &error);
    if (length < 0) report::invalid_argument(std::string(function) + ": " + error);
  });
  return status == CUDACACHE_OK ? length : -1;
}

MemoryStats stats_of(int device, cudacache_status* status) {
  MemoryStats stats;
  *status = guarded([&] { stats = ProcessAllocators::instance().device(device).stats(); });
  return stats;
}

cudacache_stat to_c(const Stat& stat) {
  return {stat.current, stat.peak, stat.allocated, stat.freed};
}

std::size_t stat_value(int device, StatArray MemoryStats::*array, bool peak) {
  cudacache_status status = CUDACACHE_OK;
  const MemoryStats stats = stats_of(device, &status);
  if (status != CUDACACHE_OK) return 0;
  const Stat& stat = (stats.*array)[kAllPools];
  return static_cast<std::size_t>(peak ? stat.peak : stat.current);
}

}  // namespace
}  // namespace cudacache

using cudacache::ProcessAllocators;

extern "C" {

const char* cudacache_version(void) { return CUDACACHE_VERSION_STRING; }

const char* cudacache_status_string(cudacache_status status) {
  switch (status) {
    case CUDACACHE_OK: return "CUDACACHE_OK";
    case CUDACACHE_OUT_OF_MEMORY: return "CUDACACHE_OUT_OF_MEMORY";
    case CUDACACHE_INVALID_ARGUMENT: return "CUDACACHE_INVALID_ARGUMENT";
    case CUDACACHE_INVALID_DEVICE: return "CUDACACHE_INVALID_DEVICE";
    case CUDACACHE_UNKNOWN_POINTER: return "CUDACACHE_UNKNOWN_POINTER";
    case CUDACACHE_CONFIG: return "CUDACACHE_CONFIG";
    case CUDACACHE_CUDA_ERROR: return "CUDACACHE_CUDA_ERROR";
    case CUDACACHE_INTERNAL: return "CUDACACHE_INTERNAL";
  }
  return "CUDACACHE_UNKNOWN_STATUS";
}

const char* cudacache_last_error(void) { return cudacache::last_error; }

cudacache_status cudacache_allocate(void** out, size_t size, int device, cudaStream_t stream) {
  if (out == nullptr) return cudacache::invalid_argument("cudacache_allocate: out is NULL");
  *out = nullptr;
  return cudacache::guarded(
      [&] { *out = ProcessAllocators::instance().device(device).allocate(size, stream); });
}

void* cudacache_malloc(ssize_t size, int device, cudaStream_t stream) {
  if (size < 0) {
    cudacache::invalid_argument(
        [&] { return "cudacache_malloc: negative size " + std::to_string(size); });
    return nullptr;
  }
  void* ptr = nullptr;
  cudacache_allocate(&ptr, static_cast<size_t>(size), device, stream);
  return ptr;
}

void cudacache_free(void* ptr, ssize_t size, int device, cudaStream_t /*stream*/) {
  if (ptr == nullptr) return;
  if (size < 0) {
    cudacache::invalid_argument(
        [&] { return "cudacache_free: negative size " + std::to_string(size); });
    return;
  }
  cudacache::guarded([&] {
    ProcessAllocators::instance().device(device).deallocate(ptr, static_cast<size_t>(size));
  });
}

cudacache_status cudacache_deallocate(void* ptr) {
  return cudacache::guarded([&] { cudacache::deallocate(ptr); });
}

cudacache_status cudacache_record_stream(void* ptr, cudaStream_t stream) {
  return cudacache::guarded([&] { cudacache::record_stream(ptr, stream); });
}

void cudacache_empty_cache(void) {
  cudacache::guarded([] { cudacache::empty_cache(); });
}

size_t cudacache_memory_allocated(int device) {
  return cudacache::stat_value(device, &cudacache::MemoryStats::allocated_bytes, false);
}

size_t cudacache_memory_reserved(int device) {
  return cudacache::stat_value(device, &cudacache::MemoryStats::reserved_bytes, false);
}

size_t cudacache_max_memory_allocated(int device) {
  return cudacache::stat_value(device, &cudacache::MemoryStats::allocated_bytes, true);
}

size_t cudacache_max_memory_reserved(int device) {
  return cudacache::stat_value(device, &cudacache::MemoryStats::reserved_bytes, true);
}

cudacache_status cudacache_reset_peak_memory_stats(int device) {
  return cudacache::guarded(
      [&] { ProcessAllocators::instance().device(device).reset_peak_stats(); });
}

cudacache_status cudacache_reset_accumulated_memory_stats(int device) {
  return cudacache::guarded(
      [&] { ProcessAllocators::instance().device(device).reset_accumulated_stats(); });
}

cudacache_status cudacache_get_memory_stats(int device, cudacache_memory_stats* stats) {
  constexpr std::size_t kHeader = offsetof(cudacache_memory_stats, version) + sizeof(uint32_t);
  if (stats == nullptr) {
    return cudacache::invalid_argument("cudacache_get_memory_stats: stats is NULL");
  }
  if (stats->size < kHeader) {
    return cudacache::invalid_argument([&] {
      return "cudacache_get_memory_stats: stats->size is " + std::to_string(stats->size) +
             ", smaller than its header (" + std::to_string(kHeader) +
             " bytes); set it to sizeof(cudacache_memory_stats)";
    });
  }
  cudacache_status status = CUDACACHE_OK;
  const cudacache::MemoryStats values = cudacache::stats_of(device, &status);
  if (status != CUDACACHE_OK) return status;
  cudacache_memory_stats full{};
  full.size = static_cast<uint32_t>(std::min<std::size_t>(stats->size, sizeof full));
  full.version = CUDACACHE_MEMORY_STATS_VERSION;
  static_assert(sizeof full.allocation / sizeof full.allocation[0] == cudacache::kNumStatPools);
#define CUDACACHE_STAT_ARRAY(name, doc)                                 \
  for (std::size_t pool = 0; pool < cudacache::kNumStatPools; ++pool) { \
    full.name[pool] = cudacache::to_c(values.name[pool]);               \
  }
#define CUDACACHE_STAT_SINGLE(name, doc) full.name = cudacache::to_c(values.name);
#define CUDACACHE_STAT_EVENTS(name, doc) full.name = values.name;
#define CUDACACHE_STAT_SETTING(name, doc) full.name = values.name;
#include <cudacache/memory_stats.inc>
  std::memcpy(stats, &full, full.size);
  return CUDACACHE_OK;
}

int cudacache_memory_stats_json(int device, char* buf, size_t len) {
  std::string text;
  const cudacache_status status = cudacache::guarded([&] {
    text = cudacache::DeviceStats::to_json(ProcessAllocators::instance().device(device).stats());
  });
  return status == CUDACACHE_OK ? cudacache::copy_out("cudacache_memory_stats_json", text, buf, len)
                                : -1;
}

int cudacache_snapshot_json(int device, char* buf, size_t len) {
  std::string text;
  const cudacache_status status = cudacache::guarded(
      [&] { text = ProcessAllocators::instance().device(device).snapshot_json(); });
  return status == CUDACACHE_OK ? cudacache::copy_out("cudacache_snapshot_json", text, buf, len)
                                : -1;
}

cudacache_status cudacache_record_history(int device, size_t max_entries) {
  return cudacache::guarded(
      [&] { ProcessAllocators::instance().device(device).record_history(max_entries); });
}

int cudacache_history_csv(int device, char* buf, size_t len) {
  std::string text;
  const cudacache_status status = cudacache::guarded(
      [&] { text = ProcessAllocators::instance().device(device).history_csv(); });
  return status == CUDACACHE_OK ? cudacache::copy_out("cudacache_history_csv", text, buf, len) : -1;
}

cudacache_status cudacache_record_history_stacks(int device, size_t max_entries, int stacks) {
  return cudacache::guarded([&] {
    const cudacache::StackKind kind = cudacache::to_stack_kind(stacks);
    ProcessAllocators::instance().device(device).record_history(max_entries, kind);
  });
}

void cudacache_set_python_frames_provider(cudacache_python_frames_provider provider) {
  cudacache::set_python_frames_provider(provider);
}

cudacache_status cudacache_watch_growth(int device, unsigned rising_steps, int stacks, int flags) {
  if ((flags & ~CUDACACHE_GROWTH_QUIET) != 0) {
    return cudacache::invalid_argument([&] {
      return "cudacache_watch_growth: unknown flags " + std::to_string(flags) +
             " (CUDACACHE_GROWTH_QUIET is the only flag)";
    });
  }
  return cudacache::guarded([&] {
    const cudacache::StackKind kind = cudacache::to_stack_kind(stacks);
    ProcessAllocators::instance().device(device).watch_growth(
        cudacache::checked_rising_steps(rising_steps), kind, (flags & CUDACACHE_GROWTH_QUIET) != 0);
  });
}

int cudacache_mark_step(void) {
  int found = 0;
  const cudacache_status status =
      cudacache::guarded([&] { found = ProcessAllocators::instance().mark_step(); });
  return status == CUDACACHE_OK ? found : -1;
}

int cudacache_growth_report_json(int device, char* buf, size_t len) {
  std::string text;
  const cudacache_status status = cudacache::guarded([&] {
    text =
        cudacache::growth_report_json(ProcessAllocators::instance().device(device).growth_report());
  });
  return status == CUDACACHE_OK
             ? cudacache::copy_out("cudacache_growth_report_json", text, buf, len)
             : -1;
}

cudacache_status cudacache_configure(const char* config) {
  if (config == nullptr) return cudacache::invalid_argument("cudacache_configure: config is NULL");
  return cudacache::guarded([&] { ProcessAllocators::instance().configure(config); });
}

const char* cudacache_config_help(void) {
  static thread_local std::string text;
  const cudacache_status status =
      cudacache::guarded([&] { text = ProcessAllocators::instance().config_help(); });
  // On failure the message itself, without a copy that could fail in turn.
  return status == CUDACACHE_OK ? text.c_str() : cudacache::last_error;
}

int cudacache_register_retry_hook(cudacache_retry_hook hook, void* user_data) {
  if (hook == nullptr) {
    cudacache::invalid_argument("cudacache_register_retry_hook: hook is NULL");
    return -1;
  }
  int handle = -1;
  const cudacache_status status = cudacache::guarded([&] {
    handle = ProcessAllocators::instance().hooks().add(
        [hook, user_data](const cudacache::OomContext& context) {
          cudacache::OomContext with_data = context;
          with_data.user_data = user_data;
          return hook(&with_data);
        });
  });
  return status == CUDACACHE_OK ? handle : -1;
}

cudacache_status cudacache_unregister_retry_hook(int handle) {
  bool removed = false;
  const cudacache_status status =
      cudacache::guarded([&] { removed = ProcessAllocators::instance().hooks().remove(handle); });
  if (status != CUDACACHE_OK) return status;
  if (!removed) {
    return cudacache::invalid_argument([&] {
      return "cudacache_unregister_retry_hook: unknown handle " + std::to_string(handle);
    });
  }
  return CUDACACHE_OK;
}

// Not in the public header: for tests only. The options are fixed at first use for the life
// of a process; between test cases this starts afresh, so that a test binary also passes when
// all its cases run in one process. Never call it while other threads use cudacache.
CUDACACHE_API void cudacache_testing_reset(void) {
  ProcessAllocators::instance().reset_for_testing();
}

}  // extern "C"
