// The process-wide state behind the C and C++ APIs: the effective options, one lazily created
// DeviceAllocator per device, and the retry hooks they share.
//
// Options are fixed at first use (the first call that needs an allocator): built-in defaults,
// then CUDACACHE_CONF, then the keys given to configure(). The allocators are never
// destroyed: at process exit the CUDA runtime may already be gone (PyTorch does the same).
#pragma once

#include "device_allocator.h"
#include "mutex.h"
#include "options.h"
#include "retry_hooks.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

namespace cudacache {

// A cudacache_stacks value as the allocator's StackKind; throws Error (INVALID_ARGUMENT) for
// any other int.
StackKind to_stack_kind(int stacks);
// watch_growth's rising steps: 0 or 2..GrowthSteps::kMax, else Error (INVALID_ARGUMENT).
unsigned checked_rising_steps(unsigned rising_steps);

class ProcessAllocators {
 public:
  static ProcessAllocators& instance();

  // Throws Error (CONFIG) after first use or for a bad string.
  void configure(std::string_view config);
  // The allocator of `device` (-1: the current device). Throws Error (INVALID_DEVICE, CONFIG).
  DeviceAllocator& device(int device);
  // The allocators created so far.
  std::vector<DeviceAllocator*> created() const;
  // Ends a growth-detector step on every allocator created so far; how many found growth.
  int mark_step();
  RetryHooks& hooks() CUDACACHE_EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    return *hooks_;
  }
  // Effective options (those of first use, or what first use would take now) and their docs.
  std::string config_help();
  // Tests only (cudacache_testing_reset): destroys every allocator (its cached memory goes back
  // to the device), forgets the options, the configure() keys and the hooks. Not safe while
  // another thread uses them.
  void reset_for_testing();

 private:
  ProcessAllocators();
  void start() CUDACACHE_REQUIRES(mutex_);  // fixes the options; throws Error (CONFIG)
  Options pending_options() const CUDACACHE_REQUIRES(mutex_);
  // CUDACACHE_CONF, then `configured` (configure()'s strings joined): what first use applies.
  static Options options_from(const std::string& configured);

  Mutex mutex_;  // guards everything below except the atomics
  bool started_ CUDACACHE_GUARDED_BY(mutex_) = false;
  std::string configured_ CUDACACHE_GUARDED_BY(mutex_);  // keys from configure()
  Options options_ CUDACACHE_GUARDED_BY(mutex_);
  int device_count_ = 0;                                         // written once, under mutex_
  std::unique_ptr<std::atomic<DeviceAllocator*>[]> allocators_;  // device_count_ entries
  std::atomic<bool> ready_{false};                               // start() done: lock-free reads
  std::shared_ptr<RetryHooks> hooks_ CUDACACHE_GUARDED_BY(mutex_);
};

}  // namespace cudacache
