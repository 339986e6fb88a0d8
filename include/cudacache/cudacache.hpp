// cudacache C++ API (C++17): the same process-wide allocators as the C ABI in cudacache.h
// (both are thin layers over them, allocator/api/), with exceptions, RAII and std::function
// hooks. Types shared with the C ABI (statuses, the retry context) come from cudacache.h.
#pragma once

#include <cudacache/cudacache.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

namespace cudacache {

// One counter as PyTorch's memory_stats() reports it.
struct Stat {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t allocated = 0;  // accumulated increases
  std::int64_t freed = 0;      // accumulated decreases
};

enum StatPool : std::size_t { kAllPools = 0, kSmallPool = 1, kLargePool = 2, kNumStatPools = 3 };
using StatArray = std::array<Stat, kNumStatPools>;  // indexed by StatPool

// PyTorch's memory_stats() vocabulary, field for field, from the one table in
// <cudacache/memory_stats.inc> (the meaning of each field is written there). COUNT fields
// count blocks or segments, BYTES fields sum sizes.
struct MemoryStats {
  static constexpr std::uint32_t kVersion = CUDACACHE_MEMORY_STATS_VERSION;
  std::uint32_t version = kVersion;

#define CUDACACHE_STAT_ARRAY(name, doc) StatArray name;
#define CUDACACHE_STAT_SINGLE(name, doc) Stat name;
#define CUDACACHE_STAT_EVENTS(name, doc) std::int64_t name = 0;
#define CUDACACHE_STAT_SETTING(name, doc) std::int64_t name = 0;
#include <cudacache/memory_stats.inc>
};

// Bad input or a failing CUDA runtime: the allocator state is unchanged.
class CUDACACHE_API Error : public std::runtime_error {
 public:
  Error(cudacache_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  cudacache_status status() const noexcept { return status_; }

 private:
  cudacache_status status_;
};

// The facts of a failed allocation. fragmentation = 1 - largest_free_cached_block /
// (reserved - allocated): 0 when the free cached memory is one block, near 1 when it is
// scattered in small pieces (0 when nothing is cached).
struct OomReport {
  int device = 0;
  std::size_t requested_bytes = 0;
  std::size_t device_total_bytes = 0;
  std::size_t device_free_bytes = 0;
  std::size_t allocated_bytes = 0;
  std::size_t reserved_bytes = 0;
  std::size_t reserved_unallocated_bytes = 0;
  std::size_t largest_free_cached_block = 0;
  double fragmentation = 0.0;
  bool fraction_cap_hit = false;  // per_process_memory_fraction refused the segment
  // Free cached bytes that belong to other streams than the request's (a cached block serves
  // only the stream that allocated it).
  std::size_t free_on_other_streams_bytes = 0;
  // Pages (expandable segments, cudacache's policy): reserved_bytes are the mapped pages, and
  // free bytes in pages that also hold allocated memory can be neither unmapped nor moved.
  bool pages = false;
  std::size_t free_in_partial_pages_bytes = 0;
  // Of those, the bytes in 2 MiB granules that also hold memory in use: a granule is the least a
  // page can be, so no page size would free them; the rest lies in whole granules of larger
  // pages.
  std::size_t free_beside_in_use_bytes = 0;
  // Nonzero when the driver refused the address range (this many bytes) that the request's
  // stream and pool needed: the process's virtual address space ran out, not device memory
  // (each stream's pool holds a range of about 9/8 of the device).
  std::size_t address_range_refused_bytes = 0;
};

class CUDACACHE_API OutOfMemoryError : public std::bad_alloc {
 public:
  OutOfMemoryError(OomReport report, std::string message)
      : report_(report), message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const OomReport& report() const noexcept { return report_; }

 private:
  OomReport report_;
  std::string message_;
};

using OomContext = cudacache_oom_context;
using RetryHook = std::function<bool(const OomContext&)>;

// Allocation on the current device. Size 0 returns nullptr.
CUDACACHE_API void* allocate(std::size_t bytes, cudaStream_t stream = nullptr);
CUDACACHE_API void* allocate(std::size_t bytes, int device, cudaStream_t stream);
CUDACACHE_API void deallocate(void* ptr);  // nullptr: no-op
CUDACACHE_API void record_stream(void* ptr, cudaStream_t stream);
CUDACACHE_API void empty_cache();
CUDACACHE_API MemoryStats memory_stats(int device = -1);
CUDACACHE_API void reset_peak_memory_stats(int device = -1);
CUDACACHE_API void reset_accumulated_memory_stats(int device = -1);
CUDACACHE_API std::string memory_stats_json(int device = -1);
CUDACACHE_API std::string snapshot_json(int device = -1);
// Allocation history (cudacache_record_history): max_entries > 0 starts a new recording on
// `device`, 0 stops it and keeps the entries. history_csv: the entries as a replay CSV.
CUDACACHE_API void record_history(std::size_t max_entries, int device = -1);
// With the stacks each entry carries (cudacache_record_history_stacks).
CUDACACHE_API void record_history(std::size_t max_entries, int device, cudacache_stacks stacks);
CUDACACHE_API std::string history_csv(int device = -1);
// Growth detector (cudacache_watch_growth): watch `device` (-1: the current one) for memory
// kept step after step; mark_step() ends a step on every device and returns how many found
// growth at it; growth_report_json() is cudacache_growth_report_json's document.
CUDACACHE_API void watch_growth(unsigned rising_steps, int device = -1,
                                cudacache_stacks stacks = CUDACACHE_STACKS_CPP, bool quiet = false);
CUDACACHE_API int mark_step();
CUDACACHE_API std::string growth_report_json(int device = -1);
CUDACACHE_API void configure(const std::string& config);
CUDACACHE_API int add_retry_hook(RetryHook hook);  // returns a handle for remove_retry_hook
// As cudacache_unregister_retry_hook: no call of the hook runs or starts after it returns.
CUDACACHE_API void remove_retry_hook(int handle);

// Move-only owner of one allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes, cudaStream_t stream = nullptr)
      : ptr_(allocate(bytes, stream)), size_(bytes) {}
  DeviceBuffer(std::size_t bytes, int device, cudaStream_t stream)
      : ptr_(allocate(bytes, device, stream)), size_(bytes) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : ptr_(std::exchange(other.ptr_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      ptr_ = std::exchange(other.ptr_, nullptr);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  ~DeviceBuffer() { reset(); }

  void reset() noexcept {
    if (ptr_ != nullptr) {
      cudacache_deallocate(ptr_);  // cannot fail for a pointer this object owns
      ptr_ = nullptr;
      size_ = 0;
    }
  }
  void* get() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return size_; }
  explicit operator bool() const noexcept { return ptr_ != nullptr; }

 private:
  void* ptr_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace cudacache
