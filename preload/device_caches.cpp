#include "device_caches.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "log.h"
#include "mutex.h"
#include "real_runtime.h"
#include "segment_table.h"
#include "vmm_api.h"

namespace cudacache::preload {
namespace {

struct Retired {  // stats of allocators destroyed by cudaDeviceReset
  std::int64_t device_mallocs = 0;
  std::int64_t device_frees = 0;
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
};

// Constant-initialized, like everything below: no constructor runs before main.
Mutex g_mutex;  // creation, destruction and `retired`

struct Slot {
  std::atomic<DeviceAllocator*> allocator{nullptr};
  std::atomic<bool> unavailable{false};
  DeviceCounters counters;
  Retired retired CUDACACHE_GUARDED_BY(g_mutex);
};

Slot g_slots[kMaxDevices];
// The process that created the first allocator: a child forked after it inherits the caches
// and counters, which are its parent's to report.
std::atomic<pid_t> g_owner{0};
const Options* g_options CUDACACHE_GUARDED_BY(g_mutex) = nullptr;        // leaked
std::string* g_disabled_reason CUDACACHE_GUARDED_BY(g_mutex) = nullptr;  // leaked

// Options from CUDACACHE_CONF, parsed once, at the first allocation. A bad string turns
// caching off (every call is forwarded) rather than failing a program that would run without
// cudacache, and says so once on stderr, whatever the log level: a user who set
// CUDACACHE_CONF wants caching. CUDACACHE_CONF=help prints the options and carries on with
// the defaults.
const Options* options() CUDACACHE_REQUIRES(g_mutex) {
  if (g_options != nullptr || g_disabled_reason != nullptr) return g_options;
  const char* text = std::getenv("CUDACACHE_CONF");
  if (text != nullptr && std::strcmp(text, "help") == 0) {
    const std::string help = Options().describe();
    std::fprintf(stderr, "cudacache preload: CUDACACHE_CONF=key:value,... takes:\n%s\n",
                 help.c_str());
    text = nullptr;
  }
  try {
    g_options = new Options(text != nullptr ? text : "");
  } catch (const std::exception& e) {
    g_disabled_reason = new std::string(e.what());
    std::fprintf(stderr,
                 "cudacache preload: CUDACACHE_CONF rejected, caching is off for this process: "
                 "%s\n",
                 e.what());
    logger().error("preload: CUDACACHE_CONF rejected, caching disabled: {}", e.what());
  }
  return g_options;
}

}  // namespace

DeviceAllocator* allocator_for(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  Slot& slot = g_slots[device];
  if (DeviceAllocator* allocator = slot.allocator.load(std::memory_order_acquire)) {
    return allocator;
  }
  if (slot.unavailable.load(std::memory_order_relaxed)) return nullptr;
  MutexLock lock(g_mutex);
  if (DeviceAllocator* allocator = slot.allocator.load(std::memory_order_acquire)) {
    return allocator;
  }
  const Options* parsed = options();
  if (parsed == nullptr) {
    slot.unavailable.store(true);
    return nullptr;
  }
  try {
    auto backend = std::make_unique<TrackingSegmentBackend>(
        make_segment_backend(device, parsed->wants_pages()));
    auto* allocator = new DeviceAllocator(device, *parsed, nullptr, std::move(backend));
    pid_t unset = 0;
    g_owner.compare_exchange_strong(unset, getpid());
    slot.allocator.store(allocator, std::memory_order_release);
    logger().debug("preload: caching device {}", device);
    return allocator;
  } catch (const std::exception& e) {
    logger().error("preload: device {} is not cached: {}", device, e.what());
    slot.unavailable.store(true);
    return nullptr;
  }
}

bool caches_are_inherited() {
  const pid_t owner = g_owner.load();
  return owner != 0 && owner != getpid();
}

DeviceAllocator* existing_allocator(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_slots[device].allocator.load(std::memory_order_acquire);
}

void release_device(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  MutexLock lock(g_mutex);
  Slot& slot = g_slots[device];
  DeviceAllocator* allocator = slot.allocator.exchange(nullptr, std::memory_order_acq_rel);
  if (allocator == nullptr) return;
  const MemoryStats stats = allocator->stats();
  delete allocator;
  // Counted after the destructor, which returns the remaining segments.
  slot.retired.device_mallocs += stats.num_device_alloc;
  slot.retired.device_frees += stats.num_device_free + stats.segment[kAllPools].current;
  slot.retired.peak_allocated =
      std::max(slot.retired.peak_allocated, stats.allocated_bytes[kAllPools].peak);
  slot.retired.peak_reserved =
      std::max(slot.retired.peak_reserved, stats.reserved_bytes[kAllPools].peak);
}

DeviceCounters& counters(int device) { return g_slots[device].counters; }

DeviceSummary summarize(int device) {
  MutexLock lock(g_mutex);
  const Slot& slot = g_slots[device];
  DeviceSummary summary;
  summary.requests = slot.counters.requests.load();
  summary.frees = slot.counters.frees.load();
  summary.passed_through = slot.counters.passed_through.load();
  summary.device_mallocs = slot.retired.device_mallocs;
  summary.device_frees = slot.retired.device_frees;
  summary.peak_allocated = slot.retired.peak_allocated;
  summary.peak_reserved = slot.retired.peak_reserved;
  if (const DeviceAllocator* allocator = slot.allocator.load(std::memory_order_acquire)) {
    const MemoryStats stats = allocator->stats();
    summary.device_mallocs += stats.num_device_alloc;
    summary.device_frees += stats.num_device_free;
    summary.peak_allocated =
        std::max(summary.peak_allocated, stats.allocated_bytes[kAllPools].peak);
    summary.peak_reserved = std::max(summary.peak_reserved, stats.reserved_bytes[kAllPools].peak);
  }
  summary.used =
      summary.requests != 0 || summary.passed_through != 0 || summary.device_mallocs != 0;
  return summary;
}

std::string disabled_reason() {
  MutexLock lock(g_mutex);
  return g_disabled_reason != nullptr ? *g_disabled_reason : std::string();
}

cudaError_t synchronize_device(int device) {
  int current = -1;
  if (real::cudaGetDevice(&current) != cudaSuccess || current == device) {
    return real::cudaDeviceSynchronize();
  }
  // Back by making the thread's context current again, as device_api's switches do: cudaSetDevice
  // back would leave the device's primary context current in place of a context of the thread's
  // own (cuCtxCreate, cuCtxSetCurrent).
  void* const context = vmm_api::current_context();
  if (const cudaError_t error = real::cudaSetDevice(device); error != cudaSuccess) return error;
  const cudaError_t error = real::cudaDeviceSynchronize();
  if (context == nullptr || !vmm_api::make_context_current(context)) real::cudaSetDevice(current);
  return error;
}

}  // namespace cudacache::preload
