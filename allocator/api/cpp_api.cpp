// The C++ API (include/cudacache/cudacache.hpp) over the process-wide ProcessAllocators.
#include "device_stats.h"
#include "error_report.h"
#include "log.h"
#include "process_allocators.h"

#include <cudacache/cudacache.hpp>

#include <cstdio>

namespace cudacache {

void* allocate(std::size_t bytes, cudaStream_t stream) {
  return ProcessAllocators::instance().device(-1).allocate(bytes, stream);
}

void* allocate(std::size_t bytes, int device, cudaStream_t stream) {
  return ProcessAllocators::instance().device(device).allocate(bytes, stream);
}

void deallocate(void* ptr) {
  if (ptr == nullptr) return;
  for (DeviceAllocator* allocator : ProcessAllocators::instance().created()) {
    if (allocator->deallocate_if_owned(ptr)) return;
  }
  report::unknown_pointer("cudacache: free of " + report::pointer_text(ptr) +
                          ", which cudacache did not allocate (or already freed)");
}

void record_stream(void* ptr, cudaStream_t stream) {
  for (DeviceAllocator* allocator : ProcessAllocators::instance().created()) {
    if (allocator->record_stream_if_owned(ptr, stream)) return;
  }
  report::unknown_pointer("cudacache: record_stream on " + report::pointer_text(ptr) +
                          ", which cudacache did not allocate");
}

void empty_cache() {
  for (DeviceAllocator* allocator : ProcessAllocators::instance().created())
    allocator->empty_cache();
}

MemoryStats memory_stats(int device) {
  return ProcessAllocators::instance().device(device).stats();
}

void reset_peak_memory_stats(int device) {
  ProcessAllocators::instance().device(device).reset_peak_stats();
}

void reset_accumulated_memory_stats(int device) {
  ProcessAllocators::instance().device(device).reset_accumulated_stats();
}

std::string memory_stats_json(int device) {
  return DeviceStats::to_json(ProcessAllocators::instance().device(device).stats());
}

std::string snapshot_json(int device) {
  return ProcessAllocators::instance().device(device).snapshot_json();
}

void record_history(std::size_t max_entries, int device) {
  ProcessAllocators::instance().device(device).record_history(max_entries);
}

void record_history(std::size_t max_entries, int device, cudacache_stacks stacks) {
  ProcessAllocators::instance().device(device).record_history(max_entries, to_stack_kind(stacks));
}

void watch_growth(unsigned rising_steps, int device, cudacache_stacks stacks, bool quiet) {
  ProcessAllocators::instance().device(device).watch_growth(checked_rising_steps(rising_steps),
                                                            to_stack_kind(stacks), quiet);
}

int mark_step() { return ProcessAllocators::instance().mark_step(); }

std::string growth_report_json(int device) {
  return growth_report_json(ProcessAllocators::instance().device(device).growth_report());
}

std::string history_csv(int device) {
  return ProcessAllocators::instance().device(device).history_csv();
}

void configure(const std::string& config) { ProcessAllocators::instance().configure(config); }

int add_retry_hook(RetryHook hook) {
  return ProcessAllocators::instance().hooks().add(std::move(hook));
}

void remove_retry_hook(int handle) {
  if (!ProcessAllocators::instance().hooks().remove(handle)) {
    report::invalid_argument("cudacache: unknown retry hook handle " + std::to_string(handle));
  }
}

}  // namespace cudacache
