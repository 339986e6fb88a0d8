// One DeviceAllocator per device, created on first use from CUDACACHE_CONF, plus the counters
// the exit summary prints. All state is static storage or leaked on purpose: hooks can run
// before main and from other libraries' static destructors.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "device_allocator.h"

namespace cudacache::preload {

inline constexpr int kMaxDevices = 64;

struct DeviceCounters {
  std::atomic<std::uint64_t> requests{0};        // allocations served by cudacache
  std::atomic<std::uint64_t> frees{0};           // frees of cudacache's memory
  std::atomic<std::uint64_t> passed_through{0};  // allocations left to the real function
};

// The allocator of `device`, created on first use; nullptr when cudacache cannot serve the
// device (bad CUDACACHE_CONF, invalid ordinal): callers then forward to the real function.
DeviceAllocator* allocator_for(int device);
// The allocator if it exists; never creates one.
DeviceAllocator* existing_allocator(int device);
// cudaDeviceReset: destroys the device's allocator, which returns every segment to CUDA.
// The caller must not race other threads on that device (CUDA's own rule for the reset).
void release_device(int device);

// True in a child forked after the caches were made: they and their counters are its
// parent's (the exit summary and snapshot are then the parent's to write, not the child's).
bool caches_are_inherited();

// Counters of a valid ordinal (0 <= device < kMaxDevices).
DeviceCounters& counters(int device);

// What the exit summary prints for one device, retired allocators (reset) included.
struct DeviceSummary {
  bool used = false;
  std::uint64_t requests = 0;
  std::uint64_t frees = 0;
  std::uint64_t passed_through = 0;
  std::int64_t device_mallocs = 0;
  std::int64_t device_frees = 0;
  std::int64_t peak_allocated = 0;
  std::int64_t peak_reserved = 0;
};
DeviceSummary summarize(int device);
// Why caching is off (bad CUDACACHE_CONF), or empty.
std::string disabled_reason();

// cudaFree's implicit synchronization, on `device`, keeping the caller's current device.
cudaError_t synchronize_device(int device);

}  // namespace cudacache::preload
